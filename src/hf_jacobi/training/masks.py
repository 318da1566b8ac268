"""The noise-aware causal mask of Jacobi Forcing, for every attention backend that can express it.

A packed sequence is [prompt][k_0][c_0][k_1][c_1]... (noisy state, then clean fixed point, of each block). The mask
the paper trains with lets every token see the prompt; a noisy token see the noisy blocks before it (so it learns to
predict from a noisy past, as it will at inference) and its own block causally; a clean token see the clean blocks
before it and its own block causally (exactly the autoregressive view). Since blocks are laid out in order, all of
this is "causal in sequence order, and the key is a prompt token or belongs to the same kind of segment as the
query", which is what every builder below evaluates. Padding (appended on the right) is its own kind, so no real token
sees it and no padding row is empty (an all-masked row would give NaNs in sdpa).

The other view, CLLM's and one of the reference code's two trainers' (`noisy_past="clean"`), lets a noisy token see
the clean blocks before it instead of the noisy ones: the past that the active block of plain Jacobi decoding has,
where the paper's view is the past of multi-block decoding's pseudo-active blocks. Noisy blocks then see no other
noisy block, so that view also needs `block_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..decoding.masks import FULL, SLIDING, AttentionLayout, layer_masks


class Segment:
    """What a token of a packed sequence is; `segment_ids` holds these, and the noise-aware mask is defined on them.

    Plain ints rather than an IntEnum: FlexAttention traces the mask function with vmap, where comparing a tensor with
    an IntEnum member silently gives a wrong mask.
    """

    PROMPT = 0
    NOISY = 1
    CLEAN = 2
    PADDING = 3


FULL_LAYOUT = AttentionLayout(kinds=(FULL,), sliding_window=None)
NOISY_PASTS = ("noisy", "clean")


def _check_past(noisy_past: str, block_ids: torch.Tensor | None) -> None:
    if noisy_past not in NOISY_PASTS:
        raise ValueError(f"noisy_past must be one of {list(NOISY_PASTS)}, got {noisy_past!r}.")
    if noisy_past == "clean" and block_ids is None:
        raise ValueError("noisy_past='clean' needs block_ids: a noisy token sees its own block's noisy tokens only.")


def _allowed(query: Any, key: Any, query_block: Any, key_block: Any, noisy_past: str) -> Any:
    """The rule both the tensor and the FlexAttention builders evaluate, on segment kinds and block numbers, before
    causality."""
    if noisy_past == "noisy":
        return (key == Segment.PROMPT) | (key == query)
    noisy = query == Segment.NOISY
    own = (key == query) & (~noisy | (key_block == query_block))
    return (key == Segment.PROMPT) | own | (noisy & (key == Segment.CLEAN))


def noise_aware_mask(
    segment_ids: torch.Tensor, block_ids: torch.Tensor | None = None, noisy_past: str = "noisy"
) -> torch.Tensor:
    """Boolean mask [B, L, L], True where the query row may attend to the key column (sliding windows aside)."""
    _check_past(noisy_past, block_ids)
    length = segment_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    query, key = segment_ids[:, :, None], segment_ids[:, None, :]
    blocks = (block_ids[:, :, None], block_ids[:, None, :]) if block_ids is not None else (None, None)
    return causal & _allowed(query, key, *blocks, noisy_past)


def training_attention_mask(
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor,
    dtype: torch.dtype,
    layout: AttentionLayout = FULL_LAYOUT,
    block_ids: torch.Tensor | None = None,
    noisy_past: str = "noisy",
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive 4D mask (sdpa and eager read it exactly; eager would silently misread a bool mask), with the
    model's sliding windows applied on positions; a dict by layer kind for models that mix kinds."""
    allowed = noise_aware_mask(segment_ids, block_ids, noisy_past)
    return layer_masks(allowed, position_ids, position_ids, layout, dtype)


def noise_aware_block_mask(
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor,
    layout: AttentionLayout = FULL_LAYOUT,
    block_ids: torch.Tensor | None = None,
    noisy_past: str = "noisy",
) -> Any:
    """The same masks as FlexAttention `BlockMask`s, for models loaded with attn_implementation='flex_attention'."""
    from torch.nn.attention.flex_attention import create_block_mask

    _check_past(noisy_past, block_ids)
    blocks = block_ids if block_ids is not None else segment_ids  # unread unless noisy_past == "clean"
    batch, length = segment_ids.shape
    masks = {}
    for kind in layout.kinds:
        window = layout.sliding_window if kind == SLIDING else None

        def mask_mod(b, h, q, kv, window=window):
            rule = _allowed(segment_ids[b, q], segment_ids[b, kv], blocks[b, q], blocks[b, kv], noisy_past)
            allowed = (kv <= q) & rule
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
    noisy_past: str = "noisy"

    @classmethod
    def for_model(cls, model: Any, noisy_past: str = "noisy") -> NoiseAwareMask:
        attn = getattr(model.config, "_attn_implementation", None) or "eager"
        if attn.startswith("flash"):
            raise ValueError(
                f"Jacobi Forcing needs an arbitrary 4D attention mask, which {attn!r} cannot express; load the model "
                "with attn_implementation='sdpa', 'eager' or 'flex_attention'."
            )
        layout = AttentionLayout.from_config(model.config)
        return cls(layout=layout, dtype=model.dtype, flex=attn == "flex_attention", noisy_past=noisy_past)

    def __call__(
        self, segment_ids: torch.Tensor, position_ids: torch.Tensor, block_ids: torch.Tensor | None = None
    ) -> Any:
        if self.flex:
            return noise_aware_block_mask(segment_ids, position_ids, self.layout, block_ids, self.noisy_past)
        return training_attention_mask(segment_ids, position_ids, self.dtype, self.layout, block_ids, self.noisy_past)
