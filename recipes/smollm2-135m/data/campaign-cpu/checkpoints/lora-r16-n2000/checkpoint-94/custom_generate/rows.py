"""The committed side of a Jacobi call: each row's text, when it finished, and the output greedy would return.

Rows commit different numbers of tokens per forward and finish at different times, yet the result must be the tensor
greedy decoding returns: same stopping, same padding of finished rows, same length. `RowState` holds one row (its
text, its proposers, its counters); `CommittedText` applies generate()'s stopping criteria token by token with
exactly the prefixes greedy would show them, and assembles the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .proposers import Proposer
from .stopping import RowStopper


@dataclass
class RowState:
    """One prompt being decoded.

    Attributes:
        index: the row's index in the batch generate() was called with.
        text: the prompt without padding, then every committed token (what proposers and the pool key on).
        generated: the committed tokens only.
        position: the position id of the next forward's column 0 (the last committed token).
        proposers: the row's draft sources, the Jacobi chain first.
        finish_at: how many generated tokens it had when a stopping criterion fired (None while running).
    """

    index: int
    text: list[int]
    position: int
    proposers: list[Proposer] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    finish_at: int | None = None
    forward_passes: int = 0
    forward_tokens: int = 0
    recycled_tokens: int = 0

    def propose(self, room: int) -> list[list[int]]:
        """Every source's branches for the next forward, in source order (the chain is the first branch), each cut to
        `room` drafts, the tokens the row may still generate.

        A forward commits at most one token more than the drafts it accepts and the row takes no more than `room`, so
        drafts past `room` could never be kept: cutting them makes a huge block size, many blocks or long candidates
        cost nothing beyond the budget. The last kept draft (for the row's last position) is never needed to decode,
        but trajectories record it. A candidate cut down to nothing, or to the start of the chain, is dropped:
        verifying it again gains nothing.
        """
        branches: list[list[int]] = []
        for proposer in self.proposers:
            for branch in proposer.propose(self.text, branches):
                branch = branch[:room]
                if branches and (not branch or branches[0][: len(branch)] == branch):
                    continue
                branches.append(branch)
        return branches


class CommittedText:
    """Commits tokens row by row and decides, as greedy would, when a row is done and what the output is.

    `sequences` mirrors the committed text on the model's device, so that logits processors and stopping criteria
    see exactly the prefixes the reference decoding would show them. The text is written on the host and copied to
    the device only when something reads `sequences` (a step with logits processors, a criterion beyond EOS and
    length): a greedy step then writes nothing to the device, where one copy per row would each cost a launch.
    """

    def __init__(self, input_ids: torch.Tensor, rows: list[RowState], stopper: RowStopper, capacity: int, pad_id: int):
        self.rows = rows
        self.stopper = stopper
        self.capacity = capacity
        self.pad_id = pad_id
        self.prompt_len = input_ids.shape[1]
        self.device = input_ids.device
        self._host = np.full((len(rows), self.prompt_len + capacity + 1), pad_id, dtype=np.int64)
        self._host[:, : self.prompt_len] = input_ids.cpu().numpy()
        self._on_device: torch.Tensor | None = None

    @property
    def sequences(self) -> torch.Tensor:
        """LongTensor [batch, prompt + budget + 1] on the model's device: the prompts, then the committed tokens."""
        if self._on_device is None:
            self._on_device = torch.from_numpy(self._host).to(self.device, copy=True)
        return self._on_device

    def commit(self, row: RowState, tokens: list[int]) -> int:
        """Appends accepted tokens to a row until it must stop; returns how many it took."""
        start = self.prompt_len + len(row.generated)
        room = self._host.shape[1] - start
        self._host[row.index, start : start + min(len(tokens), room)] = tokens[:room]
        self._on_device = None
        taken = 0
        for token in tokens:
            if self.done(row):
                break
            row.generated.append(token)
            row.text.append(token)
            taken += 1
            length = self.prompt_len + len(row.generated)
            if row.finish_at is None and self.stopper.is_finished(
                token, length, lambda length=length: self.sequences[row.index : row.index + 1, :length]
            ):
                row.finish_at = len(row.generated)
        return taken

    def done(self, row: RowState) -> bool:
        if len(row.generated) >= self.capacity:
            return True
        if row.finish_at is None:
            return False
        if self.stopper.pads_finished_rows:
            return True
        # Without EOS, greedy keeps decoding finished rows until the last row finishes: match that length.
        finished = [r.finish_at for r in self.rows]
        if any(f is None for f in finished):
            return False
        return len(row.generated) >= max(f for f in finished if f is not None)

    def final_length(self) -> int:
        if self.stopper.pads_finished_rows:
            return max(len(row.generated) for row in self.rows)
        if all(row.finish_at is not None for row in self.rows):
            return max(row.finish_at for row in self.rows if row.finish_at is not None)
        return min(len(row.generated) for row in self.rows)

    def output(self, input_ids: torch.Tensor) -> torch.Tensor:
        """prompt + generated tokens, finished rows padded the way greedy pads them."""
        length = self.final_length()
        new = torch.full((len(self.rows), length), self.pad_id, dtype=torch.long)
        for row in self.rows:
            kept = row.generated[:length]
            new[row.index, : len(kept)] = torch.tensor(kept, dtype=torch.long)
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)
