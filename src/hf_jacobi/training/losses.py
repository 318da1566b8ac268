"""The Jacobi Forcing losses, computed from one forward over a packed batch (and an optional anchor to the base model).

Consistency pulls the prediction at each noisy token (from its block's first wrong token on) towards the prediction
at the clean token of the same position, taken from the same forward and detached: the teacher is the model's own
autoregressive view, so the student learns to jump from a noisy block to the fixed point. The autoregressive loss on
the clean tokens keeps the model's greedy output (what Jacobi decoding returns, losslessly) from drifting.

The AR loss holds only the argmax: trained on its own greedy answers the model grows sharper on them and less likely
on text it did not write (the NLL of human-written code rises). `base_kl_loss` holds the whole next-token
distribution at the same tokens to the untrained model's, which is what keeps that quality.

Each loss is a sum over its items divided by a count of items. With gradient accumulation the count is taken over the
whole accumulated batch (`LossItems.count`), as transformers and TRL do for their token losses: dividing each
micro-batch by its own count would weigh the items of a short micro-batch more than those of a long one, and make
accumulation 4 x batch 1 train differently from batch 4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""`ar_targets` value of a token that predicts nothing (PyTorch's and transformers' ignore index)."""

NO_TEACHER = -1
"""`teacher_index` value of a token that gets no consistency loss."""

CONSISTENCY_NORMALIZATIONS = ("blocks", "tokens", "reference")
CONSISTENCY_TARGETS = ("soft", "fixed_point")


class LossItems(NamedTuple):
    """What the two losses are divided by, counted over the batches that make one optimizer step.

    `ar`: tokens with a next-token target (`ar_targets != IGNORE_INDEX`). `consistency`: with "blocks"
    normalization, the packed blocks (converged ones included: they count as blocks the model already gets right);
    with "tokens", the noisy tokens that have a teacher; with "reference", the rows that hold a block. `anchored`:
    the predictions the KL anchor reads (the collator's `anchored`: the AR targets' tokens, plus every token of an
    anchor text).
    """

    ar: torch.Tensor
    consistency: torch.Tensor
    anchored: torch.Tensor

    @classmethod
    def count(cls, batches: Iterable[Mapping[str, torch.Tensor]], normalization: str) -> LossItems:
        ar, consistency, anchored = 0, 0, 0
        for batch in batches:
            ar = ar + (batch["ar_targets"] != IGNORE_INDEX).sum()
            if normalization == "tokens":
                consistency = consistency + (batch["teacher_index"] != NO_TEACHER).sum()
            elif normalization == "reference":
                consistency = consistency + (_blocks_per_row(batch["block_ids"]) > 0).sum()
            else:
                consistency = consistency + _blocks_per_row(batch["block_ids"]).sum()
            anchored = anchored + batch.get("anchored", batch["ar_targets"] != IGNORE_INDEX).sum()
        return cls(torch.as_tensor(ar), torch.as_tensor(consistency), torch.as_tensor(anchored))


def consistency_loss(
    logits: torch.Tensor,
    teacher_index: torch.Tensor,
    block_ids: torch.Tensor,
    normalization: str = "blocks",
    num_items: torch.Tensor | int | None = None,
    diagnostics: dict[str, torch.Tensor] | None = None,
    targets: str = "soft",
    fixed_points: torch.Tensor | None = None,
) -> torch.Tensor:
    """Soft cross entropy of the student logits against the detached teacher distribution (`targets="soft"`), or
    cross entropy against the fixed point's token alone (`"fixed_point"`).

    Acceptance needs only the student's most likely token to be the fixed point's; the soft target also asks it to
    copy the teacher's whole distribution, whose entropy a small model's clean predictions keep high. The hard target
    puts all of the gradient on the token that decides acceptance, at the price of the teacher's ranking of the rest.

    A soft cross entropy never goes under the teacher's own entropy: what a run logs as its consistency loss is that
    floor plus the KL a model can still remove, and only the KL says how far training has to go. So when
    `diagnostics` is a dict, it receives sums over this batch's noisy tokens (detached, so that batches and processes
    add up; nothing when there are none): `teacher_entropy`, the floor, and `agreement`, the tokens whose most likely
    token is the teacher's (what acceptance needs, at every depth).

    Args:
        logits: [B, L, V].
        teacher_index: [B, L]; at a student (noisy) token, the index of its teacher (clean) token, else NO_TEACHER.
        block_ids: [B, L], block number of each token (NO_BLOCK outside blocks); says how many blocks each row packed.
        normalization: "blocks": the mean over each block's student tokens, summed over blocks and
            divided by the number of blocks, converged ones included; "tokens": summed over student tokens and divided
            by their number; "reference": as the reference code (batch 1): each row's mean over its student tokens,
            divided by the row's number of blocks, then the mean over rows.
        num_items: that number of blocks, tokens or rows over the whole accumulated batch; None counts this batch's.
        targets: "soft" or "fixed_point" (see above).
        fixed_points: [B, L], with "fixed_point": the token each clean position predicts (the AR targets, aligned);
            where it holds IGNORE_INDEX (or is None), the teacher's most likely token, which is the fixed point's
            wherever the forward is exact.
    """
    rows, cols = (teacher_index != NO_TEACHER).nonzero(as_tuple=True)
    if rows.numel() == 0:
        return logits.sum() * 0.0  # keeps the graph (and DDP's gradient sync) intact when nothing is noisy
    student = logits[rows, cols].float()
    teacher = logits[rows, teacher_index[rows, cols]].detach().float()
    teacher_choice = teacher.argmax(-1)
    # the teacher's distribution, once, where the soft target or the entropy reads it
    teacher_log_q = teacher.log_softmax(-1) if targets == "soft" or diagnostics is not None else None
    if targets == "fixed_point":
        hard = teacher_choice
        if fixed_points is not None:
            known = fixed_points[rows, teacher_index[rows, cols]]
            hard = torch.where(known != IGNORE_INDEX, known, hard)
        per_token = F.cross_entropy(student, hard, reduction="none")
    else:
        per_token = -(teacher_log_q.exp() * student.log_softmax(-1)).sum(-1)
    if diagnostics is not None:
        with torch.no_grad():
            diagnostics["teacher_entropy"] = -(teacher_log_q.exp() * teacher_log_q).sum(-1).sum()
            diagnostics["agreement"] = (student.argmax(-1) == teacher_choice).float().sum()
    if normalization == "tokens":
        return per_token.sum() / _divisor(num_items, per_token.numel())
    row_blocks = _blocks_per_row(block_ids)
    if normalization == "reference":
        per_row = _group_means(per_token, rows, block_ids.shape[0]) / row_blocks.clamp(min=1)
        return per_row.sum() / _divisor(num_items, int((row_blocks > 0).sum()))
    offsets = row_blocks.cumsum(0) - row_blocks
    group = offsets[rows] + block_ids[rows, cols]  # one slot per (row, block)
    total = int(row_blocks.sum())
    return _group_means(per_token, group, total).sum() / _divisor(num_items, total)


def _group_means(values: torch.Tensor, group: torch.Tensor, size: int) -> torch.Tensor:
    """The mean of `values` in each of `size` groups (`group` numbers each value's); 0 for an empty group."""
    sums = torch.zeros(size, device=values.device).index_add(0, group, values)
    counts = torch.zeros(size, device=values.device).index_add(0, group, torch.ones_like(values))
    return sums / counts.clamp(min=1)


def ar_loss(logits: torch.Tensor, targets: torch.Tensor, num_items: torch.Tensor | int | None = None) -> torch.Tensor:
    """Next-token cross entropy where `targets` is set (already aligned: no shift), summed and divided by `num_items`
    (the targets of the whole accumulated batch; None counts this batch's)."""
    targeted = targets != IGNORE_INDEX
    if not targeted.any():
        return logits.sum() * 0.0
    # the targeted rows only: the others would be ignored anyway, after a float32 copy of the batch's whole logits
    total = F.cross_entropy(logits[targeted].float(), targets[targeted], reduction="sum")
    return total / _divisor(num_items, int(targeted.sum()))


def base_kl_loss(
    logits: torch.Tensor,
    base_logits: torch.Tensor,
    anchored: torch.Tensor,
    num_items: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """KL(base || model) of the next-token distributions where `anchored` (bool, [B, L]) is set: the tokens the AR
    loss covers and those of anchor texts. Summed and divided by `num_items` (the anchored predictions over the
    accumulated batch; None counts this batch's).

    The direction is the distillation one: it is large where the base model puts mass the trained model dropped, which
    is what raises the NLL of text the model did not write itself.
    """
    if not anchored.any():
        return logits.sum() * 0.0
    student = logits[anchored].float().log_softmax(-1)
    base = base_logits[anchored].detach().float().log_softmax(-1)
    total = F.kl_div(student, base, log_target=True, reduction="sum")
    return total / _divisor(num_items, int(anchored.sum()))


def _blocks_per_row(block_ids: torch.Tensor) -> torch.Tensor:
    return block_ids.amax(dim=1) + 1  # blocks are numbered from 0; a row without blocks holds NO_BLOCK (-1) only


def _divisor(num_items: torch.Tensor | int | None, local: int) -> torch.Tensor | int:
    if num_items is None:
        return local
    return torch.as_tensor(num_items).clamp(min=1)  # an accumulated batch with no item gives 0, not 0 / 0
