"""Which tokens a row commits after a forward: the acceptance rules for greedy decoding and for sampling.

All branches of a row (the draft chain and the recycled candidates) start at column 0, the last committed token, so
together they form a tree of proposals. Verification walks that tree one level at a time. At each level the model's
distribution is read at the column of one branch still alive (all of them share the same prefix, so they share the
context), a token is chosen, and only the branches proposing that token go on:

- greedy: the token is the argmax of the processed scores, exactly greedy's choice;
- sampling: the distinct proposed tokens are tried in turn, each accepted with its probability under what is left of
  the distribution, which then drops it and is renormalized; if none is accepted the token is drawn from that
  remainder. Drafts are deterministic proposals, so this recursive rejection makes every committed token distributed
  exactly as ancestral sampling would draw it.

The walk ends when no branch proposes the chosen token; that token is the bonus, committed with the accepted ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .step_layout import Branch


@dataclass
class Verdict:
    """What one row commits.

    Attributes:
        tokens: the accepted draft tokens followed by the bonus token.
        columns: the columns holding KV for the committed text: column 0, then one per accepted draft token.
        branch: the branch the accepted run followed to its end (0 is the draft chain).
    """

    tokens: list[int]
    columns: list[int]
    branch: int

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1


AcceptanceRule = Callable[[list[Branch], torch.Tensor, list[int]], Verdict]
"""(branches, one row's processed scores [Q, V], the argmax per column) -> what the row commits."""


def acceptance_rule(sampling: bool) -> AcceptanceRule:
    """The rule of one generate() call, chosen once: greedy's argmax walk, or recursive rejection sampling."""
    if sampling:
        return lambda branches, scores, predictions: sampled_verdict(branches, scores)
    return lambda branches, scores, predictions: greedy_verdict(branches, predictions)


def greedy_verdict(branches: list[Branch], predictions: list[int]) -> Verdict:
    """Longest run of proposals that greedy decoding would have produced; `predictions` is the argmax per column."""
    return _walk(branches, lambda column, proposed: predictions[column])


def sampled_verdict(branches: list[Branch], scores: torch.Tensor) -> Verdict:
    """Recursive rejection sampling over the proposal tree; `scores` [Q, V] are one row's processed scores.

    Uses torch's default CPU generator, so `torch.manual_seed` makes runs reproducible.
    """

    def choose(column: int, proposed: list[int]) -> int:
        remaining = torch.softmax(scores[column].to(device="cpu", dtype=torch.float64), dim=-1)
        for token in proposed:
            mass = float(remaining.sum())
            if mass > 0 and float(torch.rand((), dtype=torch.float64)) * mass < float(remaining[token]):
                return token
            remaining[token] = 0.0
        # Every proposal was rejected and has no mass left, so the draw never picks one: the walk ends here.
        return int(torch.multinomial(remaining, 1))

    return _walk(branches, choose)


def matched_drafts(branch: Branch, predictions: list[int]) -> int:
    """How many of a branch's drafts greedy would have produced: `greedy_verdict([branch], predictions).accepted`,
    without building a verdict (every row's pool asks it of its chain every step, on the host)."""
    line, columns = branch.tokens, branch.columns
    for level in range(len(line) - 1):
        if predictions[columns[level]] != line[level + 1]:
            return level
    return len(line) - 1


def _walk(branches: list[Branch], choose: Callable[[int, list[int]], int]) -> Verdict:
    """Follows the proposal tree from column 0 while some branch proposes the token `choose` picks.

    choose(column, proposed) returns the token at the level after `column`, given the distinct tokens the branches
    still alive propose there (in branch order).
    """
    if len(branches) == 1:
        return _walk_line(branches[0], choose)
    lines = [branch.tokens for branch in branches]
    alive = list(range(len(branches)))
    level = 0
    tokens: list[int] = []
    while True:
        longer = [b for b in alive if len(lines[b]) > level + 1]
        proposed = list(dict.fromkeys(lines[b][level + 1] for b in longer))
        chosen = choose(branches[alive[0]].columns[level], proposed)
        tokens.append(chosen)
        following = [b for b in longer if lines[b][level + 1] == chosen]
        if not following:
            break
        alive = following
        level += 1
    return Verdict(tokens, branches[alive[0]].columns[: level + 1], alive[0])


def _walk_line(branch: Branch, choose: Callable[[int, list[int]], int]) -> Verdict:
    """`_walk` over one branch, the same verdict without the tree's bookkeeping: a row whose pool proposes nothing
    walks its chain alone, on the host, between two forwards."""
    line, columns = branch.tokens, branch.columns
    last = len(line) - 1
    tokens: list[int] = []
    level = 0
    while True:
        proposed = line[level + 1] if level < last else None
        chosen = choose(columns[level], [] if proposed is None else [proposed])
        tokens.append(chosen)
        if proposed is None or chosen != proposed:
            return Verdict(tokens, columns[: level + 1], 0)
        level += 1
