"""Prompts in batches: consecutive slices, left-padded into generate's inputs (collection and evaluation batch the
same way)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import torch

T = TypeVar("T")


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device: str | torch.device | None = None) -> dict:
    """input_ids and attention_mask of prompts padded on the left (generation appends on the right)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def in_batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most `size` items, in order (collection and evaluation batch prompts the same way)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
