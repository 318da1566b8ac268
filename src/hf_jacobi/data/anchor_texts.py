"""Human-written text for the KL anchor: what holds a Jacobi Forcing model to its base on text it did not write.

Trained on its own answers, a model grows sharper on them; the KL anchor at those answers (`base_kl_weight`) holds the
next-token distribution there, but not on other text, where the model can still drift (docs/training.md, "Anchor texts",
has the measurement). Anchor texts carry the same KL term onto human-written code, packed as rows of their own with no block and no
AR target: the model is held to the base's distribution there, never trained to fit the text (it can get no closer
to the base than 1.0x, so a held-out NLL bar stays a fair test of drift).

The shipped set, `packages-source`, is the source code of the functions behind the `packages` *train* prompts (the
same installed packages, the same walk, in the project's `lab/prompt_snapshots.py`), frozen as a parquet file because
what is installed differs between machines;
tests check that it shares no word 13-gram with any evaluation set the project ships nor with the `packages` test
prompts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import datasets

from .limits import check_limit
from .local_files import LOCAL_BUILDERS, load_local_dataset

logger = logging.getLogger(__name__)

ANCHOR_TEXT_SET = Path(__file__).parent / "prompt_sets" / "packages-source.parquet"
"""The snapshot of the functions behind the `packages` train prompts (built by the project's `lab/prompt_snapshots.py`)."""
ANCHOR_TEXT_SOURCES = {"packages-source": ANCHOR_TEXT_SET}


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
