"""Named prompt sources: the registry, the shipped `packages` set, and its disjointness from every evaluation set."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from hf_jacobi.data.decontamination import find_overlaps, prompt_texts, word_ngrams
from hf_jacobi.data.function_prompts import HELD_OUT, INSTRUCTION_LINE, package_prompt_set
from hf_jacobi.data.humaneval import load_humaneval
from hf_jacobi.data.prompts import PROMPT_SOURCES, load_prompts, register_prompt_source

DATA = Path(__file__).parent / "data"
CARD = Path(__file__).parents[1] / "src" / "hf_jacobi" / "data" / "prompt_sets" / "packages.md"


@pytest.fixture(scope="module")
def packages_all() -> datasets.Dataset:
    return package_prompt_set("all")


def evaluation_texts() -> dict[str, str]:
    """Every evaluation text the project ships: HumanEval prompts and the GSM8K / MATH samples."""
    texts = {problem.task_id: problem.prompt for problem in load_humaneval()}
    for name, column in (("gsm8k_sample.jsonl", "question"), ("math_sample.jsonl", "problem")):
        for index, line in enumerate((DATA / name).read_text().splitlines()):
            texts[f"{name}/{index}"] = json.loads(line)[column]
    return texts


def test_registry_names_and_unknown_names():
    assert {"stdlib", "packages", "opencodeinstruct", "openthoughts2"} <= set(PROMPT_SOURCES)
    with pytest.raises(ValueError, match=r"unknown prompt source 'nope'.*'packages'"):
        load_prompts("nope")


def test_a_registered_source_is_loaded_by_name(monkeypatch):
    monkeypatch.setattr("hf_jacobi.data.prompts.PROMPT_SOURCES", dict(PROMPT_SOURCES))
    rows = datasets.Dataset.from_dict({"prompt_id": ["a", "b"], "messages": [[{"role": "user", "content": "x"}]] * 2})
    register_prompt_source("mine", lambda split, limit, seed: rows.select(range(limit or 2)), "a test source")
    assert load_prompts("mine", limit=1)["prompt_id"] == ["a"]
    with pytest.raises(ValueError, match="plain word"):
        register_prompt_source("a/b", lambda *a: rows, "bad")


def test_packages_set_is_large_distinct_and_split(packages_all):
    train, test = load_prompts("packages"), load_prompts("packages", split="test")
    assert len(train) >= 2000 and len(train) == len(packages_all) - HELD_OUT and 100 <= len(test) <= HELD_OUT
    assert len(set(packages_all["prompt_id"])) == len(packages_all)
    texts = [m[0]["content"] for m in packages_all["messages"]]
    assert len(set(texts)) == len(texts)
    assert not set(train["prompt_id"]) & set(test["prompt_id"])
    assert load_prompts("packages", limit=3)["prompt_id"] == train["prompt_id"][:3]
    with pytest.raises(ValueError, match=r"splits \['all', 'test', 'train'\], got split='validation'"):
        load_prompts("packages", split="validation")


def test_the_data_card_counts_match_the_shipped_file(packages_all):
    card = CARD.read_text()
    assert f"{len(packages_all):,}" in card
    test = load_prompts("packages", split="test")
    assert f"| train | {len(packages_all) - HELD_OUT:,} |" in card and f"| test | {len(test)} |" in card


def test_training_prompts_share_no_13_gram_with_any_evaluation_set(packages_all):
    overlaps = find_overlaps(prompt_texts(packages_all), evaluation_texts())
    assert not overlaps, overlaps[:5]


def test_held_out_prompts_share_no_13_gram_with_training_prompts():
    train, test = prompt_texts(load_prompts("packages")), prompt_texts(load_prompts("packages", split="test"))
    assert not find_overlaps(_without(test, INSTRUCTION_LINE), _without(train, INSTRUCTION_LINE))
    # the shared instruction line alone is no leak, but real shared passages are: the unfiltered rows have some
    held_out_rows = prompt_texts(package_prompt_set("all").select(range(HELD_OUT)))
    assert find_overlaps(_without(held_out_rows, INSTRUCTION_LINE), _without(train, INSTRUCTION_LINE))


def _without(texts: dict[str, str], line: str) -> dict[str, str]:
    return {k: v.replace(line, "") for k, v in texts.items()}


def test_the_overlap_check_catches_a_planted_leak():
    problem = load_humaneval(1)[0]
    leaked = {"leak": "Implement this.\n" + problem.prompt, "clean": "Write a function that reverses a string."}
    overlaps = find_overlaps(leaked, evaluation_texts())
    assert [o.candidate for o in overlaps] == ["leak"] and overlaps[0].reference == problem.task_id
    assert word_ngrams("too short to count") == set()


def test_the_shipped_magpie_set_is_distinct_split_and_disjoint_from_evaluation_sets():
    everything, train, test = (load_prompts("magpie", split=split) for split in ("all", "train", "test"))
    assert len(everything) == 256 and len(test) == 32 and len(train) == 224
    assert not set(train["prompt_id"]) & set(test["prompt_id"])
    texts = [m[0]["content"] for m in everything["messages"]]
    assert len({" ".join(t.lower().split()) for t in texts}) == len(texts)
    assert all(
        len(m) == 1 and m[0]["role"] == "user" and len(m[0]["content"].split()) >= 4 for m in everything["messages"]
    )
    assert not find_overlaps(prompt_texts(everything), evaluation_texts())
    card = (CARD.parent / "magpie.md").read_text()
    assert f"| test | {len(test)} |" in card and f"| train | {len(train)} |" in card
    with pytest.raises(ValueError, match=r"magpie prompt set has splits"):
        load_prompts("magpie", split="validation")
