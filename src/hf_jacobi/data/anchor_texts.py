"""Human-written text for the KL anchor: what holds a Jacobi Forcing model to its base on text it did not write.

Trained on its own answers, a model grows sharper on them; the KL anchor at those answers (`base_kl_weight`) holds the
next-token distribution there, but not on other text, where the model can still drift (docs/training.md, "Anchor texts",
has the measurement). Anchor texts carry the same KL term onto human-written code, packed as rows of their own with no block and no
AR target: the model is held to the base's distribution there, never trained to fit the text (it can get no closer
to the base than 1.0x, so a held-out NLL bar stays a fair test of drift).

The shipped set, `packages-source`, is the source code of the functions behind the `packages` *train* prompts (the
same installed packages, the same walk), frozen as a parquet file because what is installed differs between machines;
tests check that it shares no word 13-gram with any evaluation set the project ships nor with the `packages` test
prompts.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import textwrap
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import datasets

from .decontamination import find_overlaps, prompt_texts
from .limits import check_limit
from .local_files import LOCAL_BUILDERS, load_local_dataset

logger = logging.getLogger(__name__)

ANCHOR_TEXT_SET = Path(__file__).parent / "prompt_sets" / "packages-source.parquet"
"""The snapshot `write_anchor_text_file` wrote from the functions of the `packages` train prompts."""
ANCHOR_TEXT_SOURCES = {"packages-source": ANCHOR_TEXT_SET}
MIN_SOURCE_CHARS = 200
"""Shorter functions are mostly a signature, a docstring and one delegating line: little code to hold."""
MAX_SOURCE_CHARS = 4000
"""Longer ones would crowd out the rest (a row is truncated to the run's max_length anyway)."""


def function_source(prompt_id: str) -> str | None:
    """The dedented source of the function a `packages` prompt was built from ("pkg/<module>.<name>"), or None when it
    cannot be read here (the package is missing, or the function has no Python source)."""
    if not prompt_id.startswith("pkg/"):
        return None
    module_name, _, name = prompt_id[len("pkg/") :].rpartition(".")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            function = getattr(importlib.import_module(module_name), name)
        return textwrap.dedent(inspect.getsource(function))
    except BaseException:  # not installed, renamed, C-implemented, or a module that exits at import
        return None


def anchor_text_rows(
    prompt_ids: Iterable[str], excluded: Mapping[str, str]
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(text_id, source) of the functions behind `prompt_ids`, in their order, and how many each filter dropped: no
    source here, too short or long, a duplicate, or sharing a word 13-gram with one of the `excluded` texts."""
    dropped = {"no source": 0, "length": 0, "duplicate": 0, "overlap": 0}
    rows: dict[str, str] = {}
    seen: set[str] = set()
    for prompt_id in prompt_ids:
        source = function_source(prompt_id)
        if source is None:
            dropped["no source"] += 1
        elif not MIN_SOURCE_CHARS <= len(source) <= MAX_SOURCE_CHARS:
            dropped["length"] += 1
        elif source in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(source)
            rows[prompt_id] = source
    leaking = {overlap.candidate for overlap in find_overlaps(rows, excluded)}
    dropped["overlap"] = len(leaking)
    return [(text_id, text) for text_id, text in rows.items() if text_id not in leaking], dropped


def evaluation_texts() -> dict[str, str]:
    """The texts anchor texts must not share with: HumanEval's prompts and canonical solutions (the bench, the demo,
    the NLL bar) and the `packages` test prompts (held-out tokens per forward)."""
    from .function_prompts import package_prompt_set
    from .humaneval import load_humaneval

    texts = {}
    for problem in load_humaneval():
        texts[problem.task_id] = problem.prompt + problem.canonical_solution
    texts.update(prompt_texts(package_prompt_set("test")))
    return texts


def write_anchor_text_file(path: str | os.PathLike[str] = ANCHOR_TEXT_SET) -> Path:
    """Snapshots the sources of the `packages` train prompts' functions (`text_id`, `text`), in the prompts' order."""
    from .function_prompts import package_prompt_set

    rows, dropped = anchor_text_rows(package_prompt_set("train")["prompt_id"], evaluation_texts())
    logger.info("%d anchor texts; dropped: %s", len(rows), dropped)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    datasets.Dataset.from_dict({"text_id": [r[0] for r in rows], "text": [r[1] for r in rows]}).to_parquet(str(tmp))
    os.replace(tmp, out)
    return out


def load_anchor_texts(source: str, limit: int | None = None) -> datasets.Dataset:
    """Anchor texts (`text_id`, `text`) from a named set (`ANCHOR_TEXT_SOURCES`) or a local .parquet / .json / .jsonl
    file with a `text` column (ids: its `text_id` column, else "<file stem>/<row>"); the first `limit` of them."""
    check_limit(limit)
    if source in ANCHOR_TEXT_SOURCES:
        dataset = datasets.Dataset.from_parquet(str(ANCHOR_TEXT_SOURCES[source]))
    else:
        path = Path(source).expanduser()
        if path.suffix not in LOCAL_BUILDERS or not path.is_file():
            raise ValueError(
                f"unknown anchor text source {source!r}: use one of {sorted(ANCHOR_TEXT_SOURCES)} or a local "
                f"{'/'.join(LOCAL_BUILDERS)} file with a 'text' column"
            )
        dataset = load_local_dataset([path], LOCAL_BUILDERS[path.suffix], source)
        if "text" not in dataset.column_names:
            raise ValueError(f"anchor text file {source} has no 'text' column (columns: {dataset.column_names})")
        if "text_id" not in dataset.column_names:
            dataset = dataset.add_column("text_id", [f"{path.stem}/{i}" for i in range(len(dataset))])
        dataset = dataset.select_columns(["text_id", "text"])
    if len(dataset) == 0:
        raise ValueError(f"anchor text source {source!r} holds no text")
    return dataset.select(range(min(limit, len(dataset)))) if limit is not None else dataset


def encode_anchor_texts(dataset: datasets.Dataset, tokenizer: Any, max_length: int | None) -> datasets.Dataset:
    """`text_id` and `input_ids`: each text as the model reads raw text (the tokenizer's special tokens, no chat
    template, as HumanEval's canonical solutions are scored), cut to `max_length` tokens. A cut text is still
    human-written text, unlike a cut prompt, so nothing is dropped but texts of fewer than 2 tokens (no prediction)."""
    ids = [tokenizer(text)["input_ids"][:max_length] for text in dataset["text"]]
    kept = [i for i, row in enumerate(ids) if len(row) >= 2]
    if not kept:
        raise ValueError("no anchor text holds 2 tokens or more: nothing to anchor")
    return datasets.Dataset.from_dict(
        {"text_id": [dataset["text_id"][i] for i in kept], "input_ids": [ids[i] for i in kept]}
    )
