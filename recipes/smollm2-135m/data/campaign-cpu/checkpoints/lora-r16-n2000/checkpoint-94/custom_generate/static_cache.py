"""The static path of the Jacobi loop: a preallocated cache, verify forwards of one fixed shape, and a compiled forward.

The loop is the same (`loop.jacobi_decode`); only the cache and its slot bookkeeping differ. `JacobiStaticCache`
holds one transformers `StaticLayer` (`static_layers.JacobiStaticLayer`) per decoder layer: keys and values are
allocated once, `[B, H, M, D]`, and every
forward writes its W columns at the layer's `cumulative_length` (a 0-d tensor changed in place). `StaticKVSlots` is
`KVSlots` for that cache, behind the same methods:

- every forward of a call is padded to one of a few fixed widths W (`checks.forward_widths`: the chain plus a spread
  of candidate counts, the widest forward the setting can make last) and has the same batch: finished rows stay in
  the cache as padding that is never kept, so the verify forward sees inputs of a few shapes ([B, W] tokens and
  positions, a [B, 1, W, M] additive mask) and compiles once (one width: a static graph; several: one graph with
  the width dynamic, `compiled_forward`);
- the commit reorders the kept columns to the front of the W slots just written, in place (a gather copied back into
  the same storage; with a compiled forward, inside the next forward's graph: `static_layers`), and moves
  `cumulative_length` back by the columns no row keeps; validity and positions are preallocated [B, M] tensors
  updated in place; nothing is reallocated and nothing is read back to the host but the loop's one read of each
  step's predictions (the slot counts the bookkeeping needs are kept on the host);
- when a row's holes would push the next forward past the end of the cache, the slots are compacted to the left,
  in place.

Like the dynamic path, every layer keeps full history and sliding windows are applied in the mask on positions, so
sliding-window and mixed models run here too. The prefill stays eager and is exactly the dynamic path's (greedy's
own call); its keys and values are then copied into the static cache.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from transformers import DynamicCache, GenerationConfig

from .cache import gather_slots, layer_states, needs_moving
from .config import JacobiConfig
from .masks import SLIDING, AttentionLayout, host_layer_masks
from .static_layers import JacobiStaticCache
from .step_layout import StepLayout

LENGTH_GRANULE = 64
"""Static cache lengths are rounded up to a multiple of this, so that prompts of nearby lengths share one shape (and one
compiled graph)."""

CACHE_ATTRIBUTE = "_hf_jacobi_static_cache"
"""Set on the model: the static cache of its last Jacobi call, reused by the next call of the same shapes (as
transformers' generate keeps its own static cache): a compiled forward on a GPU replays a CUDA graph recorded for the
cache tensors' addresses, so fresh tensors on every call would make it record again."""

CPU_WIDTHS = 5
"""Forward widths the static path uses on a CPU unless `static_widths` says: there a forward costs about its columns, so
padding every step to the widest (an n-gram pool often returns fewer candidates than it may) costs more than the few
compiled graphs; on an accelerator one width is the default (`static_width_count`)."""

LENGTH_ATTRIBUTE = "_hf_jacobi_static_cache_length"
"""Set on the model: the longest static cache a Jacobi call has used, reused by later calls (as transformers' generate
keeps `_previous_max_cache_length`), so that a shorter prompt does not compile a new graph."""


class StaticKVSlots:
    """Validity and position of every slot of a `JacobiStaticCache`, per row; the static counterpart of `KVSlots`.

    The bookkeeping lives on the host (numpy): the masks are built there and reach the device in one copy per step, and
    a commit changes nothing on the device but the cache's length (and, when a branch won, its keys and values).

    Attributes:
        valid: bool array [B, M]; True for the slots a row attends to. Always False from `length` on.
        positions: int64 array [B, M]; the position id each slot was computed with (meaningless where invalid).
        length: the slots in use (the layers' `cumulative_length`, mirrored on the host).
        counts: per row, its valid slots.
        step_widths: the widths forwards are padded to, ascending.
    """

    def __init__(
        self,
        cache: JacobiStaticCache,
        valid: torch.Tensor,
        positions: torch.Tensor,
        layout: AttentionLayout,
        widths: tuple[int, ...],
    ) -> None:
        batch, prompt_len = valid.shape
        self.capacity = cache.layers[0].max_cache_len
        self.device = valid.device
        self.valid = np.zeros((batch, self.capacity), dtype=bool)
        self.valid[:, :prompt_len] = valid.cpu().numpy()
        self.positions = np.zeros((batch, self.capacity), dtype=np.int64)
        self.positions[:, :prompt_len] = positions.cpu().numpy()
        self.length = prompt_len
        self.counts = self.valid.sum(axis=1).tolist()
        self.layout = layout
        self.step_widths = widths

    def attention_mask(self, layout: StepLayout, dtype: torch.dtype) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive float masks [B, 1, W, M]: each row's valid slots, then the W columns about to be written at
        [length, length + W), which see each other as `layout.visible` says; every other slot is masked."""
        width = layout.width
        start, end = self.length, self.length + width
        if end > self.capacity:
            raise RuntimeError(
                f"a forward of {width} columns at slot {start} overflows the static cache ({self.capacity})"
            )
        allowed = np.repeat(self.valid[:, None, :], width, axis=1)
        allowed[:, :, start:end] = layout.visible
        kv_positions = self.positions  # only sliding windows read the slots' positions: copied only for them
        if SLIDING in self.layout.kinds:
            kv_positions = kv_positions.copy()
            kv_positions[:, start:end] = layout.host_positions
        return host_layer_masks(allowed, layout.host_positions, kv_positions, self.layout, dtype, self.device)

    def commit_columns(
        self, cache: JacobiStaticCache, order: list[list[int]], keep: list[int], layout: StepLayout
    ) -> None:
        """Keeps, per row, the columns `order[row][: keep[row]]` of the forward just written, moved to the front of its
        W slots in place; the slots past the longest kept run are given back to the next forward."""
        width = layout.width
        start, end = self.length, self.length + width
        positions = layout.host_positions
        if needs_moving(order, keep):
            if cache.moves is not None:  # the compiled forward moves the slots inside its graph, next step
                cache.moves.record(start, order)
            else:  # gather returns new tensors, so every layer's write-back waits for one foreach copy
                index = torch.tensor(order, dtype=torch.long, device=self.device)
                written = [states[:, :, start:end] for states in layer_states(cache.layers)]
                torch._foreach_copy_(written, gather_slots(written, index))
            positions = np.take_along_axis(positions, np.asarray(order, dtype=np.int64), axis=1)
        elif cache.moves is not None:
            cache.moves.clear()
        self.valid[:, start:end] = np.arange(width)[None, :] < np.asarray(keep)[:, None]
        self.positions[:, start:end] = positions
        kept = max(keep)
        if kept < width:
            _crop(cache, width - kept)
        self.length = start + kept
        self.counts = [have + count for have, count in zip(self.counts, keep, strict=True)]

    def select_rows(self, cache: JacobiStaticCache, running: list, keep: list[int]) -> list:
        """The batch stays as it is (a new batch size would be a new compiled graph): rows not in `keep` stay in the
        cache as None, padding that is never kept.

        A finished row's slots are given back: nothing attends to them again, and a compaction packs the slots to the
        fullest row still running, not to a finished row that may have taken its whole budget and so left only the
        cache's rounding as room; each compaction moves every layer's keys and values, so fewer of them is time saved.
        """
        kept = set(keep)
        for index, row in enumerate(running):
            if row is not None and index not in kept:
                self.valid[index] = False
                self.counts[index] = 0
        return [row if index in kept else None for index, row in enumerate(running)]

    def maybe_compact(self, cache: JacobiStaticCache) -> bool:
        """Compacts when the next forward would not fit behind the slots in use.

        Attention costs the same over the whole static cache whatever its holes, so holes only matter once they run
        out of room. The cache holds prompt + budget + W slots, and a running row has fewer than prompt + budget valid
        slots, so after compaction the next forward always fits.
        """
        if self.length + self.step_widths[-1] <= self.capacity:
            return False
        self.compact(cache)
        return True

    def compact(self, cache: JacobiStaticCache) -> None:
        """Moves each row's valid slots to the left end, in order, in place; positions travel with the slots, so no
        result changes."""
        cache.apply_moves_now()
        width = max(self.counts)
        # A stable sort on "not valid" puts the valid slots first, in their order; the first `width` are the keepers.
        order = np.argsort(~self.valid, axis=1, kind="stable")[:, :width]
        self.positions[:, :width] = np.take_along_axis(self.positions, order, axis=1)
        self.valid[:, :width] = np.take_along_axis(self.valid, order, axis=1)
        self.valid[:, width:] = False
        states = layer_states(cache.layers)
        index = torch.from_numpy(order).to(self.device)
        torch._foreach_copy_([layer[:, :, :width] for layer in states], gather_slots(states, index))
        _crop(cache, self.length - width)
        self.length = width


def static_cache_length(model, prompt_len: int, capacity: int, width: int, generation_config: GenerationConfig) -> int:
    """Slots of the static cache of a call: prompt + budget + one forward (+ rounding), or more where an earlier call
    used more or `generation_config.max_cache_len` asks for more (so that later calls keep the same shapes)."""
    needed = max(prompt_len + capacity + width, getattr(generation_config, "max_cache_len", None) or 0)
    length = max(LENGTH_GRANULE * math.ceil(needed / LENGTH_GRANULE), getattr(model, LENGTH_ATTRIBUTE, 0))
    setattr(model, LENGTH_ATTRIBUTE, length)
    return length


def static_width_count(config: JacobiConfig, device: torch.device) -> int:
    """How many forward widths a static call uses: the setting's own, else `CPU_WIDTHS` on a CPU and 1 elsewhere."""
    if config.static_widths is not None:
        return config.static_widths
    return CPU_WIDTHS if device.type == "cpu" else 1


def to_static(
    model,
    prefilled: DynamicCache,
    slots,
    widths: tuple[int, ...],
    capacity: int,
    generation_config: GenerationConfig,
) -> tuple[JacobiStaticCache, StaticKVSlots]:
    """The static cache and its slots for a call, holding the prompt's keys and values from the (eager, dynamic)
    prefill; `slots` is the prefill's `KVSlots`."""
    prompt_len = slots.length
    length = static_cache_length(model, prompt_len, capacity, widths[-1], generation_config)
    cache = _reusable_cache(model, prefilled, length)
    layer = cache.layers[0]
    if not isinstance(getattr(layer, "cumulative_length", None), torch.Tensor) or not hasattr(layer, "crop"):
        import transformers

        raise ValueError(
            "cache_implementation='static' with decoding='jacobi' needs a transformers whose StaticLayer keeps its "
            f"length in a tensor and can be cropped (5.24 does; this is {transformers.__version__}, whose StaticLayer "
            "cannot): upgrade transformers, or use the dynamic cache (the default) with this version."
        )
    for static, layer in zip(cache.layers, prefilled.layers, strict=True):
        static.update(layer.keys, layer.values)  # allocates [B, H, M, D] and writes the prompt at [0, P)
    return cache, StaticKVSlots(cache, slots.valid, slots.positions, slots.layout, widths)


def _reusable_cache(model, prefilled: DynamicCache, length: int) -> JacobiStaticCache:
    """The model's cache from its last call, rewound to empty, where every layer's shapes, dtype and device fit this
    call (stale slots stay unread: a slot is attended to only once this call has written it); else a new one."""
    cache = getattr(model, CACHE_ATTRIBUTE, None)
    if cache is not None and len(cache.layers) == len(prefilled.layers):
        # tensors made under torch.inference_mode cannot be written outside it (nor normal ones reused inside it
        # without a copy), so a cache is only reused in the mode it was made in
        mode = torch.is_inference_mode_enabled()
        fits = all(
            mine.is_initialized
            and mine.keys.is_inference() == mode
            and mine.keys.shape == (*theirs.keys.shape[:2], length, theirs.keys.shape[3])
            and mine.values.shape == (*theirs.values.shape[:2], length, theirs.values.shape[3])
            and mine.keys.dtype == theirs.keys.dtype
            and mine.keys.device == theirs.keys.device
            for mine, theirs in zip(cache.layers, prefilled.layers, strict=True)
        )
        if fits:
            for layer in cache.layers:
                layer.cumulative_length.zero_()
            cache.move_eagerly()  # until this call's forward is known to be compiled (`defer_slot_moves`)
            return cache
    cache = JacobiStaticCache(len(prefilled.layers), length)
    setattr(model, CACHE_ATTRIBUTE, cache)
    return cache


def defer_slot_moves(cache: JacobiStaticCache, slots: StaticKVSlots) -> None:
    """Hands the commit's slot moves to the compiled forward (see `static_layers`): eagerly they would cost two
    device ops per layer on the steps a recycled branch wins; inside the graph they cost no host time."""
    keys = cache.layers[0].keys
    cache.defer_moves(keys.shape[0], slots.step_widths[-1], keys.device)


def _crop(cache: JacobiStaticCache, tokens: int) -> None:
    """Gives back the last `tokens` slots of every layer with one foreach op on the layers' `cumulative_length`.

    `Cache.crop` walks the layers and runs one `sub_` each (30 on SmolLM2), every step that keeps fewer columns than
    it wrote; the lengths stay the layers' own 0-d tensors, changed in place, so a compiled graph still reads them.
    """
    if tokens:
        torch._foreach_sub_([layer.cumulative_length for layer in cache.layers], tokens)
