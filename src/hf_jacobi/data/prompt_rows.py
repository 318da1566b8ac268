"""Any data set's rows reduced to prompts: one `prompt_id` / `messages` table, with chat answers cut off.

Trajectories are collected by letting the model itself answer prompts, so only the prompt side of a row is kept:
role/content and ShareGPT's from/value turns alike become user turns up to the first answer; the paper's two hub
sets have their own readers (`from_opencodeinstruct`, `from_openthoughts`). `prompts.load_prompts` picks the source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import datasets

from .chat import Messages
from .limits import check_limit

PROMPT_COLUMNS = ("messages", "conversations", "prompt", "input", "instruction", "question")
ID_COLUMNS = ("prompt_id", "id")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant"}


def _turn(turn: Any) -> dict[str, str]:
    """One chat turn as {"role", "content"}, accepting both role/content and ShareGPT's from/value."""
    if not isinstance(turn, Mapping):
        raise ValueError(f"a chat turn must be a dict with role/content or from/value, got {turn!r}")
    role = turn.get("role") if turn.get("role") is not None else turn.get("from")
    content = turn.get("content") if turn.get("content") is not None else turn.get("value")
    if not isinstance(role, str) or not isinstance(content, str):
        raise ValueError(f"a chat turn needs a string role/content (or from/value), got {dict(turn)!r}")
    return {"role": ROLES.get(role.lower(), role.lower()), "content": content}


def _as_messages(value: Any) -> Messages:
    """The prompt part of one cell: a string becomes one user turn; a chat is cut before its first answer.

    Keeps the turns up to and including the last user turn before the first assistant turn, so system prompts and
    multi-part questions stay but the reference answer (which the model must produce itself) is dropped.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}] if value.strip() else []
    if not isinstance(value, list):
        raise ValueError(f"a prompt must be a string or a list of chat turns, got {type(value).__name__}: {value!r}")
    turns = [_turn(turn) for turn in value]
    answer = next((i for i, turn in enumerate(turns) if turn["role"] == "assistant"), len(turns))
    last_user = max((i for i, turn in enumerate(turns[:answer]) if turn["role"] == "user"), default=None)
    if last_user is None or not any(t["content"].strip() for t in turns[: last_user + 1] if t["role"] == "user"):
        return []
    return turns[: last_user + 1]


def _rows(dataset: datasets.Dataset, columns: list[str]) -> Iterator[dict[str, Any]]:
    """Rows of only the needed columns, read in batches (large hub sets have millions of rows)."""
    for batch in dataset.select_columns(columns).iter(batch_size=1024):
        for i in range(len(batch[columns[0]])):
            yield {column: batch[column][i] for column in columns}


def convert_rows(
    dataset: datasets.Dataset,
    name: str,
    column: str,
    *,
    limit: int | None,
    to_messages: Callable[[Any], Messages] = _as_messages,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    keep_columns: tuple[str, ...] = (),
) -> datasets.Dataset:
    """Rows of `dataset` as `prompt_id` / `messages` (the prompt in `column`): ids, dropping empty prompts, duplicate checks, and stopping at `limit` kept rows."""
    check_limit(limit)
    if len(dataset) == 0:
        raise ValueError(f"dataset {name!r} is empty")
    if column not in dataset.column_names:
        raise ValueError(f"dataset {name!r} has no column {column!r}; columns found: {dataset.column_names}")
    id_column = next((c for c in ID_COLUMNS if c in dataset.column_names), None)
    extra = [c for c in keep_columns if c in dataset.column_names]
    needed = list(dict.fromkeys(c for c in (column, id_column, *extra) if c))
    prompt_ids: list[str] = []
    messages: list[Messages] = []
    seen: set[str] = set()
    for index, row in enumerate(_rows(dataset, needed)):
        if keep is not None and not keep(row):
            continue
        turns = to_messages(row[column])
        if not turns:
            continue
        prompt_id = str(row[id_column]) if id_column else f"{name}/{index}"
        if prompt_id in seen:
            raise ValueError(f"duplicate prompt_id {prompt_id!r} in dataset {name!r}")
        seen.add(prompt_id)
        prompt_ids.append(prompt_id)
        messages.append(turns)
        if limit is not None and len(prompt_ids) >= limit:
            break
    if not prompt_ids:
        raise ValueError(f"dataset {name!r} has no non-empty prompts in column {column!r}")
    return datasets.Dataset.from_dict({"prompt_id": prompt_ids, "messages": messages})


def _passed_all_tests(row: dict[str, Any]) -> bool:
    if "average_test_score" not in row:  # a copy without scores: nothing to filter on
        return True
    try:
        return float(row["average_test_score"]) == 1.0
    except (TypeError, ValueError):
        return False


def from_opencodeinstruct(dataset: datasets.Dataset, limit: int | None = None) -> datasets.Dataset:
    """Prompts of OpenCodeInstruct rows, keeping (like the paper) only rows whose reference passed all its tests."""
    return convert_rows(
        dataset, "opencodeinstruct", "input", limit=limit, keep=_passed_all_tests, keep_columns=("average_test_score",)
    )


def _first_human_turn(conversation: Any) -> Messages:
    for turn in conversation or []:
        turn = _turn(turn)
        if turn["role"] == "user":
            return [turn] if turn["content"].strip() else []
    return []


def from_openthoughts(dataset: datasets.Dataset, limit: int | None = None) -> datasets.Dataset:
    """Prompts of OpenThoughts2 rows: the first human turn of `conversations` (the rest is the reasoning answer)."""
    return convert_rows(dataset, "openthoughts2", "conversations", limit=limit, to_messages=_first_human_turn)


class PromptColumnError(ValueError):
    """No column of a data set holds prompts, or not the one asked for. The message names the Python keyword
    (`column=`); a command says how its users choose the column instead (`message`), since a keyword means nothing on
    a command line."""

    def __init__(self, problem: str, columns: list[str]) -> None:
        self.problem, self.columns = problem, list(columns)
        super().__init__(self.message("column=..."))

    def __reduce__(self) -> tuple:
        return type(self), (self.problem, self.columns)

    def message(self, choose: str | None) -> str:
        """The error's text, ending with how to name the column (`choose`: "column=...", "--prompt_column NAME"),
        or without that ending (None) where a command has no way to choose it."""
        hint = f" (or pass {choose})" if choose else ""
        return f"{self.problem}; columns found: {self.columns}; accepted prompt columns: {list(PROMPT_COLUMNS)}{hint}"


def prompt_column(dataset: datasets.Dataset, name: str, column: str | None) -> str:
    """The column holding the prompts: `column` if given, else the first of PROMPT_COLUMNS the data set has."""
    found = column if column is not None else next((c for c in PROMPT_COLUMNS if c in dataset.column_names), None)
    if found is None or found not in dataset.column_names:
        what = f"column {column!r} not found" if column is not None else "no prompt column found"
        raise PromptColumnError(f"{what} in dataset {name!r}", dataset.column_names)
    return found
