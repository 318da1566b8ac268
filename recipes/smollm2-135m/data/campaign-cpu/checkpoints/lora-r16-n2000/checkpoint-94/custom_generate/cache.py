"""Per-row bookkeeping of a shared KV cache whose rows accept different numbers of tokens per forward.

`Cache.crop` is uniform across the batch, so after a forward the cache keeps as many new slots as the row that
accepted most, and every other row marks its extra slots invalid (holes). Each forward then gets an explicit 4D
additive mask built from those validity flags and the slots' positions; sliding windows are applied on positions,
not on slot indices, so holes never shrink a row's window. This is why the cache used here keeps full history for
every layer (a plain `DynamicCache()`): a sliding-window layer that drops slots by index would drop the wrong ones.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .masks import AttentionLayout, layer_masks
from .step_layout import StepLayout


def _cache_argument() -> str:
    """The name under which this transformers passes a cache to `generate`'s model kwargs and to a model's forward.

    transformers 5.24 renamed `past_key_values` to `cache` (the old name still warns its way through until 5.40, but
    `generate` then prefers its own freshly made `cache` over one given as `past_key_values`), while 5.17-5.23 know
    only `past_key_values`. Both are supported, so the name is read from the installed version, once.
    """
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


CACHE_ARGUMENT = _cache_argument()
CACHE_ARGUMENTS = ("cache", "past_key_values")


class KVSlots:
    """Validity and position of every cache slot, per row, kept in step with a `DynamicCache`.

    Attributes:
        valid: BoolTensor [B, S]; False for left padding and for slots written by tokens a row did not accept.
        positions: LongTensor [B, S]; the position id each slot was computed with (meaningless where invalid).
    """

    step_widths: tuple[int, ...] | None = None
    """The widths forwards are padded to: None lets each forward take the width its widest row needs."""

    def __init__(self, valid: torch.Tensor, positions: torch.Tensor, layout: AttentionLayout) -> None:
        self.valid = valid
        self.positions = positions
        self.layout = layout

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def attention_mask(self, layout: StepLayout, dtype: torch.dtype) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive float masks [B, 1, q, S + q] for a forward of the q columns of `layout`: the valid slots, then the
        new columns as `layout.visible` says (each column sees itself, column 0 and its own branch's earlier levels).

        `dtype` is the model's: eager attention adds the mask to the scores, so it must be additive and in it.
        """
        query_positions = layout.positions
        batch, q = query_positions.shape
        visible = torch.from_numpy(layout.visible).to(query_positions.device)
        past = self.valid.unsqueeze(1).expand(batch, q, self.length)
        allowed = torch.cat([past, visible], dim=2)  # [B, q, S + q]
        kv_positions = torch.cat([self.positions, query_positions], dim=1)  # [B, S + q]
        return layer_masks(allowed, query_positions, kv_positions, self.layout, dtype)

    def commit(self, cache: DynamicCache, keep: torch.Tensor, query_positions: torch.Tensor) -> None:
        """Records which of the q slots just written each row keeps, and crops slots that no row keeps.

        Args:
            keep: BoolTensor [B, q].
        """
        self.valid = torch.cat([self.valid, keep], dim=1)
        self.positions = torch.cat([self.positions, query_positions], dim=1)
        kept_any = self.valid.any(dim=0)
        last_used = int(kept_any.nonzero().max()) + 1 if bool(kept_any.any()) else 0
        surplus = self.length - last_used
        if surplus > 0:
            cache.crop(-surplus)
            self.valid = self.valid[:, :last_used]
            self.positions = self.positions[:, :last_used]

    def commit_columns(self, cache: DynamicCache, order: list[list[int]], keep: list[int], layout: StepLayout) -> None:
        """Like `commit`, for forwards whose kept columns are not a prefix (a recycled branch won).

        The q columns just written are first reordered per row so that the kept ones (`order[row][: keep[row]]`) come
        first, in order; only those q columns are moved, never the older cache, and the columns no row keeps are then
        cropped as usual.
        """
        query_positions = layout.positions
        width = query_positions.shape[1]
        device = query_positions.device
        if needs_moving(order, keep):
            index = torch.tensor(order, dtype=torch.long, device=device)
            written = [states[:, :, -width:] for states in layer_states(_filled_layers(cache))]
            torch._foreach_copy_(written, gather_slots(written, index))
            query_positions = torch.gather(query_positions, 1, index)
        counts = torch.tensor(keep, dtype=torch.long, device=device)
        self.commit(cache, torch.arange(width, device=device)[None, :] < counts[:, None], query_positions)

    def select_rows(self, cache: DynamicCache, running: list, keep: list[int]) -> list:
        """Keeps only the rows `keep` (indices into `running`, the rows in cache order) in both the cache and the
        bookkeeping; returns the rows still in the cache, in cache order."""
        rows = torch.tensor(keep, device=self.valid.device)
        cache.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.positions = self.positions[rows]
        return [running[i] for i in keep]

    def holes(self) -> int:
        """Slots that compaction would free: those beyond the fullest row's count of valid slots."""
        return self.length - int(self.valid.sum(dim=1).max())

    def compact(self, cache: DynamicCache) -> None:
        """Moves each row's valid slots to the right end, in order, and drops the columns freed on the left.

        Order within a row is what matters to attention (positions travel with the slots), so this changes no result;
        it only stops masked slots from costing memory and attention time.
        """
        counts = self.valid.sum(dim=1)
        width = int(counts.max())
        # Stable sort puts invalid slots first and keeps valid ones in their order; the last `width` are the keepers.
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, -width:]
        self.valid = torch.gather(self.valid, 1, order)
        self.positions = torch.gather(self.positions, 1, order)
        layers = _filled_layers(cache)
        gathered = gather_slots(layer_states(layers), order)
        for layer, keys, values in zip(layers, gathered[0::2], gathered[1::2], strict=True):
            layer.keys, layer.values = keys, values

    def maybe_compact(self, cache: DynamicCache, min_holes: int = 32, fraction: float = 0.25) -> bool:
        """Compacts when enough of the cache is holes to be worth one gather over it."""
        holes = self.holes()
        if holes >= max(min_holes, int(fraction * self.length)):
            self.compact(cache)
            return True
        return False


def _filled_layers(cache: DynamicCache) -> list:
    """The layers that hold keys yet (a layer the prefill has not reached, or an empty one, has nothing to move)."""
    return [layer for layer in cache.layers if getattr(layer, "keys", None) is not None and layer.keys.numel() > 0]


def layer_states(layers: list) -> list[torch.Tensor]:
    """The keys and values [B, H, S, D] of `layers`, in one list (keys, values, keys, ...) for the foreach ops."""
    return [states for layer in layers for states in (layer.keys, layer.values)]


def needs_moving(order: list[list[int]], keep: list[int]) -> bool:
    """Whether some row keeps columns that are not the first ones it wrote (a recycled branch won), so that both
    caches' commits must move keys and values; a draft chain's accepted prefix is already in place."""
    return any(columns[:count] != list(range(count)) for columns, count in zip(order, keep, strict=True))


def gather_slots(states: list[torch.Tensor], order: torch.Tensor) -> list[torch.Tensor]:
    """Each of `states` [B, H, S, D] gathered along S with a per-row slot order [B, S'], for both caches' commits and
    compactions: one gather per tensor (gather has no foreach form), the expanded index built once per shape (every
    layer's keys and values usually share one)."""
    indices: dict[tuple[int, int], torch.Tensor] = {}
    gathered = []
    for tensor in states:
        shape = (tensor.shape[1], tensor.shape[3])
        if shape not in indices:
            indices[shape] = order[:, None, :, None].expand(-1, shape[0], -1, shape[1])
        gathered.append(torch.gather(tensor, 2, indices[shape]))
    return gathered
