"""How many of a chain's drafts are worth verifying: the adaptive chain length of `JacobiProposer`.

vLLM verifies every draft a proposer returns, and a verified token is not free: on a CPU a forward's time grows with
the tokens it processes, roughly `a + b * n` for n tokens in the batch. A draft at chain position j yields a token
only if it and every draft before it are accepted, with probability `p_j = q_1 * ... * q_j` where `q_i` is the
chance that draft i is accepted once all before it were. Verifying it adds `p_j` expected tokens at a cost of `b`,
which raises the step's throughput (tokens over time) exactly when

    p_j > b * tokens / (a + b * verified) = c * tokens / (1 + c * verified),     c = b / a,

with `tokens` and `verified` the step's expected output and verified tokens over all rows. `ChainBudget.threshold`
is the right-hand side (from running means per row), and each row's chain is cut before the first position whose
`p_j` falls below it: the fewer the rows, the more the fixed cost `a` dominates and the longer the chains; a full
batch verifies only drafts likely to pay. `c` (`verify_cost`) is a property of the machine; 0 turns the rule off
(every chain is proposed whole, as before).

`q_i` depends on where draft i came from (`SOURCES`): prompt lookup repeats text the request already holds and is
accepted often; a Jacobi token whose value did not change between the last two iterates has reached its fixed point
and is far likelier to be right than one that just changed; pool n-grams and random prompt tokens are rarely right.
Each request keeps accepted/tried counts per source (the drafts before the first rejection count as accepted, the
rejected one as tried, the rest say nothing), shrunk towards the counts of all requests so that a new request
starts from what the others have shown. The same estimates choose between the iterate and a shorter prompt-lookup
continuation (`ChainBudget.prefers`: the one expected to have more drafts accepted). None of this can change an
output: it only chooses which drafts vLLM checks.

Fixed and moved Jacobi tokens keep separate counts without a built-in order between them, since whether a fixed token
is likelier to be right depends on the model. The acceptance rates per source and the fitted c behind
`vllm.DEFAULT_VERIFY_COST` are measured in docs/serving.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

SOURCES = ("lookup", "agree", "fixed", "moved", "pool", "random")
"""Where a draft token came from: "lookup": what followed the request's last tokens earlier in its text; "agree": a
lookup token equal to the Jacobi iterate's at that position; "fixed": a Jacobi token equal to the draft it replaces
(converged); "moved": a Jacobi token that changed; "pool": a recycled n-gram; "random": a token drawn from the
prompt."""


@dataclass
class SourceRates:
    """Accepted and tried drafts per source, counted conditionally: a draft is tried when all before it were
    accepted, since vLLM stops at the first rejection and says nothing of the drafts after it.

    A request's own counts live in its `vllm_drafts` state and go when the request ends (its state is dropped after
    `JacobiDrafter.max_idle_steps` unclaimed steps); the counts over all requests live in `ChainBudget.rates`, which
    holds no per-request state, so nothing here grows with the number of requests served.
    """

    accepted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    tried: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))

    def record(self, sources: Sequence[str], accepted: int) -> None:
        """One verify of drafts from `sources` (in chain order) of which the first `accepted` were accepted."""
        for source in sources[:accepted]:
            self.accepted[source] += 1
            self.tried[source] += 1
        if accepted < len(sources):
            self.tried[sources[accepted]] += 1


@dataclass
class ChainBudget:
    """The rule that cuts each row's chain (see the module docstring).

    Args:
        verify_cost: c, the time one more verified token adds to a forward over the forward's fixed time; 0 turns
            the rule off. A finite number >= 0 (`vllm.verify_cost` reads it from HF_JACOBI_VLLM_VERIFY_COST).
        prior_strength: how many of a request's own drafts weigh as much as the rate seen over all requests: small
            enough that a request whose text suits lookup (or does not) shows it within a step or two.
        smoothing: weight of each step in the running means of tokens and verified tokens per row, so that the
            threshold follows a change of workload within a few dozen rows without jumping at every step.
        rates: the accepted/tried counts over all requests, each request's prior.
        tokens_per_row, verified_per_row: the running means behind `threshold`; they start at a guess (2 tokens
            committed for 4 verified) that the first steps soon replace.
    """

    verify_cost: float = 0.0
    prior_strength: float = 4.0
    smoothing: float = 0.05
    rates: SourceRates = field(default_factory=SourceRates)
    tokens_per_row: float = 2.0
    verified_per_row: float = 4.0

    def __post_init__(self) -> None:
        # A negative or NaN cost would silently turn the rule off and an infinite one makes the threshold NaN (which
        # keeps every draft): refuse them here too, not only where the environment variable is read, since
        # JacobiDrafter can be given a ChainBudget directly.
        if not (math.isfinite(self.verify_cost) and self.verify_cost >= 0):
            raise ValueError(
                f"verify_cost must be a finite number >= 0 (0 turns the rule off), got {self.verify_cost!r}"
            )
        if not (math.isfinite(self.prior_strength) and self.prior_strength > 0):
            raise ValueError(f"prior_strength must be a finite number > 0, got {self.prior_strength!r}")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing!r}")

    @property
    def enabled(self) -> bool:
        """Whether chains are cut at all: with c = 0 extra verified tokens are free and every chain is kept whole."""
        return self.verify_cost > 0

    def observe(self, sources: Sequence[str], accepted: int, own: SourceRates) -> None:
        """A row's verify of drafts from `sources`, the first `accepted` accepted: its counts and everyone's."""
        own.record(sources, accepted)
        self.rates.record(sources, accepted)

    def step(self, tokens: int, verified: int) -> None:
        """A row's step for the running means of the cost rule: `tokens` committed, `verified` tokens fed."""
        self.tokens_per_row += self.smoothing * (tokens - self.tokens_per_row)
        self.verified_per_row += self.smoothing * (verified - self.verified_per_row)

    def threshold(self, rows: int) -> float:
        """The least probability of acceptance a draft needs to be verified in a step of `rows` rows."""
        if not self.enabled:
            return 0.0
        cost = self.verify_cost * rows
        return cost * self.tokens_per_row / (1 + cost * self.verified_per_row)

    def rate(self, source: str, own: SourceRates) -> float:
        """q for a draft from `source`: the request's own rate shrunk towards everyone's, which itself starts at 1/2
        (add-one smoothing) so that a source nobody has tried yet is neither trusted nor ruled out."""
        overall = (self.rates.accepted[source] + 1) / (self.rates.tried[source] + 2)
        weight = self.prior_strength
        return (own.accepted[source] + weight * overall) / (own.tried[source] + weight)

    def expected(self, sources: Sequence[str], own: SourceRates) -> float:
        """The expected number of accepted drafts of a chain from `sources`: the sum of its p_j."""
        total, chance = 0.0, 1.0
        for source in sources:
            chance *= self.rate(source, own)
            total += chance
        return total

    def prefers(self, candidate: Sequence[str], current: Sequence[str], own: SourceRates) -> bool:
        """Whether a chain from `candidate` should replace one from `current`: the one expected to have more drafts
        accepted; with the rule off, the longer one (prompt lookup's own rule)."""
        if not self.enabled:
            return len(candidate) > len(current)
        return self.expected(candidate, own) > self.expected(current, own)

    def length(self, sources: Sequence[str], own: SourceRates, threshold: float) -> int:
        """How many leading drafts (of `sources`) have a probability of acceptance of at least `threshold`."""
        if threshold <= 0:
            return len(sources)
        chance = 1.0
        for position, source in enumerate(sources):
            chance *= self.rate(source, own)
            if chance < threshold:
                return position
        return len(sources)
