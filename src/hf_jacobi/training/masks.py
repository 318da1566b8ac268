"""The noise-aware causal mask of Jacobi Forcing, for every attention backend that can express it.

A packed sequence is [prompt][k_0][c_0][k_1][c_1]... (noisy state, then clean fixed point, of each block). The mask
the paper trains with lets every token see the prompt; a noisy token see the noisy blocks before it (so it learns to
predict from a noisy past, as it will at inference) and its own block causally; a clean token see the clean blocks
before it and its own block causally (exactly the autoregressive view). Since blocks are laid out in order, all of
this is "causal in sequence order, and the key is a prompt token or belongs to the same kind of segment as the
query", which is what every builder below evaluates. Padding (appended on the right) is its own kind, so no real token
sees it and no padding row is empty (an all-masked row would give NaNs in sdpa).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..decoding.masks import FULL, SLIDING, AttentionLayout, layer_masks
from .collator import Segment

FULL_LAYOUT = AttentionLayout(kinds=(FULL,), sliding_window=None)


def noise_aware_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Boolean mask [B, L, L], True where the query row may attend to the key column (sliding windows aside)."""
    length = segment_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    query, key = segment_ids[:, :, None], segment_ids[:, None, :]
    return causal & ((key == Segment.PROMPT) | (key == query))


def training_attention_mask(
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor,
    dtype: torch.dtype,
    layout: AttentionLayout = FULL_LAYOUT,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive 4D mask (sdpa and eager read it exactly; eager would silently misread a bool mask), with the
    model's sliding windows applied on positions; a dict by layer kind for models that mix kinds."""
    return layer_masks(noise_aware_mask(segment_ids), position_ids, position_ids, layout, dtype)


def noise_aware_block_mask(
    segment_ids: torch.Tensor, position_ids: torch.Tensor, layout: AttentionLayout = FULL_LAYOUT
) -> Any:
    """The same masks as FlexAttention `BlockMask`s, for models loaded with attn_implementation='flex_attention'."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, length = segment_ids.shape
    masks = {}
    for kind in layout.kinds:
        window = layout.sliding_window if kind == SLIDING else None

        def mask_mod(b, h, q, kv, window=window):
            key = segment_ids[b, kv]
            allowed = (kv <= q) & ((key == Segment.PROMPT) | (key == segment_ids[b, q]))
            if window is not None:
                allowed = allowed & (position_ids[b, q] - position_ids[b, kv] < window)
            return allowed

        masks[kind] = create_block_mask(mask_mod, batch, None, length, length, device=segment_ids.device)
    return masks if layout.as_dict else masks[layout.kinds[0]]


@dataclass(frozen=True)
class NoiseAwareMask:
    """The noise-aware mask in the form one model reads: its attention backend, dtype and sliding windows.

    Built once per model (`for_model`) and called on each batch's segment_ids and position_ids, so the collator stays
    independent of the model it feeds.
    """

    layout: AttentionLayout = FULL_LAYOUT
    dtype: torch.dtype = torch.float32
    flex: bool = False

    @classmethod
    def for_model(cls, model: Any) -> NoiseAwareMask:
        attn = getattr(model.config, "_attn_implementation", None) or "eager"
        if attn.startswith("flash"):
            raise ValueError(
                f"Jacobi Forcing needs an arbitrary 4D attention mask, which {attn!r} cannot express; load the model "
                "with attn_implementation='sdpa', 'eager' or 'flex_attention'."
            )
        return cls(layout=AttentionLayout.from_config(model.config), dtype=model.dtype, flex=attn == "flex_attention")

    def __call__(self, segment_ids: torch.Tensor, position_ids: torch.Tensor) -> Any:
        if self.flex:
            return noise_aware_block_mask(segment_ids, position_ids, self.layout)
        return training_attention_mask(segment_ids, position_ids, self.dtype, self.layout)
