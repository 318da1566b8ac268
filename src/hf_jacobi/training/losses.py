"""The two Jacobi Forcing losses, computed from one forward over a packed batch.

Consistency pulls the prediction at each noisy token (from its block's first wrong token on) towards the prediction
at the clean token of the same position, taken from the same forward and detached: the teacher is the model's own
autoregressive view, so the student learns to jump from a noisy block to the fixed point. The autoregressive loss on
the clean tokens keeps the model's greedy output (what Jacobi decoding returns, losslessly) from drifting.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CONSISTENCY_NORMALIZATIONS = ("blocks", "tokens")


def consistency_loss(
    logits: torch.Tensor, teacher_index: torch.Tensor, block_ids: torch.Tensor, normalization: str = "blocks"
) -> torch.Tensor:
    """Soft cross entropy of the student logits against the detached teacher distribution.

    Args:
        logits: [B, L, V].
        teacher_index: [B, L]; at a student (noisy) token, the index of its teacher (clean) token, else -1.
        block_ids: [B, L], block number of each token (-1 outside blocks); says how many blocks each row packed.
        normalization: "blocks" (the paper's): average over each block's student tokens, then over all packed
            blocks, converged ones included; "tokens": average over all student tokens.
    """
    if normalization not in CONSISTENCY_NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {list(CONSISTENCY_NORMALIZATIONS)}, got {normalization!r}.")
    rows, cols = (teacher_index >= 0).nonzero(as_tuple=True)
    if rows.numel() == 0:
        return logits.sum() * 0.0  # keeps the graph (and DDP's gradient sync) intact when nothing is noisy
    student = logits[rows, cols].float()
    teacher = logits[rows, teacher_index[rows, cols]].detach().float()
    per_token = -(teacher.softmax(-1) * student.log_softmax(-1)).sum(-1)
    if normalization == "tokens":
        return per_token.mean()
    row_blocks = block_ids.amax(dim=1) + 1  # blocks packed in each row
    offsets = row_blocks.cumsum(0) - row_blocks
    group = offsets[rows] + block_ids[rows, cols]  # one slot per (row, block)
    total = int(row_blocks.sum())
    sums = torch.zeros(total, device=logits.device).index_add(0, group, per_token)
    counts = torch.zeros(total, device=logits.device).index_add(0, group, torch.ones_like(per_token))
    return (sums / counts.clamp(min=1)).sum() / total


def ar_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy where `targets` is set (targets are already aligned: no shift)."""
    if not (targets >= 0).any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
