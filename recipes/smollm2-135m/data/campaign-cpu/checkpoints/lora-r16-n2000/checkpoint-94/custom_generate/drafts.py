"""Where draft tokens come from before the model has predicted anything for a position.

Following the reference implementation, fresh draft slots are filled with tokens drawn at random from the row's own
prompt: Jacobi Forcing models are trained to recover from exactly this kind of noise, and trajectories for training are
recorded from this same loop. Each row draws from its own generator, seeded from the seed and the row's prompt, so the
drafts a prompt gets (and so its number of forwards and its recorded trajectory) do not depend on which other prompts
share its batch. Drafts never change the output, only how fast it is reached.
"""

from __future__ import annotations

import hashlib

import torch


class PromptDrafter:
    """Draws draft tokens uniformly from each row's prompt tokens (padding excluded)."""

    def __init__(self, input_ids: torch.Tensor, valid: torch.Tensor, seed: int = 0) -> None:
        # Drafts are assembled on the host with the rest of each step's layout, so the prompts are kept there.
        valid = valid.cpu()
        self.prompts = [row[mask].tolist() or [0] for row, mask in zip(input_ids.cpu(), valid, strict=True)]
        self.generators = [torch.Generator(device="cpu").manual_seed(stable_seed(seed, p)) for p in self.prompts]

    def draw(self, row: int, count: int) -> list[int]:
        """`count` tokens of row `row`'s prompt (original batch index), drawn with replacement."""
        if count <= 0:
            return []
        prompt = self.prompts[row]
        index = torch.randint(len(prompt), (count,), generator=self.generators[row]).tolist()
        return [prompt[i] for i in index]


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text, the same in every process and run (Python's hash() is salted per run)."""
    digest = hashlib.sha256(":".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
