"""The Jacobi update for vLLM's rows, with per-request state keyed by each request's token history.

vLLM hands a custom proposer rows of its persistent batch, never request ids, and moves requests between rows as the
batch is condensed. So a request's state (its `DraftChain`: how many blocks are in flight, and the generator that
draws fresh draft tokens from its prompt) is filed under a digest of the request's whole token history as it stood
after the last step. The next step finds it again from the history vLLM hands over: the same tokens, minus the ones
this step committed. Two requests with identical histories share a digest; each key holds a list of states, and
since decoding is deterministic those states are interchangeable. A state nobody claims for `max_idle_steps` steps
belongs to a request that ended (finished, aborted, or preempted long enough to start over) and is dropped. None of
this can change an output: every draft is verified, and a lost state only means fresh drafts.

This module imports nothing from vLLM, so its logic is tested in the main suite.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..decoding.chain import DraftChain
from ..decoding.drafts import PromptDrafter
from ..decoding.recycling import NgramPool
from .vllm_adaptive import ChainBudget, SourceRates

DRAFT_MODES = ("lookup", "fill", "plain")
"""How the chain is completed past the Jacobi iterate; see `JacobiDrafter`."""


@dataclass(frozen=True)
class RowStep:
    """What one row of vLLM's batch brings to one `propose` call.

    Attributes:
        history: the request's tokens, prompt then output, this step's commits included (vLLM's `token_ids_cpu` row
            up to `num_tokens_no_spec`).
        sampled: the tokens committed this step (accepted drafts, then the target's own token); empty while the
            request's prefill is unfinished.
        iterate: the target's greedy token at each position verified this step, then the bonus token (the next
            Jacobi iterate), or None when the step verified no drafts for this row or nothing was captured.
    """

    history: np.ndarray
    sampled: list[int]
    iterate: list[int] | None


@dataclass
class _RequestState:
    chain: DraftChain
    drafter: PromptDrafter
    pool: NgramPool | None = None
    idle_steps: int = 0
    rates: SourceRates = field(default_factory=SourceRates)
    sources: list[str] = field(default_factory=list)
    steps: int = 0


@dataclass
class JacobiDrafter:
    """Next drafts for every row of a vLLM batch: the Jacobi iterate past the accepted prefix, then fresh tokens.

    Args:
        block_size: tokens per Jacobi block, the committed token included.
        num_blocks: blocks in flight at most; the chain is `num_blocks * block_size` tokens, so vLLM must verify
            `num_blocks * block_size - 1` speculative tokens.
        spawn_ratio: `DraftChain`'s rule for when the next block joins.
        draft_seed: seeds each request's draw of fresh tokens from its prompt (`PromptDrafter`, as in generate()).
        max_idle_steps: steps a state may go unclaimed before it is dropped.
        mode: what completes the chain, since vLLM verifies one chain and recycling cannot add branches:
            "plain": the iterate, then random prompt tokens, exactly as generate(decoding="jacobi") without a pool;
            "fill": the iterate, then the pool's n-gram for the text before the positions it does not reach
            (`NgramPool`, fed with the prompt, the commits and rejected draft tails, as recycling feeds it);
            "lookup" (default): where the request's own text holds its last 2-4 tokens earlier, what followed them
            there replaces the iterate's tail if it is longer, or with `budget` on if more of it is expected to be
            accepted (prompt lookup); else as "fill".
        pool_size: n-grams kept per key (the checkpoint's `jacobi_ngram_pool_size`; 0: random tokens fill instead).
        ngram_size, ngram_key_size: the pool's n-gram length (default block_size - 1) and key length.
        budget: the adaptive chain length (`vllm_adaptive.ChainBudget`): each row's drafts are cut where they stop
            paying for their verification; its default (verify_cost 0) proposes every chain whole.
    """

    block_size: int
    num_blocks: int = 1
    spawn_ratio: float = 0.85
    draft_seed: int = 0
    max_idle_steps: int = 16
    mode: str = "lookup"
    pool_size: int = 0
    ngram_size: int | None = None
    ngram_key_size: int = 2
    budget: ChainBudget = field(default_factory=ChainBudget)
    _states: dict[bytes, list[_RequestState]] = field(default_factory=dict, repr=False)
    stats: dict[str, int] = field(
        default_factory=lambda: {"rows": 0, "iterates": 0, "mismatches": 0, "lookups": 0, "drafts": 0, "cut": 0},
        repr=False,
    )

    def __post_init__(self) -> None:
        if self.mode not in DRAFT_MODES:
            raise ValueError(f"the Jacobi draft mode must be one of {list(DRAFT_MODES)}, got {self.mode!r}")

    @property
    def max_drafts(self) -> int:
        """The longest draft list this drafter returns (vLLM's `num_speculative_tokens`)."""
        return self.num_blocks * self.block_size - 1

    def __len__(self) -> int:
        """Requests whose state is kept."""
        return sum(len(states) for states in self._states.values())

    def propose(self, rows: Sequence[RowStep]) -> list[list[int]]:
        """One draft list per row, in row order, at most `max_drafts` long; empty for rows still in prefill."""
        for states in self._states.values():
            for state in states:
                state.idle_steps += 1
        claimed: list[tuple[bytes, _RequestState]] = []
        drafts = []
        threshold = self.budget.threshold(sum(1 for row in rows if row.sampled))
        for row in rows:
            if not row.sampled:
                drafts.append([])
                continue
            state = self._claim(row)
            tokens, sources = self._advance(state, row)
            keep = self.budget.length(sources, state.rates, threshold)
            state.sources = sources[:keep]
            drafts.append(tokens[:keep])
            self.stats["drafts"] += keep
            self.stats["cut"] += len(tokens) - keep
            state.idle_steps = 0
            claimed.append((history_key(row.history), state))
        self._drop_idle()
        for key, state in claimed:
            self._states.setdefault(key, []).append(state)
        return drafts

    def _claim(self, row: RowStep) -> _RequestState:
        """The row's state from the last step (found under its history before this step's commits), else a new one."""
        before = row.history[: len(row.history) - len(row.sampled)]
        states = self._states.get(history_key(before))
        if states:
            state = states.pop()
            if not states:
                del self._states[history_key(before)]
            return state
        prompt = before.tolist() or [int(row.sampled[-1])]
        tensor = torch.tensor([prompt], dtype=torch.long)
        drafter = PromptDrafter(tensor, torch.ones_like(tensor, dtype=torch.bool), seed=self.draft_seed)
        tokens = [int(row.sampled[-1]), *drafter.draw(0, self.block_size - 1)]
        chain = DraftChain(
            tokens, self.block_size, self.num_blocks, self.spawn_ratio, fill=lambda n: drafter.draw(0, n)
        )
        pool = None
        if self.pool_size and self.mode != "plain":
            pool = NgramPool(self.pool_size, self.ngram_size or max(self.block_size - 1, 1), self.ngram_key_size)
            pool.add_sequence(prompt, first_start=1, last_start=len(prompt) - pool.ngram_size)
        return _RequestState(chain=chain, drafter=drafter, pool=pool)

    def _advance(self, state: _RequestState, row: RowStep) -> tuple[list[int], list[str]]:
        """The Jacobi update: the committed token, the iterate's predictions past it, then fresh tokens; returns
        the drafts and the source of each (`vllm_adaptive.SOURCES`)."""
        taken = len(row.sampled)
        previous = state.chain.tokens
        continuation = [int(row.sampled[-1])]
        sources: list[str] = []
        self.stats["rows"] += 1
        if state.steps:  # not the prefill's token
            self.budget.step(taken, len(state.sources) + 1)
        state.steps += 1
        if row.iterate is not None:
            if list(row.iterate[:taken]) == [int(t) for t in row.sampled]:
                tail = [int(t) for t in row.iterate[taken:]]
                continuation += tail
                sources = [converged(previous, taken + 1 + i, token) for i, token in enumerate(tail)]
                self.stats["iterates"] += 1
                verified = state.sources[: len(row.iterate) - 1]
                self.budget.observe(verified, min(taken - 1, len(verified)), state.rates)
            else:  # a sampled (non-greedy) row, or a capture that does not belong to this step
                self.stats["mismatches"] += 1
        if self.mode == "lookup":
            found = history_match(row.history, self.max_drafts)
            found_sources = ["agree" if t in continuation[i + 1 : i + 2] else "lookup" for i, t in enumerate(found)]
            if self.budget.prefers(found_sources, sources, state.rates):
                sources = found_sources
                continuation = [continuation[0], *found]
                self.stats["lookups"] += 1
        if state.pool is not None:
            continuation = self._recycle(state, row.history.tolist(), taken, continuation)
            sources += ["pool"] * (len(continuation) - 1 - len(sources))
        state.chain.advance(taken, continuation, state.chain.fill)
        drafts = state.chain.tokens[1 : self.max_drafts + 1]
        return drafts, (sources + ["random"] * len(drafts))[: len(drafts)]

    def _recycle(self, state: _RequestState, text: list[int], taken: int, continuation: list[int]) -> list[int]:
        """Feeds the pool this step's commits and the last chain's rejected tail (as `RecyclingProposer` does), then
        appends its n-gram for the text before the first position the continuation does not reach."""
        pool, size, key = state.pool, state.pool.ngram_size, state.pool.key_size
        pool.add_sequence(text, first_start=len(text) - taken - size + 1, last_start=len(text) - size)
        previous = state.chain.tokens
        if taken < len(previous):  # drafts past the accepted ones were rejected: keep them for their context
            context = text[max(0, len(text) - taken - key) : len(text) - taken]
            pool.add_sequence(context + previous[1:], first_start=len(context) + taken - 1)
        if len(continuation) > self.max_drafts:
            return continuation
        found = pool.candidates([*text, *continuation[1:]][-key:], 1)
        return continuation + list(found[0]) if found else continuation

    def _drop_idle(self) -> None:
        for key in [
            k for k, states in self._states.items() if any(s.idle_steps > self.max_idle_steps for s in states)
        ]:
            kept = [s for s in self._states[key] if s.idle_steps <= self.max_idle_steps]
            if kept:
                self._states[key] = kept
            else:
                del self._states[key]


def converged(previous: list[int], index: int, token: int) -> str:
    """The source of a Jacobi token: "fixed" where it equals the previous chain's draft at its position (`index`
    there), a fixed point of the iteration, else "moved"."""
    return "fixed" if index < len(previous) and previous[index] == token else "moved"


def history_match(text: np.ndarray, length: int, longest_key: int = 4, shortest_key: int = 2) -> list[int]:
    """What followed the earliest occurrence of the text's last 2-4 tokens (longest key first), up to `length`
    tokens: prompt lookup over the request's own text, as vLLM's n-gram proposer does."""
    size = len(text)
    for key in range(longest_key, shortest_key - 1, -1):
        if size <= key:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(text[: size - 1], key)
        hits = np.flatnonzero((windows == text[size - key :]).all(axis=1))
        if len(hits):
            start = int(hits[0]) + key
            return text[start : start + length].tolist()
    return []


def history_key(tokens: np.ndarray) -> bytes:
    """A digest of a token history: equal histories, equal keys, whatever row or dtype they came in."""
    return hashlib.blake2b(np.ascontiguousarray(tokens, dtype=np.int64).tobytes(), digest_size=16).digest()


def split_iterates(
    argmax: Sequence[int], bonus: Sequence[int], num_draft_tokens: Sequence[int]
) -> list[list[int] | None]:
    """Each row's iterate from one verify: its slice of the flat argmax, then its bonus token; None for a row that
    verified no drafts (its only token is the one it sampled, which says nothing about the positions after it)."""
    iterates: list[list[int] | None] = []
    start = 0
    for row, count in enumerate(num_draft_tokens):
        iterates.append([*argmax[start : start + count], bonus[row]] if count else None)
        start += count
    if start != len(argmax) or len(bonus) != len(num_draft_tokens):
        raise ValueError(
            f"a capture of {len(argmax)} verified positions and {len(bonus)} bonus tokens does not split into "
            f"rows of {list(num_draft_tokens)} drafts"
        )
    return iterates
