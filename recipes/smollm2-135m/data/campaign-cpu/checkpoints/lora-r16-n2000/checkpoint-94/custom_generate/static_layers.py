"""The static cache's layers, and the slot moves a compiled verify forward makes inside its own graph.

After a forward, each row keeps some of the W columns it wrote: the draft chain's accepted prefix needs nothing
moved, but a recycled branch sits further right and its keys and values must move next to column 0. Done eagerly
that is a gather and a copy per layer's keys and per layer's values (60 device ops on SmolLM2, each paying the host's
launch cost) every time a branch wins. On the compiled path the move is written down instead (`SlotMoves`: one small
tensor, one host-to-device copy) and each layer carries it out at the start of its next `update`, inside the
compiled forward: on a GPU that is inside the replayed CUDA graph, where it costs no host time at all.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticLayer


class SlotMoves:
    """The per-row reordering of one forward's W slots that the next compiled forward applies, layer by layer.

    `plan` is [B, W + 1] on the cache's device, at a fixed address (a CUDA graph reads it where it was recorded):
    columns [0, W) hold, per row, the absolute slot each of the slots [start, start + W) takes its keys and values
    from, and column W holds `start`. A plan that takes every slot from itself is a no-op, which is what the compiled
    forward runs on steps with nothing to move (one graph whatever happens); `start + W` never passes the cache's end,
    because the static slots keep room for a whole forward behind the slots in use.
    """

    def __init__(self, batch: int, width: int, device: torch.device) -> None:
        self.width = width
        self._identity = np.broadcast_to(np.arange(width + 1, dtype=np.int64), (batch, width + 1)).copy()
        self._identity[:, width] = 0
        self.plan = torch.from_numpy(self._identity).to(device, copy=True)  # never the host array's memory
        self.pending = False
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.plan)
            # the width reaches the graph as this shape, kept static: a setting of another width (another plan) gets
            # a static graph of its own instead of turning the shared one dynamic (`compiled_forward`)
            torch._dynamo.mark_static(self.plan, 1)

    def record(self, start: int, order: list[list[int]]) -> None:
        """Writes down that, per row, the slot `start + c` takes the keys and values of `start + order[row][c]`."""
        plan = self._identity.copy()
        plan[:, : self.width] += start
        plan[:, : len(order[0])] = np.asarray(order, dtype=np.int64) + start
        plan[:, self.width] = start
        self.plan.copy_(torch.from_numpy(plan), non_blocking=True)  # one copy into the recorded address
        self.pending = True

    def clear(self) -> None:
        """Back to the no-op plan once the moves are done (one copy, only after a step that moved)."""
        if self.pending:
            self.plan.copy_(torch.from_numpy(self._identity), non_blocking=True)
            self.pending = False

    def apply(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Moves one layer's slots as the plan says: a gather of the W slots, written back in place."""
        width = self.plan.shape[1] - 1  # not `self.width`: an int read in the graph turns symbolic once it changes
        sources = self.plan[:, :width]
        # made inside the graph: a tensor kept here would be one more graph input to copy on every replay
        targets = self.plan[0, width] + torch.arange(width, device=self.plan.device)
        for states in (keys, values):
            index = sources[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
            states.index_copy_(2, targets, torch.gather(states, 2, index))


class JacobiStaticLayer(StaticLayer):
    """A transformers `StaticLayer` that first carries out the pending slot moves, when its cache defers them to the
    compiled forward (`moves` set); otherwise it is exactly a `StaticLayer`."""

    def __init__(self, max_cache_len: int) -> None:
        super().__init__(max_cache_len=max_cache_len)
        self.moves: SlotMoves | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.moves is not None and self.is_initialized:
            self.moves.apply(self.keys, self.values)
        return super().update(key_states, value_states, *args, **kwargs)


class JacobiStaticCache(Cache):
    """A static cache of `JacobiStaticLayer`s: full history on every layer, whatever the model's layer types.

    transformers' `StaticCache(config=...)` would give sliding-window layers a ring buffer that overwrites slots by
    index; the Jacobi cache holds holes (rejected drafts), so windows are applied in the masks on positions instead.
    """

    def __init__(self, num_layers: int, max_cache_len: int) -> None:
        super().__init__(layers=[JacobiStaticLayer(max_cache_len) for _ in range(num_layers)])
        self.moves: SlotMoves | None = None  # set while the forward carries out the moves
        self._plans: dict[tuple, SlotMoves] = {}  # kept across calls, so that each plan keeps its address

    def defer_moves(self, batch: int, width: int, device: torch.device) -> SlotMoves:
        """Makes every layer apply the cache's slot moves inside the next forward.

        One plan per batch and widest forward, kept across calls: a recorded CUDA graph reads its plan where it was
        recorded, and a plan at a new address makes torch record the graph again (a capture every call, when calls
        of two settings take turns on one model, as bench's do).
        """
        # a tensor made under torch.inference_mode cannot be written outside it, nor the other way round
        key = (batch, width, device, torch.is_inference_mode_enabled())
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = SlotMoves(batch, width, device)
        plan.clear()
        self._set_moves(plan)
        return plan

    def move_eagerly(self) -> None:
        """Back to moving slots at the commit (a call whose forward is not compiled, on a reused cache)."""
        self._set_moves(None)

    def _set_moves(self, moves: SlotMoves | None) -> None:
        self.moves = moves
        for layer in self.layers:
            layer.moves = moves

    def apply_moves_now(self) -> None:
        """Carries out a pending plan eagerly (before a compaction reads the slots), then clears it."""
        if self.moves is not None and self.moves.pending:
            for layer in self.layers:
                self.moves.apply(layer.keys, layer.values)
            self.moves.clear()
