"""Training prompts for Jacobi Forcing trajectory collection, as one `prompt_id` / `messages` table.

Trajectories are collected by letting the model itself answer prompts, so only the prompt side of a data set is
kept. This module holds the registry of named sources (the offline sets, the paper's hub data sets, the evaluation
sets) and `load_prompts`, which also takes local files and other hub data sets; `prompt_rows` reduces any of them to
the same two columns, with chat answers cut off. Each named source declares its splits and a split it does not have is
refused (`resolve_split`): read as the whole set instead, training prompts would pass for held-out ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from .chat import encode_chat
from .function_prompts import SNAPSHOT_SPLITS, package_prompt_set, prompt_dataset, snapshot_split, stdlib_prompts
from .humaneval import chat_prompt, load_humaneval
from .limits import check_limit, check_split
from .local_files import LOCAL_BUILDERS, is_local_source, load_hub_dataset, load_local_source
from .prompt_rows import convert_rows, from_opencodeinstruct, from_openthoughts, prompt_column
from .quality_sets import TEST_SPLIT, WHOLE_SET_HELD_OUT, code_task_prompts, request_prompts

logger = logging.getLogger(__name__)

PAPER_SOURCES = {"opencodeinstruct": "nvidia/OpenCodeInstruct", "openthoughts2": "open-thoughts/OpenThoughts2-1M"}


@dataclass(frozen=True)
class PromptSource:
    """A named prompt source: `load(split, limit, seed)` returns `prompt_id` / `messages` rows."""

    name: str
    description: str
    load: Callable[[str, int | None, int], datasets.Dataset]
    evaluation_only: bool = False
    """An evaluation set: measuring on it is fine, collecting training trajectories from it is refused."""
    splits: tuple[str, ...] | None = None
    """The splits it has, its default first; None: not checked here (a Hub set, whose loader refuses a split it lacks).
    A split it lacks is refused, not read as the whole set: training prompts must not pass for held-out ones."""
    split_note: str = ""
    """Why it has only these splits, for the error that refuses another."""


PROMPT_SOURCES: dict[str, PromptSource] = {}
"""The named sources `load_prompts` (and `hf-jacobi collect --prompts NAME`) accepts; add one with
`register_prompt_source`."""

DEFAULT_SPLIT = "train"
"""The split of a source that declares none: a Hub data set's usual training split, a local file's one split."""
LOCAL_SPLITS = (DEFAULT_SPLIT,)
"""A local file or folder is one split, read whole."""


def register_prompt_source(
    name: str,
    load: Callable[[str, int | None, int], datasets.Dataset],
    description: str,
    *,
    evaluation_only: bool = False,
    splits: tuple[str, ...] | None = None,
    split_note: str = "",
) -> None:
    """Makes `load_prompts(name, split=, limit=, seed=)` call `load(split, limit, seed)`, with `split` one of `splits`
    (checked before `load` runs; the first is the default) or, when `splits` is None, whatever the caller names."""
    if not name or "/" in name or Path(name).suffix:
        raise ValueError(f"a prompt source name must be a plain word (no '/', no file suffix), got {name!r}")
    if splits is not None and (isinstance(splits, str) or not splits or not all(isinstance(s, str) for s in splits)):
        raise ValueError(f"splits must be a non-empty tuple of split names or None, got {splits!r}")
    PROMPT_SOURCES[name] = PromptSource(
        name, description, load, evaluation_only, None if splits is None else tuple(splits), split_note
    )


def resolve_split(source: str, split: str | None = None, *, prefer: str | None = None) -> str:
    """The split `load_prompts(source, split=split)` reads, so that what a run records is the split it used.

    `split=None` means `prefer` if the source has it (a source whose splits are not checked, such as a Hub data set,
    is taken to have it), else the source's default: a named source's first split, "train" for a local file (its one
    split) or a Hub data set. A split the source does not have raises ValueError naming the accepted ones.
    """
    named = PROMPT_SOURCES.get(source)
    if named is not None:
        splits, what, note = named.splits, f"the {source} prompt set", named.split_note
    elif is_local_source(source):
        splits, what, note = LOCAL_SPLITS, f"the local prompt source {source!r}", "a file or folder is read whole"
    else:
        splits, what, note = None, "", ""
    if split is None and prefer is not None and (splits is None or prefer in splits):
        split = prefer
    elif split is None:
        split = splits[0] if splits else DEFAULT_SPLIT
    if splits is not None:
        check_split(what, split, splits, note)
    return split


def held_out_split(source: str, split: str = "test") -> str | None:
    """The split to read `source`'s held-out prompts from: `split` (refused by a source without it, such as stdlib,
    whose prompts are all for training), but None for a local file asked for `test`: a file is one split, held out by
    whoever made it (a campaign's judge file, a user's own evaluation prompts)."""
    return None if split == "test" and source not in PROMPT_SOURCES and is_local_source(source) else split


def _humaneval_prompts(split: str, limit: int | None, seed: int) -> datasets.Dataset:
    problems = load_humaneval(limit)
    return prompt_dataset([(problem.task_id, chat_prompt(problem)) for problem in problems])


def _package_prompt_set(split: str, limit: int | None, seed: int) -> datasets.Dataset:
    return package_prompt_set(split, limit)


register_prompt_source(
    "stdlib",
    lambda split, limit, seed: stdlib_prompts(limit, seed),
    "~340 prompts from stdlib functions; split train only (offline)",
    splits=("train",),
    split_note="one pool of training prompts, nothing held out: for held-out prompts use packages or magpie, split "
    "'test'",
)
register_prompt_source(
    "packages",
    _package_prompt_set,
    "3,656 prompts from documented functions of installed packages, shipped snapshot; splits train / test (offline)",
    splits=SNAPSHOT_SPLITS,
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
    splits=SNAPSHOT_SPLITS,
)
register_prompt_source(
    "humaneval",
    _humaneval_prompts,
    "HumanEval's 164 problems as chat turns (as `hf-jacobi bench --chat` asks them); split test only; evaluation only",
    evaluation_only=True,
    splits=(TEST_SPLIT,),
    split_note=WHOLE_SET_HELD_OUT,
)
register_prompt_source(
    "requests",
    lambda split, limit, seed: request_prompts(split, limit),
    "48 hand-written chat requests in 8 categories (explain, code, summarize, howto, translate, write, compare, "
    "advice), for answer quality; split test only; evaluation only",
    evaluation_only=True,
    splits=(TEST_SPLIT,),
    split_note=WHOLE_SET_HELD_OUT,
)
register_prompt_source(
    "code-tasks",
    lambda split, limit, seed: code_task_prompts(split, limit),
    "32 hand-written code requests with tests (hf_jacobi.data.quality_sets.load_code_tasks), for pass@1 of chat "
    "answers; split test only; evaluation only",
    evaluation_only=True,
    splits=(TEST_SPLIT,),
    split_note=WHOLE_SET_HELD_OUT,
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
    source: str, *, split: str | None = None, limit: int | None = None, column: str | None = None, seed: int = 0
) -> datasets.Dataset:
    """Prompts (`prompt_id`, `messages` with no assistant answer) from a named source, a local file, or the hub.

    `source` is a name of `PROMPT_SOURCES` ("stdlib", "packages", "opencodeinstruct", "openthoughts2", or one you
    registered), a .json/.jsonl/.parquet file or a directory of them, or any other hub data set id. For local files
    and other hub sets the prompt column is `column`, else the first of `prompt_rows.PROMPT_COLUMNS` present (a
    `PromptColumnError` if none); prompt ids come from an `id`/`prompt_id` column, else "<file stem or source>/<row
    index>". `split=None` reads the source's default split (`resolve_split`); a split the source does not have
    raises, as does any but "train" for a local file, which is one split. `limit` keeps the first `limit` prompts
    after conversion.
    """
    check_limit(limit)
    if source not in PROMPT_SOURCES and not is_local_source(source) and "/" not in source:
        raise ValueError(
            f"unknown prompt source {source!r}; named sources: {sorted(PROMPT_SOURCES)}, or a local "
            f"{'/'.join(LOCAL_BUILDERS)} file, or a Hub dataset id such as 'namespace/name'"
        )
    split = resolve_split(source, split)
    if source in PROMPT_SOURCES:
        return PROMPT_SOURCES[source].load(split, limit, seed)
    if is_local_source(source):
        dataset, name = load_local_source(source), Path(source).expanduser().stem
    else:
        dataset, name = load_hub_dataset(source, split), source
    if len(dataset) == 0:
        raise ValueError(f"dataset {source!r} is empty")
    return convert_rows(dataset, name, prompt_column(dataset, source, column), limit=limit)


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
