"""Two small, hand-written, frozen evaluation sets for answer quality: does an adapter keep the base model's answers?

Tokens per forward say how fast a Jacobi Forcing adapter decodes, not whether its answers are still as good as the
base model's. These sets measure that on what users actually type to a small instruct model:

- `requests` (`prompt_sets/requests.jsonl`): 48 plain chat requests, 6 in each of 8 categories (explain, code,
  summarize, howto, translate, write, compare, advice), for comparing answers side by side;
- `code-tasks` (`prompt_sets/code-tasks.jsonl`): 32 code requests with a reference solution and asserts, so answers
  are scored by running them (pass@1), not by judgement.

Both were written by hand for this project (no public benchmark text, no HumanEval problem) and are frozen: a changed
row would make figures from different days incomparable. They are evaluation sets, registered as evaluation-only
prompt sources, so collecting training trajectories from them is refused. See `prompt_sets/requests.md`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import datasets

from .limits import check_limit, check_split
from .local_files import load_local_dataset

PROMPT_SETS = Path(__file__).parent / "prompt_sets"
REQUESTS_FILE = PROMPT_SETS / "requests.jsonl"
CODE_TASKS_FILE = PROMPT_SETS / "code-tasks.jsonl"
REQUEST_COLUMNS = ("prompt_id", "category", "messages")
CODE_TASK_COLUMNS = ("task_id", "request", "entry_point", "canonical_solution", "test")
TEST_SPLIT = "test"
"""The one split of both sets: the whole set is held out, there is nothing to train on."""
WHOLE_SET_HELD_OUT = "the whole set, held out"
"""Why a set has only `TEST_SPLIT`, as its split error says it."""


def _read(path: Path, name: str, columns: tuple[str, ...], limit: int | None) -> datasets.Dataset:
    """The first `limit` rows of a shipped JSONL set, in file order, checked to hold the columns its readers expect
    (a hand edit that drops a field should fail here, naming it, not later as a KeyError in an evaluation)."""
    check_limit(limit)
    table = load_local_dataset([path], "json", name)
    missing = [column for column in columns if column not in table.column_names]
    if missing:
        raise ValueError(
            f"the {name} set {str(path)!r} lacks the columns {missing}; columns found: {table.column_names}"
        )
    table = table.select_columns(list(columns))
    return table.select(range(min(limit, len(table)))) if limit is not None else table


def load_requests(limit: int | None = None) -> datasets.Dataset:
    """The first `limit` requests (all 48 when None) in file order, columns `prompt_id`, `category`, `messages` (one
    user turn each). File order groups the categories, so a small `limit` covers only the first ones."""
    return _read(REQUESTS_FILE, "requests", REQUEST_COLUMNS, limit)


@dataclass(frozen=True)
class CodeTask:
    """One execution-checked code request: the model answers `request` in a chat, and its code passes when `test`'s
    `check(entry_point)` runs to the end (the HumanEval convention, so the project's sandbox runs both alike)."""

    task_id: str
    request: str
    """The plain-language chat request, naming the function and its signature (unlike HumanEval, no code stub)."""
    entry_point: str
    canonical_solution: str
    """A whole module defining `entry_point` that passes `test`: proof that the task is solvable as stated."""
    test: str
    """Source of `def check(candidate)` with the asserts."""

    def program(self, code: str) -> str:
        """The program the sandbox runs: `code` (a whole answer, since the model writes the full function), then the
        tests called on the entry point."""
        return code + "\n\n" + self.test + f"\n\ncheck({self.entry_point})\n"

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat the model is asked: one user turn holding the request."""
        return [{"role": "user", "content": self.request}]


def load_code_tasks(limit: int | None = None) -> list[CodeTask]:
    """The first `limit` code tasks (all 32 when None) in file order."""
    table = _read(CODE_TASKS_FILE, "code-tasks", CODE_TASK_COLUMNS, limit)
    return [CodeTask(**{column: row[column] for column in CODE_TASK_COLUMNS}) for row in table]


def _check_split(name: str, split: str) -> None:
    check_split(f"the {name} prompt set", split, (TEST_SPLIT,), WHOLE_SET_HELD_OUT)


def request_prompts(split: str, limit: int | None = None) -> datasets.Dataset:
    """The `requests` prompt source: `prompt_id` / `messages` rows of the `test` split (every request)."""
    _check_split("requests", split)
    return load_requests(limit).select_columns(["prompt_id", "messages"])


def code_task_prompts(split: str, limit: int | None = None) -> datasets.Dataset:
    """The `code-tasks` prompt source: `prompt_id` (the task id) / `messages` rows of the `test` split (every task)."""
    _check_split("code-tasks", split)
    tasks = load_code_tasks(limit)
    return datasets.Dataset.from_dict(
        {"prompt_id": [task.task_id for task in tasks], "messages": [task.messages for task in tasks]}
    )
