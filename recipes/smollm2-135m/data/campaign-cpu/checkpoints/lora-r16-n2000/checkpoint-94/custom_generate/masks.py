"""Attention masks for forwards whose tokens are not a plain causal run: Jacobi branches and packed training blocks.

Both the decoding loop (holes in a shared cache, candidate branches) and the training collator (noisy and clean
copies of a block at the same positions) need masks that say exactly which token sees which. They are built as
additive float masks in the model's dtype, the one format that sdpa and eager attention both read exactly, and sliding
windows are applied on position ids, never on indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class AttentionLayout:
    """Which mask kinds the model's layers use, and the sliding window when one is used.

    `as_dict` is True for models whose layers mix kinds: they take a dict of masks keyed by layer type.
    """

    kinds: tuple[str, ...]
    sliding_window: int | None

    @property
    def as_dict(self) -> bool:
        return len(self.kinds) > 1

    @classmethod
    def from_config(cls, config) -> AttentionLayout:
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if layer_types:
            kinds = tuple(sorted(set(layer_types)))
            unsupported = [k for k in kinds if k not in (FULL, SLIDING)]
            if unsupported:
                raise ValueError(
                    f"decoding='jacobi' supports models whose layers use {FULL!r} or {SLIDING!r} attention; this "
                    f"model has layer types {unsupported}."
                )
        else:
            kinds = (SLIDING,) if window else (FULL,)
        if SLIDING in kinds and not window:
            raise ValueError("The model declares sliding-window layers but config.sliding_window is not set.")
        return cls(kinds=kinds, sliding_window=int(window) if SLIDING in kinds else None)


def layer_masks(
    allowed: torch.Tensor,
    query_positions: torch.Tensor,
    kv_positions: torch.Tensor,
    layout: AttentionLayout,
    dtype: torch.dtype,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive [B, 1, q, kv] mask of each layer kind, from what the tokens may see regardless of windows.

    Sliding windows are applied on position ids, not on indices: Jacobi caches hold holes and training sequences hold
    two tokens per position, so indices say nothing about distance. Models mixing layer kinds get a dict by kind.

    Args:
        allowed: BoolTensor [B, q, kv].
    """
    masks: dict[str, torch.Tensor] = {}
    for kind in layout.kinds:
        kind_allowed = allowed
        if kind == SLIDING:
            distance = query_positions.unsqueeze(2) - kv_positions.unsqueeze(1)
            kind_allowed = allowed & (distance < layout.sliding_window)
        masks[kind] = _additive(kind_allowed, dtype)
    return masks if layout.as_dict else masks[layout.kinds[0]]


def host_layer_masks(
    allowed: np.ndarray,
    query_positions: np.ndarray,
    kv_positions: np.ndarray,
    layout: AttentionLayout,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """`layer_masks` from host arrays: windows applied on the host, then per kind one copy to the device and two ops
    to make it additive; the decoding loop builds its masks this way so that a step launches a
    handful of device ops, not one per boolean operation.

    Args:
        allowed: bool [B, q, kv]. query_positions: int [B, q]. kv_positions: int [B, kv].
    """
    masks: dict[str, torch.Tensor] = {}
    for kind in layout.kinds:
        kind_allowed = allowed
        if kind == SLIDING:
            kind_allowed = allowed & (query_positions[:, :, None] - kv_positions[:, None, :] < layout.sliding_window)
        masks[kind] = _additive(
            torch.from_numpy(np.ascontiguousarray(kind_allowed)).to(device, non_blocking=True), dtype
        )
    return masks if layout.as_dict else masks[layout.kinds[0]]


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, q, kv] in `dtype`: 0 where `allowed` [B, q, kv], the dtype's lowest value elsewhere (two ops)."""
    masked = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return masked.masked_fill_(allowed, 0.0).unsqueeze(1)
