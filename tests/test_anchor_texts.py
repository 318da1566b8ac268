"""Anchor texts: the shipped `packages-source` set (counts, provenance, disjointness from every evaluation set), the
walk that builds it, loading by name or file, and encoding as raw text."""

from __future__ import annotations

import json
import re

import datasets
import pytest

from hf_jacobi.data.anchor_texts import ANCHOR_TEXT_SET, encode_anchor_texts, load_anchor_texts
from hf_jacobi.data.decontamination import find_overlaps
from hf_jacobi.data.function_prompts import package_prompt_set
from lab.prompt_snapshots import (
    MAX_SOURCE_CHARS,
    MIN_SOURCE_CHARS,
    anchor_text_rows,
    evaluation_texts,
    function_source,
)
from test_prompt_sources import evaluation_texts as shipped_evaluation_texts
from tiny_models import tiny_tokenizer

CARD = ANCHOR_TEXT_SET.with_suffix(".md")


@pytest.fixture(scope="module")
def shipped() -> datasets.Dataset:
    return load_anchor_texts("packages-source")


def test_the_shipped_set_holds_distinct_sources_of_train_prompt_functions_only(shipped):
    assert len(shipped) >= 3000
    assert len(set(shipped["text"])) == len(shipped) == len(set(shipped["text_id"]))
    train_ids = set(package_prompt_set("train")["prompt_id"])
    assert set(shipped["text_id"]) <= train_ids  # never a held-out (`test`) prompt's function
    assert all(MIN_SOURCE_CHARS <= len(text) <= MAX_SOURCE_CHARS for text in shipped["text"])
    name = shipped["text_id"][0].rsplit(".", 1)[-1]
    assert re.search(rf"\bdef {name}\(", shipped["text"][0])  # the function's own source, decorators aside


def test_the_shipped_set_shares_no_13_gram_with_any_evaluation_text(shipped):
    references = evaluation_texts()  # HumanEval prompts + canonical solutions, the `packages` test prompts
    assert sum(task.startswith("HumanEval/") for task in references) == 164
    references.update({f"shipped/{key}": text for key, text in shipped_evaluation_texts().items()})  # + GSM8K, MATH
    overlaps = find_overlaps(dict(zip(shipped["text_id"], shipped["text"], strict=True)), references)
    assert not overlaps, overlaps[:3]


def test_the_data_card_counts_match_the_shipped_file(shipped):
    card = CARD.read_text()
    assert f"{len(shipped):,} texts" in card
    assert f"{sum(len(t) for t in shipped['text']):,} characters" in card


def test_the_walk_reads_sources_filters_them_and_drops_what_overlaps_an_evaluation_text():
    source = function_source("pkg/textwrap.dedent")
    assert source is not None and source.startswith("def dedent(text):")
    assert function_source("pkg/textwrap.no_such_function") is None
    assert function_source("pkg/no_such_package_xyz.f") is None
    assert function_source("stdlib/textwrap.dedent") is None  # not a `packages` prompt id
    ids = ["pkg/textwrap.dedent", "pkg/textwrap.indent", "pkg/textwrap.dedent", "pkg/missing_pkg.f", "pkg/os.getcwd"]
    leak = {"leak": "\n".join(source.splitlines()[4:12])}  # a passage of dedent's docstring and body
    rows, dropped = anchor_text_rows(ids, leak)
    assert [text_id for text_id, _ in rows] == ["pkg/textwrap.indent"]
    # os.getcwd is C code (no source); the second dedent is a duplicate; dedent then overlaps the planted text
    assert dropped == {"no source": 2, "length": 0, "duplicate": 1, "overlap": 1}
    rows, dropped = anchor_text_rows(["pkg/textwrap.indent", "pkg/shlex.join"], {})
    assert [text_id for text_id, _ in rows] == ["pkg/textwrap.indent"] and dropped["length"] == 1  # 144 characters


def test_anchor_texts_load_from_a_file_and_bad_sources_are_named(tmp_path, shipped):
    assert load_anchor_texts("packages-source", limit=3)["text_id"] == shipped["text_id"][:3]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(json.dumps({"text": t, "lang": "py"}) for t in ["def f():\n    return 1", "x = 2"]))
    loaded = load_anchor_texts(str(path))
    assert loaded.column_names == ["text_id", "text"] and loaded["text_id"] == ["code/0", "code/1"]
    with pytest.raises(ValueError, match=r"unknown anchor text source 'nope': use one of \['packages-source'\]"):
        load_anchor_texts("nope")
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"content": "x"}))
    with pytest.raises(ValueError, match=r"has no 'text' column \(columns: \['content'\]\)"):
        load_anchor_texts(str(wrong))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"text": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.jsonl', line 1: not UTF-8 text"):  # the shared local-file reader
        load_anchor_texts(str(latin))
    with pytest.raises(ValueError, match=r"limit"):
        load_anchor_texts("packages-source", limit=0)


def test_texts_are_encoded_raw_and_cut_to_max_length():
    tokenizer = tiny_tokenizer()
    texts = datasets.Dataset.from_dict({"text_id": ["a", "b", "c"], "text": ["t5 t6 t7 t8 t9", "t5", "t7 t8"]})
    encoded = encode_anchor_texts(texts, tokenizer, max_length=3)
    whole = tokenizer("t5 t6 t7 t8 t9")["input_ids"]
    assert len(whole) > 3
    one = len(tokenizer("t5")["input_ids"])
    kept = ["a", "c"] if one < 2 else ["a", "b", "c"]
    assert encoded["text_id"] == kept and encoded["input_ids"][0] == whole[:3]  # no chat template, cut, never dropped
    with pytest.raises(ValueError, match="no anchor text holds 2 tokens or more"):
        encode_anchor_texts(texts.select([1]), tokenizer, max_length=1)
