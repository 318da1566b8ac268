"""The draft a row keeps in flight between forwards: one active block and up to K-1 blocks after it.

The chain is [last committed token, drafts...], `blocks * block_size` tokens long, fed causally in one forward. The
first block is the active one: its first token is always right, and verification walks from it. Later (pseudo-active)
blocks hold drafts for the positions that follow, conditioned on everything before them, so they converge while the
active block does. Blocks roll with the text: when a row commits t tokens, every block moves t positions on and keeps
its drafts, so a later block's progress is never thrown away when it becomes the active one (the paper's promotion,
done continuously); and since the chain is causal, an accepted run can continue from one block into the next.

A block is spawned once the newest one has `spawn_ratio` of its tokens converged (unchanged by the last iteration,
counted from its start), so that new blocks start from a nearly settled context instead of noise.
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
        # converged[j]: the token at slot j was not changed by the last iteration (slot 0 is committed, so it is).
        self.converged = [True] + [False] * (block_size - 1)

    @property
    def width(self) -> int:
        return len(self.tokens)

    def advance(self, taken: int, continuation: list[int], fill: Callable[[int], list[int]]) -> None:
        """The Jacobi update once a row has committed `taken` tokens.

        Args:
            continuation: the new chain's leading tokens: the last committed token, then the model's predictions for the
                positions after it, as far as the last forward reached.
            fill: draws n fresh draft tokens for positions nothing has predicted yet.
        """
        old_tokens = self.tokens
        converged = [True]
        for j in range(1, len(continuation)):
            old = taken + j
            converged.append(old < len(old_tokens) and continuation[j] == old_tokens[old])
        if self.blocks < self.max_blocks and self._newest_block_settled(converged):
            self.blocks += 1
        width = self.blocks * self.block_size
        tokens = continuation[:width]
        self.converged = (converged + [False] * width)[:width]
        self.tokens = tokens + fill(width - len(tokens))

    def _newest_block_settled(self, converged: list[bool]) -> bool:
        start = (self.blocks - 1) * self.block_size
        settled = 0
        for slot in range(start, start + self.block_size):
            if slot >= len(converged) or not converged[slot]:
                break
            settled += 1
        return settled >= self.spawn_threshold
