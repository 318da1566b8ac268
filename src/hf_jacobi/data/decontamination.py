"""Checking that training prompts share no text with evaluation sets.

A Jacobi Forcing model is judged on prompts it never saw; a training prompt that quotes an evaluation problem would
make its held-out tokens per forward (and pass@1) look better than they are. The check is the usual word 13-gram
overlap used to decontaminate LM training data: any shared run of 13 words (case-folded) flags the pair.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NGRAM = 13
_WORD = re.compile(r"\w+")


def word_ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    """The case-folded word n-grams of a text (none when it has fewer than n words)."""
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass(frozen=True)
class Overlap:
    """A training prompt and an evaluation text that share at least one word n-gram (one shown)."""

    candidate: str
    reference: str
    ngram: str


def find_overlaps(candidates: Mapping[str, str], references: Mapping[str, str], n: int = NGRAM) -> list[Overlap]:
    """Every candidate (id -> text) sharing a word n-gram with some reference (id -> text), at most once each."""
    owner: dict[tuple[str, ...], str] = {}
    for reference_id, text in references.items():
        for gram in word_ngrams(text, n):
            owner.setdefault(gram, reference_id)
    overlaps = []
    for candidate_id, text in candidates.items():
        shared = next((gram for gram in word_ngrams(text, n) if gram in owner), None)
        if shared is not None:
            overlaps.append(Overlap(candidate_id, owner[shared], " ".join(shared)))
    return overlaps


def prompt_texts(rows: Iterable[Mapping]) -> dict[str, str]:
    """prompt_id -> the user turns of a prompt dataset's rows, joined: the text a training prompt shows the model."""
    return {
        row["prompt_id"]: "\n".join(turn["content"] for turn in row["messages"] if turn["role"] == "user")
        for row in rows
    }
