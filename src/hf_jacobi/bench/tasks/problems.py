"""Question-and-answer tasks (GSM8K, MATH): problems read from a local file or a Hub dataset, asked with the paper's
"final answer within \\boxed{}" instruction, and scored by comparing the final answer with the reference.

Nothing is bundled for them, so `--data` names the source. They are asked as chat turns whenever the tokenizer has a
chat template (decided at encoding, so a task can be checked before a model is loaded), as a raw
"Question: ... Answer:" prompt otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...data.limits import check_limit
from .base import BenchItem, BenchTask, Score, TaskOptions

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to MATH/GSM8K questions so the model boxes its final answer, which is what the checkers look for."""

_DEFAULT_HUB_CONFIGS = {"gsm8k": "main", "openai/gsm8k": "main"}
HUB_SPLIT = "test"
"""The split of a Hub dataset read when none is named: the one benchmarks report on."""


@dataclass(frozen=True)
class MathProblem:
    problem_id: str
    question: str
    reference: str


@dataclass(frozen=True)
class RowFormat:
    """How one task's rows look: the columns it needs (any one of each group) and the (question, reference) of a row,
    which raises ValueError for a row it cannot read."""

    columns: tuple[tuple[str, ...], ...]
    read: Callable[[dict[str, Any]], tuple[str, str]]


def _check_columns(task: str, source: str, columns: list[str], required: tuple[tuple[str, ...], ...]) -> None:
    for alternatives in required:
        if not any(column in columns for column in alternatives):
            wanted = " or ".join(repr(column) for column in alternatives)
            raise ValueError(f"dataset {source!r} has no column {wanted} needed for task {task!r}; columns: {columns}")


def _problem_id(row: dict[str, Any], task: str, index: int) -> str:
    for column in ("id", "unique_id"):
        value = row.get(column)
        if value is not None and str(value) != "":
            return str(value)
    return f"{task}/{index}"


def load_problems(
    task: str, source: str, rows: RowFormat, split: str = HUB_SPLIT, limit: int | None = None
) -> list[MathProblem]:
    """Questions and gold answers from a local file or a Hub dataset; `split` only applies to Hub datasets."""
    check_limit(limit)
    from ...data.local_files import load_data_source  # datasets is imported only when a task reads its data

    dataset = load_data_source(source, split, _DEFAULT_HUB_CONFIGS)
    columns = list(dataset.column_names)
    _check_columns(task, source, columns, rows.columns)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    problems = []
    for index, row in enumerate(dataset):
        try:
            question, reference = rows.read(row)
        except ValueError as error:
            raise ValueError(f"dataset {source!r}, row {index}: {error}") from error
        problems.append(MathProblem(_problem_id(row, task, index), question, reference))
    return problems


def _answer_scorer(is_correct: Callable[[str, str], bool]):
    def score(items: list[BenchItem], completions: list[str]) -> list[Score]:
        verdicts = [
            is_correct(completion, item.reference) for item, completion in zip(items, completions, strict=True)
        ]
        return [Score(ok, "correct" if ok else "wrong") for ok in verdicts]

    return score


def question_task(
    name: str, options: TaskOptions, rows: RowFormat, is_correct: Callable[[str, str], bool], example: str
) -> BenchTask:
    """The task `name` over the problems of `options.data`; `example` is a Hub dataset to suggest when it is missing."""
    if options.data is None:
        raise ValueError(
            f"task {name!r} needs --data: a local .json/.jsonl/.parquet file or a Hub dataset name (e.g. {example})"
        )
    split = HUB_SPLIT if options.split is None else options.split
    problems = load_problems(name, options.data, rows, split=split, limit=options.limit)
    items = [BenchItem(p.problem_id, f"{p.question}\n{MATH_INSTRUCTION}", p.reference) for p in problems]
    return BenchTask(
        name, "accuracy", items, options.chat, (), _answer_scorer(is_correct), raw_format="Question: {text}\nAnswer:"
    )
