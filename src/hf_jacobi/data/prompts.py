"""Training prompts for Jacobi Forcing trajectory collection, as one `prompt_id` / `messages` table.

Trajectories are collected by letting the model itself answer prompts, so only the prompt side of a data set is
kept: every source (the offline stdlib set, the paper's hub data sets, local files, other hub data sets) is
reduced to the same two columns, with chat answers cut off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from ..chat import encode_chat
from .function_prompts import package_prompt_set, rows_dataset, snapshot_split, stdlib_prompts
from .humaneval import chat_prompt, load_humaneval
from .limits import check_limit
from .local_files import LOCAL_BUILDERS, load_local_dataset
from .quality_sets import code_task_prompts, request_prompts

logger = logging.getLogger(__name__)

PAPER_SOURCES = {"opencodeinstruct": "nvidia/OpenCodeInstruct", "openthoughts2": "open-thoughts/OpenThoughts2-1M"}
PROMPT_COLUMNS = ("messages", "conversations", "prompt", "input", "instruction", "question")
ID_COLUMNS = ("prompt_id", "id")
# Suffixes that mark a source as a file even when it does not exist, so a typo is reported instead of a hub lookup.
DATA_SUFFIXES = (*LOCAL_BUILDERS, ".csv", ".tsv", ".txt", ".arrow", ".gz", ".zip")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant"}

Messages = list[dict[str, str]]


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


def _convert(
    dataset: datasets.Dataset,
    name: str,
    column: str,
    *,
    limit: int | None,
    to_messages: Callable[[Any], Messages] = _as_messages,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    keep_columns: tuple[str, ...] = (),
) -> datasets.Dataset:
    """Shared conversion: ids, dropping empty prompts, duplicate checks, and stopping at `limit` kept rows."""
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
    return _convert(
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
    return _convert(dataset, "openthoughts2", "conversations", limit=limit, to_messages=_first_human_turn)


def _prompt_column(dataset: datasets.Dataset, name: str, column: str | None) -> str:
    found = column if column is not None else next((c for c in PROMPT_COLUMNS if c in dataset.column_names), None)
    if found is None or found not in dataset.column_names:
        what = f"column {column!r} not found" if column is not None else "no prompt column found"
        raise ValueError(
            f"{what} in dataset {name!r}; columns found: {dataset.column_names}; "
            f"accepted prompt columns: {list(PROMPT_COLUMNS)} (or pass column=...)"
        )
    return found


def _is_local(source: str) -> bool:
    """Whether `source` means a file or folder here rather than a hub repo id ("name" or "namespace/name")."""
    path = Path(source).expanduser()
    return path.exists() or source.startswith(("/", ".", "~")) or source.count("/") > 1 or path.suffix in DATA_SUFFIXES


def _load_local(source: str) -> datasets.Dataset:
    path = Path(source).expanduser()
    accepted = f"a {'/'.join(LOCAL_BUILDERS)} file or a directory of them"
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in LOCAL_BUILDERS)
        if not files:
            raise ValueError(f"directory {source!r} holds no {'/'.join(LOCAL_BUILDERS)} files")
    elif path.suffix not in LOCAL_BUILDERS:
        raise ValueError(f"unsupported file extension {path.suffix!r} of {source!r}; accepted: {accepted}")
    elif not path.is_file():
        raise ValueError(f"local path {source!r} does not exist; expected {accepted}")
    else:
        files = [path]
    builders = {LOCAL_BUILDERS[p.suffix] for p in files}
    if len(builders) > 1:
        raise ValueError(f"directory {source!r} mixes json and parquet files; keep one kind per directory")
    return load_local_dataset(files, builders.pop(), source)


@dataclass(frozen=True)
class PromptSource:
    """A named prompt source: `load(split, limit, seed)` returns `prompt_id` / `messages` rows."""

    name: str
    description: str
    load: Callable[[str, int | None, int], datasets.Dataset]
    evaluation_only: bool = False
    """An evaluation set: measuring on it is fine, collecting training trajectories from it is refused."""


PROMPT_SOURCES: dict[str, PromptSource] = {}
"""The named sources `load_prompts` (and `hf-jacobi collect --prompts NAME`) accepts; add one with
`register_prompt_source`."""


def register_prompt_source(
    name: str,
    load: Callable[[str, int | None, int], datasets.Dataset],
    description: str,
    *,
    evaluation_only: bool = False,
) -> None:
    """Makes `load_prompts(name, split=, limit=, seed=)` call `load(split, limit, seed)`."""
    if not name or "/" in name or Path(name).suffix:
        raise ValueError(f"a prompt source name must be a plain word (no '/', no file suffix), got {name!r}")
    PROMPT_SOURCES[name] = PromptSource(name, description, load, evaluation_only)


def _humaneval_prompts(split: str, limit: int | None, seed: int) -> datasets.Dataset:
    problems = load_humaneval(limit)
    return rows_dataset([(problem.task_id, chat_prompt(problem)) for problem in problems])


def _package_prompt_set(split: str, limit: int | None, seed: int) -> datasets.Dataset:
    return package_prompt_set(split, limit)


register_prompt_source(
    "stdlib", lambda split, limit, seed: stdlib_prompts(limit, seed), "~340 prompts from stdlib functions (offline)"
)
register_prompt_source(
    "packages",
    _package_prompt_set,
    "3,656 prompts from documented functions of installed packages, shipped snapshot; splits train / test (offline)",
)
MAGPIE_SET = Path(__file__).parent / "prompt_sets" / "magpie-smollm2.parquet"
MAGPIE_HELD_OUT = 32
"""The first rows of the shipped Magpie set form its `test` split; the rest is `train`."""


def _magpie_prompt_set(split: str, limit: int | None, seed: int) -> datasets.Dataset:
    return snapshot_split(MAGPIE_SET, "magpie", split, limit, MAGPIE_HELD_OUT)


register_prompt_source(
    "magpie",
    _magpie_prompt_set,
    "plain-language instructions SmolLM2-135M-Instruct wrote itself (hf-jacobi magpie, seed 0), shipped snapshot; "
    "splits train / test (offline)",
)
register_prompt_source(
    "humaneval",
    _humaneval_prompts,
    "HumanEval's 164 problems as chat turns (as `hf-jacobi bench --chat` asks them); evaluation only",
    evaluation_only=True,
)
register_prompt_source(
    "requests",
    lambda split, limit, seed: request_prompts(split, limit),
    "48 hand-written chat requests in 8 categories (explain, code, summarize, howto, translate, write, compare, "
    "advice), for answer quality; split test only; evaluation only",
    evaluation_only=True,
)
register_prompt_source(
    "code-tasks",
    lambda split, limit, seed: code_task_prompts(split, limit),
    "32 hand-written code requests with tests (hf_jacobi.data.quality_sets.load_code_tasks), for pass@1 of chat "
    "answers; split test only; evaluation only",
    evaluation_only=True,
)
register_prompt_source(
    "opencodeinstruct",
    lambda split, limit, seed: from_opencodeinstruct(
        datasets.load_dataset(PAPER_SOURCES["opencodeinstruct"], split=split), limit
    ),
    "nvidia/OpenCodeInstruct rows whose tests pass (the paper's code data; needs the Hub)",
)
register_prompt_source(
    "openthoughts2",
    lambda split, limit, seed: from_openthoughts(
        datasets.load_dataset(PAPER_SOURCES["openthoughts2"], split=split), limit
    ),
    "open-thoughts/OpenThoughts2-1M first human turns (the paper's math data; needs the Hub)",
)


def load_prompts(
    source: str, *, split: str = "train", limit: int | None = None, column: str | None = None, seed: int = 0
) -> datasets.Dataset:
    """Prompts (`prompt_id`, `messages` with no assistant answer) from a named source, a local file, or the hub.

    `source` is a name of `PROMPT_SOURCES` ("stdlib", "packages", "opencodeinstruct", "openthoughts2", or one you
    registered), a .json/.jsonl/.parquet file or a directory of them, or any other hub data set id. For local files
    and other hub sets the prompt column is `column`, else the first of PROMPT_COLUMNS present; prompt ids come from an
    `id`/`prompt_id` column, else "<file stem or source>/<row index>". `split` applies to named sources that have
    splits and to hub data sets; `limit` keeps the first `limit` prompts after conversion.
    """
    check_limit(limit)
    if source in PROMPT_SOURCES:
        return PROMPT_SOURCES[source].load(split, limit, seed)
    if _is_local(source):
        dataset, name = _load_local(source), Path(source).expanduser().stem
    elif "/" not in source:
        raise ValueError(
            f"unknown prompt source {source!r}; named sources: {sorted(PROMPT_SOURCES)}, or a local "
            f"{'/'.join(LOCAL_BUILDERS)} file, or a Hub dataset id such as 'namespace/name'"
        )
    else:
        dataset, name = datasets.load_dataset(source, split=split), source
    if len(dataset) == 0:
        raise ValueError(f"dataset {source!r} is empty")
    return _convert(dataset, name, _prompt_column(dataset, source, column), limit=limit)


def encode_prompts(
    dataset: datasets.Dataset, tokenizer: Any, *, chat: bool = True, max_prompt_tokens: int | None = None
) -> list[list[int]]:
    """Token ids of each prompt, as the model will see them when it generates its own answer.

    chat=True renders the chat template with the generation prompt (what an instruct model expects); chat=False
    encodes the user turns joined by blank lines, for base models. A prompt over `max_prompt_tokens` raises instead
    of being truncated or dropped: a cut prompt asks a different question, and silent drops skew the data.
    """
    if max_prompt_tokens is not None and max_prompt_tokens <= 0:
        raise ValueError(f"max_prompt_tokens must be an integer >= 1 or None, got {max_prompt_tokens!r}")
    encoded: list[list[int]] = []
    for prompt_id, messages in zip(dataset["prompt_id"], dataset["messages"], strict=True):
        ids = encode_chat(tokenizer, messages, chat=chat)
        if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
            raise ValueError(
                f"prompt {prompt_id!r} is {len(ids)} tokens, over max_prompt_tokens={max_prompt_tokens}; "
                "raise the limit or filter the prompts"
            )
        encoded.append(ids)
    return encoded
