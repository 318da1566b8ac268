"""The columns of one Jacobi forward: each row's draft chain and its recycled candidate branches.

Column 0 of every row is its last committed token, whose KV is not in the cache yet. The draft chain follows it
causally. Each candidate n-gram is a branch: its tokens sit at the positions right after column 0, see the cache,
column 0 and their own earlier tokens, and nothing of the chain or of other branches. So every branch is verified
against the same committed prefix without copying the cache, and all of it costs one forward. Rows with fewer
columns are padded with columns that see only themselves and are never kept; on a static cache every forward of a
call is padded to one of a few fixed widths, and finished rows that stay in the batch are padding only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Branch:
    """One line of tokens that verification can follow from column 0.

    Attributes:
        columns: the forward column of each level; columns[0] is 0, the shared last committed token.
        tokens: the token at each level; tokens[0] is the last committed token.
    """

    columns: list[int]
    tokens: list[int]

    def __len__(self) -> int:
        return len(self.tokens)


class StepLayout:
    """Input ids, positions and the visibility matrix of one forward, with the branches behind each column.

    The layout is built on the host (numpy) and reaches the device in one copy: on a GPU every small tensor op the
    loop launches costs host time that the forward does not hide, so the loop sends what it knows instead of computing
    it there. The masks are built on the host from `visible` and `host_positions` too.

    Attributes:
        tokens: LongTensor [b, Q] on the device.
        positions: LongTensor [b, Q] on the device: each column's position id (its row's start plus its level).
        levels: int64 array [b, Q]: each column's distance from column 0, i.e. its position offset (0 for padding).
        host_positions: int64 array [b, Q]: `positions` on the host.
        visible: bool array [b, Q, Q]: which columns each column attends to.
        branches: per row, the draft chain first, then one branch per other proposal.
        columns_used: per row, how many columns carry real tokens.
    """

    def __init__(
        self,
        roots: list[int | None],
        proposals: list[list[list[int]]],
        pad_id: int,
        device,
        widths: tuple[int, ...] | None = None,
        starts: list[int] | None = None,
    ) -> None:
        """Lays out one forward: per row, its root (last committed token) in column 0, then each proposed branch.

        The first branch of a row (its draft chain) continues column 0 causally; each later branch gets its own
        columns after it. Either way a branch sees column 0 and its own earlier tokens only. A row whose root is None
        (a finished row that a fixed-batch cache keeps) is all padding and has no branch. `widths` (ascending) pads the
        forward to the narrowest of them that fits (the static cache's fixed shapes); by default the widest row sets it.
        `starts` is each row's position id at column 0 (0 by default).
        """
        self.branches: list[list[Branch]] = []
        self.columns_used: list[int] = []
        rows = []
        for root, branches_tokens in zip(roots, proposals, strict=True):
            if root is None:
                self.branches.append([])
                self.columns_used.append(0)
                rows.append(([], [], []))
                continue
            tokens, branch_ids, levels = [root], [0], [0]
            branches = []
            for index, drafts in enumerate(branches_tokens):
                start = len(tokens)
                branches.append(Branch([0, *range(start, start + len(drafts))], [root, *drafts]))
                tokens.extend(drafts)
                branch_ids.extend([index] * len(drafts))
                levels.extend(range(1, len(drafts) + 1))
            self.branches.append(branches)
            self.columns_used.append(len(tokens))
            rows.append((tokens, branch_ids, levels))
        used = max(max(self.columns_used), 1)
        width = used if widths is None else next((width for width in widths if width >= used), None)
        if width is None:
            raise ValueError(f"a row needs {used} columns but the forward's fixed widths are {list(widths)}")
        # tokens, positions and branch ids of every column; padding: pad_id, position 0 (plus start), branch -1
        table = np.zeros((3, len(rows), width), dtype=np.int64)
        table[0], table[2] = pad_id, -1
        for row, (tokens, branch_ids, levels) in enumerate(rows):
            table[0, row, : len(tokens)] = tokens
            table[1, row, : len(levels)] = levels
            table[2, row, : len(branch_ids)] = branch_ids
        self.levels = table[1].copy()
        if starts is not None:
            table[1] += np.asarray(starts, dtype=np.int64)[:, None]
        self.host_positions = table[1]
        self.visible = _visibility(table[2], self.levels)
        # one copy for both; from pageable memory CUDA stages the source before returning, so non_blocking only
        # spares the stream synchronization a blocking copy adds
        on_device = torch.from_numpy(table[:2]).to(device, non_blocking=True)
        self.tokens, self.positions = on_device[0], on_device[1]

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    @functools.cached_property
    def _where(self) -> list[dict[int, tuple[int, int]]]:
        """Per row, the (branch, level) of each column; only context-dependent logits processors need it."""
        return [
            {column: (b, level) for b, branch in enumerate(branches) for level, column in enumerate(branch.columns)}
            for branches in self.branches
        ]

    def drafts_before(self, row: int, column: int) -> list[int] | None:
        """The draft tokens a column's prediction is conditioned on after the committed text; None for padding."""
        where = self._where[row].get(column)
        if where is None:
            return None
        branch, level = where
        return self.branches[row][branch].tokens[1 : level + 1]


def _visibility(branch_ids: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """A column sees column 0 and the columns of its own branch at lower or equal levels; padding sees itself."""
    width = branch_ids.shape[1]
    same_branch = branch_ids[:, :, None] == branch_ids[:, None, :]
    earlier = levels[:, None, :] <= levels[:, :, None]
    root = np.zeros(width, dtype=bool)
    root[0] = True
    real = (branch_ids >= 0)[:, :, None]
    return np.eye(width, dtype=bool) | (real & ((same_branch & earlier) | root))
