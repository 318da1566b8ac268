"""Packing trajectories into Jacobi Forcing training sequences, and the collator that batches them.

A sequence is [prompt][k_0][c_0][k_1][c_1]...: each block's noisy state (chosen by the noise schedule) followed by its
clean fixed point, both at the same position ids (prompt length + j*n + offset), so the model sees each at the position
it will occupy when decoding. One forward then gives both losses: next-token cross entropy on the clean tokens (the
autoregressive view) and, at each noisy token from the block's first wrong token on, the distance to the clean token's
prediction at the same position (consistency). Everything a loss needs is laid out here as per-token tensors, so the
trainer's loss is plain indexing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..decoding.drafts import stable_seed
from ..decoding.kv import AttentionLayout
from .masks import CLEAN, FULL_LAYOUT, NOISY, PAD, PROMPT, training_attention_mask
from .schedule import check_schedule, choose_states, target_noise
from .trajectories import first_mismatch

IGNORE_INDEX = -100


@dataclass
class PackedSequence:
    """One training sequence, token by token.

    `ar_targets[i]` is the token the logits at i must predict (IGNORE_INDEX where none); `teacher_index[i]`, at a
    noisy token that gets consistency loss, is the index of the clean token at the same position (else -1); `block_ids`
    numbers blocks from 0 (-1 for the prompt).
    """

    input_ids: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    segment_ids: list[int] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    ar_targets: list[int] = field(default_factory=list)
    teacher_index: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def extend(self, tokens: Sequence[int], first_position: int, segment: int, block: int) -> int:
        """Appends a span; returns the index of its first token."""
        start = len(self.input_ids)
        self.input_ids.extend(tokens)
        self.position_ids.extend(range(first_position, first_position + len(tokens)))
        self.segment_ids.extend([segment] * len(tokens))
        self.block_ids.extend([block] * len(tokens))
        self.ar_targets.extend([IGNORE_INDEX] * len(tokens))
        self.teacher_index.extend([-1] * len(tokens))
        return start


def pack_trajectory(
    prompt_ids: Sequence[int],
    noisy_states: Sequence[Sequence[int]],
    fixed_points: Sequence[Sequence[int]],
    next_token: int | None = None,
    prompt_ar_loss: bool = True,
) -> PackedSequence:
    """Lays out one sequence from the chosen noisy state and the fixed point of each block.

    Args:
        next_token: the token that follows the last packed block in the completion, if any, so that the last clean
            token gets its next-token target too.
        prompt_ar_loss: whether prompt tokens predict the next prompt token (the reference trains on them). The last
            prompt token always predicts the first completion token: that is the model's first generated token.
    """
    packed = PackedSequence()
    prompt_len = len(prompt_ids)
    packed.extend(prompt_ids, 0, PROMPT, -1)
    if prompt_ar_loss:
        packed.ar_targets[: prompt_len - 1] = list(prompt_ids[1:])
    previous_clean_end = prompt_len - 1
    for j, (noisy, clean) in enumerate(zip(noisy_states, fixed_points, strict=True)):
        n = len(clean)
        if len(noisy) != n:
            raise ValueError(f"block {j}: a noisy state of {len(noisy)} tokens for a fixed point of {n}")
        first_position = prompt_len + j * n
        noisy_start = packed.extend(noisy, first_position, NOISY, j)
        clean_start = packed.extend(clean, first_position, CLEAN, j)
        packed.ar_targets[previous_clean_end] = clean[0]
        packed.ar_targets[clean_start : clean_start + n - 1] = list(clean[1:])
        for t in range(first_mismatch(list(noisy), list(clean)), n):
            packed.teacher_index[noisy_start + t] = clean_start + t
        previous_clean_end = clean_start + n - 1
    if next_token is not None and fixed_points:
        packed.ar_targets[previous_clean_end] = next_token
    return packed


@dataclass
class JacobiForcingCollator:
    """Turns trajectory rows (see `collect_trajectories`) into padded batches with the noise-aware 4D mask.

    The noisy state of each block is chosen here, at collate time, from a generator seeded by (seed, epoch, prompt
    id): every epoch shows fresh noise, and a run resumed from a checkpoint sees the same views as an uninterrupted one.
    The trainer advances `epoch` and sets `mask_dtype` and `layout` (the model's layer kinds and sliding window).

    Output keys: input_ids, position_ids, attention_mask ([B, 1, L, L] additive, a dict of them by layer kind for
    models that mix kinds, or absent with `mask_format="flex"`, where the trainer builds BlockMasks from segment_ids),
    segment_ids, ar_targets, teacher_index, block_ids.
    """

    pad_token_id: int
    noise_schedule: str = "progressive"
    noise_window: int = 16
    max_length: int | None = None
    prompt_ar_loss: bool = True
    seed: int = 0
    mask_dtype: torch.dtype = torch.float32
    mask_format: str = "additive"
    pad_to_multiple_of: int | None = None
    layout: AttentionLayout = FULL_LAYOUT
    epoch: int = 0

    def __post_init__(self) -> None:
        check_schedule(self.noise_schedule, self.noise_window)
        if self.mask_format not in ("additive", "flex"):
            raise ValueError(f"mask_format must be 'additive' or 'flex', got {self.mask_format!r}.")

    def blocks_that_fit(self, prompt_len: int, block_size: int, num_blocks: int) -> int:
        """How many blocks a sequence can hold within max_length (each block takes 2n tokens)."""
        if self.max_length is None:
            return num_blocks
        return max(0, min(num_blocks, (self.max_length - prompt_len) // (2 * block_size)))

    def pack(self, example: dict[str, Any]) -> PackedSequence:
        generator = torch.Generator().manual_seed(stable_seed(self.seed, self.epoch, example["prompt_id"]))
        fixed_points = example["fixed_points"]
        n = example["block_size"]
        kept = self.blocks_that_fit(len(example["prompt_ids"]), n, len(fixed_points))
        targets = target_noise(kept, self.noise_window, self.noise_schedule, generator)
        noisy = [
            example["states"][j][choose_states(example["states"][j], fixed_points[j], targets[j], generator)]
            for j in range(kept)
        ]
        completion = example["completion_ids"]
        next_token = completion[kept * n] if kept * n < len(completion) else None
        return pack_trajectory(example["prompt_ids"], noisy, fixed_points[:kept], next_token, self.prompt_ar_loss)

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        packed = [self.pack(example) for example in examples]
        length = max(len(p) for p in packed)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {
            "input_ids": _padded([p.input_ids for p in packed], length, self.pad_token_id),
            "position_ids": _padded([p.position_ids for p in packed], length, 0),
            "segment_ids": _padded([p.segment_ids for p in packed], length, PAD),
            "block_ids": _padded([p.block_ids for p in packed], length, -1),
            "ar_targets": _padded([p.ar_targets for p in packed], length, IGNORE_INDEX),
            "teacher_index": _padded([p.teacher_index for p in packed], length, -1),
        }
        if self.mask_format == "additive":
            batch["attention_mask"] = training_attention_mask(
                batch["segment_ids"], batch["position_ids"], self.mask_dtype, self.layout
            )
        return batch


def _padded(rows: list[list[int]], length: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out
