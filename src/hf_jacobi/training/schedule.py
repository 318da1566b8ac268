"""Which recorded state of each block a training sequence shows: the progressive noise schedule.

Within a window of W consecutive blocks the target noise rises linearly from 0 to 1 (`progressive`), so a sequence
mixes nearly clean blocks with very noisy ones and the model learns to recover from every level while conditioning
on noisy pasts. `reverse` runs the window from 1 down to 0 and `random` draws each target uniformly; the paper's
ablation ranks them progressive > random > reverse. Each block then shows the recorded state whose noise is closest to
its target, ties broken at random. The choice is made at collate time with a generator the caller seeds, so each epoch
sees fresh noisy views of the same trajectories: with one fixed view per block the model memorizes those exact states.
"""

from __future__ import annotations

import torch

from ..data.trajectories import noise_level

NOISE_SCHEDULES = ("progressive", "random", "reverse")
"""Accepted schedule names; `JacobiForcingConfig` checks the name and the window, so the functions here trust them."""


def target_noise(num_blocks: int, window: int, schedule: str, generator: torch.Generator) -> list[float]:
    """The noise level each of `num_blocks` consecutive blocks should show."""
    if schedule == "random":
        return torch.rand(num_blocks, generator=generator, dtype=torch.float64).tolist()
    ramp = torch.linspace(0, 1, window, dtype=torch.float64).tolist()
    if schedule == "reverse":
        ramp = ramp[::-1]
    return [ramp[j % window] for j in range(num_blocks)]


def choose_states(states: list[list[int]], fixed_point: list[int], target: float, generator: torch.Generator) -> int:
    """Index of the state whose noise is closest to `target`; among equally close ones, one at random."""
    distances = [abs(noise_level(state, fixed_point) - target) for state in states]
    best = min(distances)
    ties = [i for i, d in enumerate(distances) if d - best < 1e-9]
    return ties[int(torch.randint(len(ties), (1,), generator=generator))]
