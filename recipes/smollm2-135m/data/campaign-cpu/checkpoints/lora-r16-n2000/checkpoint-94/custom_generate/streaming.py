"""Feeding a streamer from a loop that commits several tokens per row per forward.

Greedy calls `streamer.put` once per step with one token per row. Jacobi rows run ahead of each other, so column t is
sent once every row has its token t (or is finished and padded), and the end is flushed to the output's length.
"""

from __future__ import annotations

import torch
from transformers.generation.streamers import BaseStreamer

from .rows import CommittedText


class ColumnStreamer:
    """Sends a streamer the same per-step columns greedy would."""

    def __init__(self, streamer: BaseStreamer | None, committed: CommittedText) -> None:
        self.streamer = streamer
        self.committed = committed
        self.sent = 0

    def _column(self, t: int) -> torch.Tensor:
        pad = self.committed.pad_id
        return torch.tensor(
            [row.generated[t] if t < len(row.generated) else pad for row in self.committed.rows], dtype=torch.long
        )

    def _ready(self) -> int:
        pads = self.committed.stopper.pads_finished_rows
        known = [len(row.generated) for row in self.committed.rows if not (pads and row.finish_at is not None)]
        return min(known) if known else max(len(row.generated) for row in self.committed.rows)

    def flush(self, upto: int | None = None) -> None:
        if self.streamer is None:
            return
        end = self._ready() if upto is None else upto
        while self.sent < end:
            self.streamer.put(self._column(self.sent))
            self.sent += 1

    def finish(self) -> None:
        if self.streamer is None:
            return
        self.flush(self.committed.final_length())
        self.streamer.end()
