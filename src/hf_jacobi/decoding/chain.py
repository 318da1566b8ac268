"""The draft a row keeps in flight between forwards: one active block and up to K-1 blocks after it.

The chain is [last committed token, drafts...], `blocks * block_size` tokens long, fed causally in one forward. The
first block is the active one: its first token is always right, and verification walks from it. Later (pseudo-active)
blocks hold drafts for the positions that follow, conditioned on everything before them, so they converge while the
active block does. Blocks roll with the text: when a row commits t tokens, every block moves t positions on and keeps
its drafts, so a later block's progress is never thrown away when it becomes the active one (the paper's promotion,
done continuously); and since the chain is causal, an accepted run can continue from one block into the next.

Blocks join one at a time: once the newest block has accepted `spawn_ratio` of its length (the row has committed that
many tokens since it joined), the next one joins behind it, up to `max_blocks`. The first iterations, whose drafts are
still random prompt tokens, are thus not spent on a wide chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable


class DraftChain:
    """One row's tokens in flight and how many blocks they span."""

    def __init__(self, tokens: list[int], block_size: int, max_blocks: int, spawn_ratio: float) -> None:
        if len(tokens) != block_size:
            raise ValueError(f"a chain starts with one block of {block_size} tokens, got {len(tokens)}")
        self.tokens = tokens
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.blocks = 1
        self.spawn_threshold = min(max(math.ceil(spawn_ratio * block_size), 1), block_size)
        self.accepted_since_join = 0

    @property
    def width(self) -> int:
        return len(self.tokens)

    def advance(self, taken: int, continuation: list[int], fill: Callable[[int], list[int]]) -> None:
        """The Jacobi update once a row has committed `taken` tokens.

        Args:
            continuation: the new chain's leading tokens: the last committed token, then the model's predictions for the
                positions after it, as far as the last forward reached.
            fill: draws fresh draft tokens for positions nothing has predicted yet.
        """
        self.accepted_since_join += taken
        if self.blocks < self.max_blocks and self.accepted_since_join >= self.spawn_threshold:
            self.blocks += 1
            self.accepted_since_join = 0
        width = self.blocks * self.block_size
        tokens = continuation[:width]
        self.tokens = tokens + fill(width - len(tokens))
