"""The Jacobi draft chain: a row's first proposer, one active block and up to K-1 blocks after it.

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

from .acceptance import Verdict
from .proposers import StepOutcome
from .step_layout import Branch


class DraftChain:
    """One row's tokens in flight and how many blocks they span; the `Proposer` of the Jacobi iteration itself.

    Args:
        tokens: the first block: the first committed token, then its initial drafts.
        fill: draws fresh draft tokens for positions nothing has predicted yet (`PromptDrafter.draw` for the row).
    """

    def __init__(
        self,
        tokens: list[int],
        block_size: int,
        max_blocks: int,
        spawn_ratio: float,
        fill: Callable[[int], list[int]] | None = None,
    ) -> None:
        if len(tokens) != block_size:
            raise ValueError(f"a chain starts with one block of {block_size} tokens, got {len(tokens)}")
        self.tokens = tokens
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.blocks = 1
        self.spawn_threshold = min(max(math.ceil(spawn_ratio * block_size), 1), block_size)
        self.accepted_since_join = 0
        self.fill = fill

    def propose(self, text: list[int], earlier: list[list[int]]) -> list[list[int]]:
        return [self.tokens[1:]]

    def observe(self, outcome: StepOutcome) -> None:
        continuation = _continuation(outcome.branches, outcome.verdict, outcome.predictions, outcome.taken)
        self.advance(outcome.taken, continuation, self.fill)

    def advance(self, taken: int, continuation: list[int], fill: Callable[[int], list[int]] | None) -> None:
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
        missing = width - len(tokens)
        if missing > 0 and fill is None:
            raise ValueError(f"the chain needs {missing} fresh draft tokens but has no fill function")
        self.tokens = tokens + (fill(missing) if missing > 0 else [])


def _continuation(branches: list[Branch], verdict: Verdict, predictions: list[int], taken: int) -> list[int]:
    """The next chain's known tokens: the last committed token, then the predictions after it.

    The winning branch's predictions come first; past its end, the chain's predictions for the same positions.
    """
    accepted = taken - 1
    won, chained = branches[verdict.branch].columns, branches[0].columns
    # levels after the accepted ones from the winner while it lasts, then from the chain where it is longer
    tokens = [verdict.tokens[accepted], *[predictions[column] for column in won[accepted + 1 :]]]
    tokens.extend(predictions[column] for column in chained[len(won) :])  # accepted < len(won): it followed the winner
    return tokens
