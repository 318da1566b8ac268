"""Decoding measured: one `generate` call timed, its answers cut by one rule, its forwards counted by one rule.

Every figure this project prints about a decoding (the generate and demo commands, the benchmarks, tune, the
held-out evaluation of training) goes through `decode`, so that "tokens", "forwards" and "identical" mean the same
thing everywhere:
- a row's answer is what it generated up to and including its first EOS; a row that ended without EOS loses the
  padding a batch gives it while longer rows go on;
- greedy needs one forward per answer token after the first (the prefill yields the first token), Jacobi reports its
  own count (`forward_passes`);
- two decodings are identical when their output tensors are, padding included.
The answer metrics that speed is read beside (loops, distinct n-grams, shared prefixes) live here too, so that
training's evaluation and the benchmarks count them alike without one importing the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

__all__ = [
    "COLLAPSE_DISTINCT",
    "COLLAPSE_ORDER",
    "COLLAPSE_WINDOW",
    "Decoded",
    "collapsed",
    "common_prefix",
    "decode",
    "distinct_ngrams",
    "generated_tokens",
    "timed",
]

T = TypeVar("T")

COLLAPSE_WINDOW = 64
"""Tokens at the end of an answer that the loop check reads: a loop that lasts this long has taken over."""
COLLAPSE_ORDER = 4
COLLAPSE_DISTINCT = 0.4
"""An answer has collapsed when under this share of its last COLLAPSE_WINDOW tokens' COLLAPSE_ORDER-grams differ."""


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """Result and wall seconds of one call; CUDA is synchronized so queued kernels are not left out."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def generated_tokens(row: torch.Tensor, eos_ids: set[int], pad_id: int | None = None) -> list[int]:
    """The tokens a row really generated: up to and including its first EOS, without the padding a finished row gets
    while others in its batch go on (stripped from the end when `pad_id` is given and no EOS came)."""
    tokens = row.tolist()
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    while tokens and pad_id is not None and tokens[-1] == pad_id:
        tokens.pop()
    return tokens


@dataclass
class Decoded:
    """One `generate` call, measured."""

    sequences: torch.Tensor
    """The output ids, prompt and padding included (what identity is checked on)."""
    answers: list[list[int]]
    """Per row, its generated tokens (`generated_tokens`)."""
    forwards: list[int]
    """Per row, its decoding forwards after the prefill."""
    forward_tokens: list[int]
    """Per row, the tokens fed through those forwards (chain and candidates; greedy: one per forward)."""
    recycled_tokens: list[int]
    seconds: float
    output: Any
    """What generate returned, for what a caller needs beyond the counts."""

    @property
    def new_tokens(self) -> list[int]:
        return [len(answer) for answer in self.answers]

    def same_as(self, other: Decoded) -> list[bool]:
        """Per row, whether its output ids equal `other`'s (both of the same batch)."""
        if self.sequences.shape != other.sequences.shape:
            return [False] * self.sequences.shape[0]
        return [bool(torch.equal(a, b)) for a, b in zip(self.sequences, other.sequences, strict=True)]


def decode(
    model,
    inputs: dict[str, torch.Tensor],
    max_new_tokens: int,
    settings: Any = None,
    *,
    eos_ids: set[int],
    pad_id: int | None = None,
    **generate_kwargs: Any,
) -> Decoded:
    """Runs `model.generate` once, timed, and counts its answers and forwards.

    `settings` is a `JacobiConfig` (or a dict of generate keyword arguments, e.g. a compiled greedy baseline's); None
    is greedy, asked for by name, since a checkpoint whose generation config defaults to Jacobi would otherwise be its
    own reference. Greedy unless `generate_kwargs` say otherwise (`do_sample=True` and its parameters).
    """
    if settings is None:
        settings = {"decoding": "greedy"}
    elif not isinstance(settings, dict):
        # a measurement of Jacobi settings runs them on every device, even where a checkpoint decodes greedily
        settings = settings.replace(greedy_devices=()).to_generate_kwargs()
    kwargs = {"do_sample": False, **generate_kwargs, **settings, "return_dict_in_generate": True}
    output, seconds = timed(lambda: model.generate(**inputs, max_new_tokens=max_new_tokens, **kwargs))
    width = inputs["input_ids"].shape[1]
    answers = [generated_tokens(row, eos_ids, pad_id) for row in output.sequences[:, width:]]
    passes = getattr(output, "forward_passes", None)
    if passes is None:  # greedy: one forward per answer token after the first
        forwards = [max(len(answer) - 1, 0) for answer in answers]
        fed, recycled = list(forwards), [0] * len(answers)
    else:
        forwards = [int(n) for n in passes]
        fed = [int(n) for n in output.forward_tokens]
        recycled = [int(n) for n in output.recycled_tokens]
    return Decoded(output.sequences, answers, forwards, fed, recycled, seconds, output)


def distinct_ngrams(answers: Sequence[Sequence[int]], n: int = 3) -> float:
    """Distinct token n-grams over all n-grams of the answers: low when the model repeats itself."""
    grams = [tuple(a[i : i + n]) for a in answers for i in range(len(a) - n + 1)]
    return len(set(grams)) / max(len(grams), 1)


def collapsed(answer: Sequence[int]) -> bool:
    """Whether the answer ends in a loop. Answers shorter than the window ended by themselves and never count: a
    looping answer runs to the token budget."""
    tail = list(answer[-COLLAPSE_WINDOW:])
    if len(tail) < COLLAPSE_WINDOW:
        return False
    return distinct_ngrams([tail], COLLAPSE_ORDER) < COLLAPSE_DISTINCT


def common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    """Tokens two answers share from their start."""
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length
