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
from typing import TYPE_CHECKING, Any

import torch

from ..data.trajectories import first_mismatch
from ..decoding.drafts import stable_seed
from .losses import IGNORE_INDEX, NO_TEACHER
from .masks import Segment
from .schedule import choose_states, target_noise

if TYPE_CHECKING:
    from .config import JacobiForcingConfig

NO_BLOCK = -1
"""`block_ids` value of a token outside every block (the prompt and padding)."""


@dataclass
class PackedSequence:
    """One training sequence, token by token.

    `ar_targets[i]` is the token the logits at i must predict (IGNORE_INDEX where none); `teacher_index[i]`, at a
    noisy token that gets consistency loss, is the index of the clean token at the same position (else NO_TEACHER);
    `block_ids` numbers blocks from 0 (NO_BLOCK for the prompt).
    """

    input_ids: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    segment_ids: list[int] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    ar_targets: list[int] = field(default_factory=list)
    teacher_index: list[int] = field(default_factory=list)
    anchored: list[bool] | None = None
    """Where the KL anchor reads the prediction: every token with an AR target (the default, None), or, for an anchor
    text (`pack_anchor_text`), every token but the last, with no AR target at all."""

    def anchor_mask(self) -> list[bool]:
        if self.anchored is not None:
            return self.anchored
        return [target != IGNORE_INDEX for target in self.ar_targets]

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
        self.teacher_index.extend([NO_TEACHER] * len(tokens))
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
    packed.extend(prompt_ids, 0, Segment.PROMPT, NO_BLOCK)
    if prompt_ar_loss:
        packed.ar_targets[: prompt_len - 1] = list(prompt_ids[1:])
    previous_clean_end = prompt_len - 1
    for j, (noisy, clean) in enumerate(zip(noisy_states, fixed_points, strict=True)):
        n = len(clean)
        if len(noisy) != n:
            raise ValueError(f"block {j}: a noisy state of {len(noisy)} tokens for a fixed point of {n}")
        first_position = prompt_len + j * n
        noisy_start = packed.extend(noisy, first_position, Segment.NOISY, j)
        clean_start = packed.extend(clean, first_position, Segment.CLEAN, j)
        packed.ar_targets[previous_clean_end] = clean[0]
        packed.ar_targets[clean_start : clean_start + n - 1] = list(clean[1:])
        for t in range(first_mismatch(list(noisy), list(clean)), n):
            packed.teacher_index[noisy_start + t] = clean_start + t
        previous_clean_end = clean_start + n - 1
    if next_token is not None and fixed_points:
        packed.ar_targets[previous_clean_end] = next_token
    return packed


def pack_anchor_text(input_ids: Sequence[int]) -> PackedSequence:
    """Lays out an anchor text (human-written, see `data.anchor_texts`): one causal span with no block and no AR
    target, whose every prediction the KL anchor holds to the base model's (the model is not trained to fit it)."""
    packed = PackedSequence()
    packed.extend(input_ids, 0, Segment.PROMPT, NO_BLOCK)
    packed.anchored = [True] * (len(input_ids) - 1) + [False]
    return packed


ANCHOR_TEXT = "anchor_text"
"""The column that marks an anchor-text row among trajectory rows (`with_anchor_texts`)."""


@dataclass
class JacobiForcingCollator:
    """Turns trajectory rows (see `collect_trajectories`) into right-padded batches of packed sequences.

    The noisy state of each block is chosen here, at collate time, from a generator seeded by (seed, epoch, prompt
    id): every epoch shows fresh noise, and a run resumed from a checkpoint sees the same views as an uninterrupted one.
    The trainer advances `epoch`; nothing else changes after construction. The settings are trusted as given: build
    the collator with `from_config` from a validated `JacobiForcingConfig`.

    A row marked `ANCHOR_TEXT` (see `training.dataset.with_anchor_texts`) is an anchor text: `prompt_ids` holds it,
    packed alone with no block (`pack_anchor_text`).

    Output keys: input_ids, position_ids, segment_ids (`Segment` values), ar_targets, teacher_index, block_ids, and
    anchored (bool: where the KL anchor reads a prediction); each [B, L], with L a multiple of `pad_to_multiple_of`
    when it is set. There is no attention mask: how the noise-aware mask is expressed depends on the model (dtype,
    attention backend, sliding windows), so the trainer builds it from segment_ids and position_ids
    (`training.masks.NoiseAwareMask`), as a model builds its own causal mask.
    """

    pad_token_id: int
    noise_schedule: str = "progressive"
    noise_window: int = 16
    max_length: int | None = None
    prompt_ar_loss: bool = True
    seed: int = 0
    pad_to_multiple_of: int | None = None
    epoch: int = 0

    @classmethod
    def from_config(cls, args: JacobiForcingConfig, pad_token_id: int) -> JacobiForcingCollator:
        """The collator a run with these settings uses, its noise seeded by the run's `sampling_seed`."""
        return cls(
            pad_token_id=pad_token_id,
            noise_schedule=args.noise_schedule,
            noise_window=args.noise_window,
            max_length=args.max_length,
            prompt_ar_loss=args.prompt_ar_loss,
            seed=args.sampling_seed,
            pad_to_multiple_of=args.pad_to_multiple_of,
        )

    def blocks_that_fit(self, prompt_len: int, block_size: int, num_blocks: int) -> int:
        """How many blocks a sequence can hold within max_length (each block takes 2n tokens)."""
        if self.max_length is None:
            return num_blocks
        return max(0, min(num_blocks, (self.max_length - prompt_len) // (2 * block_size)))

    def packed_length(self, prompt_len: int, block_size: int, num_blocks: int, anchor_text: bool = False) -> int:
        """The length `pack` gives a row: an anchor text cut at max_length, else the prompt and a noisy and a clean
        copy of each block that fits (a sampler reads it to group rows without packing them)."""
        if anchor_text:
            return min(prompt_len, self.max_length) if self.max_length else prompt_len
        return prompt_len + 2 * block_size * self.blocks_that_fit(prompt_len, block_size, num_blocks)

    def pack(self, example: dict[str, Any]) -> PackedSequence:
        if example.get(ANCHOR_TEXT, False):
            return pack_anchor_text(example["prompt_ids"][: self.max_length])
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
        return {
            "input_ids": _padded([p.input_ids for p in packed], length, self.pad_token_id),
            "position_ids": _padded([p.position_ids for p in packed], length, 0),
            "segment_ids": _padded([p.segment_ids for p in packed], length, Segment.PADDING),
            "block_ids": _padded([p.block_ids for p in packed], length, NO_BLOCK),
            "ar_targets": _padded([p.ar_targets for p in packed], length, IGNORE_INDEX),
            "teacher_index": _padded([p.teacher_index for p in packed], length, NO_TEACHER),
            "anchored": _padded([p.anchor_mask() for p in packed], length, False).bool(),
        }


def _padded(rows: list[list[int]], length: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


@dataclass
class CleanView:
    """The autoregressive view of a packed batch: each row's prompt and clean tokens, in order, right-padded.

    Under the noise-aware mask a clean token sees the prompt and the clean tokens before it, never a noisy one, and the
    clean blocks' position ids continue the prompt's without a gap: the packed forward's predictions at those tokens
    are those of a plain causal forward over this view, which is about half as long and needs no 4D mask. What reads
    only the clean tokens' predictions (the base model of the KL anchor) runs on it.

    `order[b, i]` is the packed column of the view's token i; `attention_mask` marks the real tokens (the padding
    columns of a shorter row point at packed column 0 and hold no AR target and no anchor).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    ar_targets: torch.Tensor
    anchored: torch.Tensor
    order: torch.Tensor

    @classmethod
    def of(
        cls,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        ar_targets: torch.Tensor,
        anchored: torch.Tensor | None = None,
    ) -> CleanView:
        """`anchored`: the collator's mask of the predictions the KL anchor reads (None: the AR targets')."""
        if anchored is None:
            anchored = ar_targets != IGNORE_INDEX
        kept = (segment_ids == Segment.PROMPT) | (segment_ids == Segment.CLEAN)
        lengths = kept.sum(1)
        width = max(int(lengths.max()), 1)
        # a stable sort on "not kept" lists each row's kept columns first, in their packed order
        order = torch.sort((~kept).to(torch.uint8), dim=1, stable=True).indices[:, :width]
        real = torch.arange(width, device=segment_ids.device) < lengths[:, None]
        order = order.masked_fill(~real, 0)
        targets = ar_targets.gather(1, order).masked_fill(~real, IGNORE_INDEX)
        return cls(
            input_ids=input_ids.gather(1, order),
            position_ids=position_ids.gather(1, order).masked_fill(~real, 0),
            attention_mask=real.long(),
            ar_targets=targets,
            anchored=anchored.gather(1, order) & real,
            order=order,
        )

    def targeted_columns(self) -> torch.Tensor:
        """The view's columns where some row is anchored: the only predictions the anchor reads."""
        return self.anchored.any(0).nonzero().squeeze(1)
