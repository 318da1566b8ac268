"""Named prompt sources: the registry, the shipped `packages` set, and its disjointness from every evaluation set."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from hf_jacobi.data.decontamination import find_overlaps, prompt_texts, word_ngrams
from hf_jacobi.data.function_prompts import FUNCTION_PROMPT_INSTRUCTION, HELD_OUT, package_prompt_set
from hf_jacobi.data.humaneval import load_humaneval
from hf_jacobi.data.prompt_rows import PROMPT_COLUMNS
from hf_jacobi.data.prompts import PROMPT_SOURCES, load_prompts, register_prompt_source, resolve_split

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
    assert not find_overlaps(_without(test, FUNCTION_PROMPT_INSTRUCTION), _without(train, FUNCTION_PROMPT_INSTRUCTION))
    # the shared instruction line alone is no leak, but real shared passages are: the unfiltered rows have some
    held_out_rows = prompt_texts(package_prompt_set("all").select(range(HELD_OUT)))
    assert find_overlaps(
        _without(held_out_rows, FUNCTION_PROMPT_INSTRUCTION), _without(train, FUNCTION_PROMPT_INSTRUCTION)
    )


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


# --- splits: a split a source does not have is refused, never read as the whole set ------------------------------


def test_every_named_source_declares_its_splits_default_first():
    declared = {name: source.splits for name, source in PROMPT_SOURCES.items()}
    assert declared["stdlib"] == ("train",) and declared["humaneval"] == ("test",)
    assert declared["packages"] == declared["magpie"] == ("train", "test", "all")
    assert declared["requests"] == declared["code-tasks"] == ("test",)
    assert declared["opencodeinstruct"] is declared["openthoughts2"] is None  # the Hub refuses a split it lacks
    assert [resolve_split(name) for name in ("stdlib", "packages", "humaneval", "requests")] == [
        "train",
        "train",
        "test",
        "test",
    ]
    assert resolve_split("opencodeinstruct") == resolve_split("someone/chats") == "train"


def test_stdlib_has_no_held_out_split_and_says_where_to_find_one():
    """The bug: `--prompts stdlib --prompt_split test` read the whole stdlib set, the same prompts as train."""
    with pytest.raises(ValueError) as refused:
        load_prompts("stdlib", split="test", limit=2)
    message = str(refused.value)
    assert "the stdlib prompt set has one split, 'train'" in message and "got split='test'" in message
    assert "nothing held out" in message and "packages or magpie" in message
    assert load_prompts("stdlib", limit=2)["prompt_id"] == load_prompts("stdlib", split="train", limit=2)["prompt_id"]


def test_humaneval_reads_its_test_split_by_default_and_refuses_another():
    assert len(load_prompts("humaneval", limit=3)) == 3 and resolve_split("humaneval") == "test"
    for split in ("train", "all"):
        with pytest.raises(ValueError, match=rf"the humaneval prompt set has one split, 'test' .*got split='{split}'"):
            load_prompts("humaneval", split=split, limit=1)


def test_a_source_registered_with_splits_gets_its_default_and_never_a_split_it_lacks(monkeypatch):
    monkeypatch.setattr("hf_jacobi.data.prompts.PROMPT_SOURCES", dict(PROMPT_SOURCES))
    asked = []
    rows = datasets.Dataset.from_dict({"prompt_id": ["a"], "messages": [[{"role": "user", "content": "x"}]]})
    register_prompt_source(
        "mine", lambda split, limit, seed: asked.append(split) or rows, "mine", splits=("dev", "eval")
    )
    load_prompts("mine")
    load_prompts("mine", split="eval")
    with pytest.raises(ValueError, match=r"the mine prompt set has splits \['dev', 'eval'\], got split='test'"):
        load_prompts("mine", split="test")
    assert asked == ["dev", "eval"]  # the refused split never reached the loader
    for bad in ((), "dev", ("dev", 1)):
        with pytest.raises(ValueError, match="splits must be a non-empty tuple"):
            register_prompt_source("other", lambda *a: rows, "bad", splits=bad)


def test_a_preferred_split_is_taken_only_where_the_source_has_it(tmp_path):
    """What `bench --task prompts` and `demo` use: their usual `test`, else the source's own split."""
    local = tmp_path / "mine.jsonl"
    local.write_text('{"prompt": "a"}\n')
    preferred = {name: resolve_split(name, prefer="test") for name in ("packages", "stdlib", "org/set", str(local))}
    assert preferred == {"packages": "test", "stdlib": "train", "org/set": "test", str(local): "train"}
    assert resolve_split("packages", "all", prefer="test") == "all"  # a split named outright wins
    with pytest.raises(ValueError, match="got split='test'"):
        resolve_split("stdlib", "test", prefer="train")


def test_recipes_name_splits_their_sources_have():
    """Every recipe's prompt source with its split (the step's default where the recipe gives none) is accepted."""
    import yaml

    recipes = sorted((Path(__file__).parents[1] / "recipes").rglob("*.yaml"))
    checked = 0
    for path in recipes:
        recipe = yaml.safe_load(path.read_text()) or {}
        if not isinstance(recipe, dict):
            continue
        trajectory = recipe.get("trajectory_prompts") or []
        pairs = [
            (recipe.get("prompts"), recipe.get("prompt_split")),
            (recipe.get("heldout_prompts"), recipe.get("heldout_split", "test")),
            *(
                (name, recipe.get("trajectory_prompt_split", "train"))
                for name in ([trajectory] if isinstance(trajectory, str) else trajectory)
            ),
        ]
        for source, split in pairs:
            if source is not None:
                resolve_split(source, split)
                checked += 1
    assert checked >= 20


def test_the_recipe_steps_default_to_the_sources_own_split():
    """`hf-jacobi evaluate --prompts humaneval` needs no --prompt_split, and records the split it read."""
    from hf_jacobi.cli.recipe_args import PromptArguments

    humaneval = PromptArguments(prompts="humaneval", num_prompts=2)
    assert len(humaneval.load()) == 2 and humaneval.resolved_split() == "test"
    assert PromptArguments(prompts="stdlib").resolved_split() == "train"
    assert PromptArguments(prompts="packages", prompt_split="test").resolved_split() == "test"
    with pytest.raises(ValueError, match="the stdlib prompt set has one split, 'train'"):
        PromptArguments(prompts="stdlib", prompt_split="test", num_prompts=1).load()


def test_the_bench_prompts_task_reads_test_where_the_source_has_it(tmp_path):
    from hf_jacobi.bench.tasks import load_task

    assert load_task("prompts", limit=1).name == "prompts:packages/test"
    assert load_task("prompts", data="requests", limit=1).name == "prompts:requests/test"
    assert load_task("prompts", data="stdlib", limit=1).name == "prompts:stdlib/train"  # it has no test split
    local = tmp_path / "mine.jsonl"
    local.write_text('{"prompt": "a"}\n')
    assert load_task("prompts", data=str(local)).name == f"prompts:{local}/train"
    with pytest.raises(ValueError, match="the stdlib prompt set has one split, 'train'"):
        load_task("prompts", data="stdlib", split="test")


def test_held_out_prompts_are_a_test_split_or_a_local_file_whole(tmp_path):
    from hf_jacobi.data.prompts import held_out_split

    local = tmp_path / "judge.parquet"
    assert [held_out_split(name) for name in ("requests", "packages", "stdlib", "org/set", str(local))] == [
        "test",
        "test",
        "test",  # refused by load_prompts: stdlib has nothing held out
        "test",
        None,
    ]
    assert held_out_split(str(local), "validation") == "validation"  # a split named outright is still checked


@pytest.mark.parametrize("command", ["tune", "bench"])
def test_a_command_without_a_column_flag_names_no_python_keyword(command, tmp_path, capsys):
    """`tune`/`demo` and `bench --task prompts` have no flag to choose the prompt column: the one-line error lists the
    accepted columns and stops there, without the library's `column=` hint."""
    from hf_jacobi import cli

    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "a"}\n')
    argv = {
        "tune": ["tune", "--output-dir", str(tmp_path / "tuned"), "--prompt-source", str(path)],
        "bench": ["bench", "--task", "prompts", "--data", str(path), "--output-dir", str(tmp_path / "out")],
    }[command]
    assert cli.main(argv) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].endswith("accepted prompt columns: " + str(list(PROMPT_COLUMNS)))
