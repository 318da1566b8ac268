"""Where drafts come from: the one interface between draft sources and the loop that verifies them.

Each forward verifies, per row, a tree of proposals rooted at the row's last committed token: the Jacobi draft chain
(always the first branch, one or more blocks long) and any number of extra branches (recycled n-grams today; a
learned draft head would be one more source). The loop asks every source of a row for branches, verifies them all in
one forward, and then tells every source what happened, so that each updates its own state: the chain performs the
Jacobi update, the n-gram pool harvests the rejected tail. This is transformers' CandidateGenerator split
(get_candidates / update_candidate_strategy) with a tree of candidates instead of one line, so a new source plugs in
without touching the loop or the acceptance rules, and can only change speed: every branch is verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .acceptance import Verdict
from .step_layout import Branch


@dataclass(frozen=True)
class StepOutcome:
    """What one forward decided for one row, as every proposer of that row sees it.

    Attributes:
        text: the row's text (prompt without padding, then everything generated), after this step's commit.
        taken: tokens committed this step (the verdict's tokens, cut short when the row finished among them).
        verdict: the acceptance rule's decision.
        branches: the verified branches, the chain first; each starts with the root (the previous last token).
        predictions: the argmax of the processed scores at every column of the row.
    """

    text: list[int]
    taken: int
    verdict: Verdict
    branches: list[Branch]
    predictions: list[int]


class Proposer(Protocol):
    """A source of draft branches for one row."""

    def propose(self, text: list[int], earlier: list[list[int]]) -> list[list[int]]:
        """Branches to verify after `text`, each a list of draft tokens for the positions after its last token.

        `earlier` holds the branches the row's previous sources proposed this step, so that a source can skip what is
        already in flight (verifying it twice gains nothing).
        """
        ...

    def observe(self, outcome: StepOutcome) -> None:
        """Updates the source from the step's outcome."""
        ...
