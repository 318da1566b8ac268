"""Where draft tokens come from before the model has predicted anything for a position.

Following the reference implementation, fresh draft slots are filled with tokens drawn at random from the row's own
prompt: Jacobi Forcing models are trained to recover from exactly this kind of noise, and trajectories for training are
recorded from this same loop. A seeded generator keeps the number of forwards reproducible; drafts never change the
output, only how fast it is reached.
"""

from __future__ import annotations

import torch


class PromptDrafter:
    """Draws draft tokens uniformly from each row's prompt tokens (padding excluded)."""

    def __init__(self, input_ids: torch.Tensor, valid: torch.Tensor, seed: int = 0) -> None:
        # Valid tokens first, in order, so that index k < count picks the k-th real prompt token.
        order = torch.sort(valid.to(torch.int8), dim=1, descending=True, stable=True).indices
        self.pool = torch.gather(input_ids, 1, order)
        self.counts = valid.sum(dim=1).clamp(min=1)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def draw(self, rows: torch.Tensor, count: int) -> torch.Tensor:
        """LongTensor [len(rows), count] of prompt tokens of the given rows (original batch indices)."""
        uniform = torch.rand((rows.shape[0], count), generator=self.generator).to(rows.device)
        index = (uniform * self.counts[rows, None]).long().clamp(max=self.pool.shape[1] - 1)
        return torch.gather(self.pool[rows], 1, index)
