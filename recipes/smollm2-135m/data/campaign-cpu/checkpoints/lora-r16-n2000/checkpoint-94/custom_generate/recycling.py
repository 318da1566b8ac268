"""Rejection recycling: a per-row pool of n-grams that are proposed again when their context comes back.

A draft that Jacobi iteration rejects is often right a few positions later (code repeats names, math repeats
expressions), and so is text already in the prompt or already committed. The pool stores such n-grams under the
tokens that preceded them; when the row's last committed tokens match a key, the stored n-grams become candidate
branches verified in the same forward as the draft. Keys are suffixes of up to `key_size` tokens, so that a candidate
is proposed only where its left context matches, and lookups back off to shorter suffixes when the longest finds too
few candidates. Every candidate is verified, so the pool can only change speed, never the output.
"""

from __future__ import annotations

from collections.abc import Sequence

from .acceptance import matched_drafts
from .proposers import StepOutcome

Ngram = tuple[int, ...]


class NgramPool:
    """N-grams of up to `ngram_size` tokens, at most `capacity` per key, most recently seen first.

    Args:
        capacity: n-grams kept per key; the least recently seen is dropped beyond it.
        ngram_size: the length of the n-grams stored (shorter ones are kept only where a sequence ends).
        key_size: the longest key; every n-gram is filed under its 1..key_size preceding tokens.
        min_size: shorter n-grams are not worth a branch and are not stored.
    """

    def __init__(self, capacity: int, ngram_size: int, key_size: int, min_size: int = 2) -> None:
        self.capacity = capacity
        self.ngram_size = ngram_size
        self.key_size = key_size
        self.min_size = min(min_size, ngram_size)
        # per key, its n-grams in the order last seen (a dict as an ordered set: the newest last, the oldest first)
        self._entries: dict[Ngram, dict[Ngram, None]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def add(self, key: Sequence[int], ngram: Sequence[int]) -> None:
        """Files `ngram` under every suffix of `key` up to key_size tokens long."""
        if key:
            key = list(key[-self.key_size :])
            self.add_sequence([*key, *ngram[: self.ngram_size]], first_start=len(key), last_start=len(key))

    def add_sequence(self, tokens: Sequence[int], first_start: int, last_start: int | None = None) -> None:
        """Adds the n-grams of `tokens` that start at indices first_start..last_start, each keyed on what precedes it
        (as `add` would file them one by one, in order).

        Starts whose n-gram would run past the end of `tokens` store the shorter remainder. Every step files a few
        dozen n-grams per row, on the host, between two forwards (on a GPU the device idles meanwhile), so this is
        one tight loop of dict operations over one copied window: no list scans or inserts at the front.
        """
        last = len(tokens) - self.min_size if last_start is None else min(last_start, len(tokens) - self.min_size)
        first = max(first_start, 1)
        if first > last:
            return
        offset = max(0, first - self.key_size)
        window = tuple(tokens[offset : last + self.ngram_size])
        entries, capacity, size, key_size = self._entries, self.capacity, self.ngram_size, self.key_size
        for start in range(first - offset, last - offset + 1):
            ngram = window[start : start + size]
            for length in range(1, min(key_size, start) + 1):
                key = window[start - length : start]
                bucket = entries.get(key)
                if bucket is None:
                    entries[key] = {ngram: None}
                elif next(reversed(bucket)) != ngram:  # the rolling chain files the same tail again and again
                    bucket.pop(ngram, None)
                    bucket[ngram] = None
                    if len(bucket) > capacity:
                        del bucket[next(iter(bucket))]

    def candidates(self, context: Sequence[int], limit: int, exclude: Sequence[int] = ()) -> list[Ngram]:
        """Up to `limit` distinct n-grams for what follows `context`, longest matching key first, then most recent.

        An n-gram that `exclude` (the draft already in flight) starts with is skipped: verifying it twice gains
        nothing.
        """
        exclude = tuple(exclude)
        found: list[Ngram] = []
        for length in range(min(self.key_size, len(context)), 0, -1):
            for ngram in reversed(self._entries.get(tuple(context[-length:]), {})):
                if ngram in found or exclude[: len(ngram)] == ngram:
                    continue
                found.append(ngram)
                if len(found) == limit:
                    return found
        return found


class RecyclingProposer:
    """Rejection recycling as a `Proposer`: a row's pool, seeded with its prompt, proposing entries keyed on the last
    committed tokens and fed by every step's commits and rejected tail.

    Args:
        prompt: the row's prompt tokens (completions often repeat the prompt's text, so its n-grams are in from the start).
        capacity, ngram_size, key_size: see `NgramPool`.
        limit: candidates verified per step at most.
    """

    def __init__(self, prompt: Sequence[int], capacity: int, ngram_size: int, key_size: int, limit: int) -> None:
        self.pool = NgramPool(capacity, ngram_size, key_size)
        self.pool.add_sequence(prompt, first_start=1, last_start=len(prompt) - self.pool.ngram_size)
        self.limit = limit

    def propose(self, text: list[int], earlier: list[list[int]]) -> list[list[int]]:
        exclude = earlier[0] if earlier else ()
        return [list(ngram) for ngram in self.pool.candidates(text[-self.pool.key_size :], self.limit, exclude)]

    def observe(self, outcome: StepOutcome) -> None:
        """Feeds the pool what this step produced: the newly committed text and the chain's rejected tail.

        The rejected tail starts where the chain's own drafts stop matching the model; it is keyed on the draft tokens
        before it, the context it was written for, so it is proposed again if that context comes back.
        """
        pool, text, taken, chain = self.pool, outcome.text, outcome.taken, outcome.branches[0]
        size = pool.ngram_size
        pool.add_sequence(text, first_start=len(text) - taken - size + 1, last_start=len(text) - size)
        matched = matched_drafts(chain, outcome.predictions)
        if matched + 1 < len(chain):
            # Text before this step ends with chain.tokens[0]; the drafts follow it.
            context = text[max(0, len(text) - taken - pool.key_size) : len(text) - taken]
            pool.add_sequence(context + chain.tokens[1:], first_start=len(context) + matched)
