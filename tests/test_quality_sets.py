"""The hand-written answer-quality sets (`requests`, `code-tasks`): well formed, solvable as stated, disjoint from every
training prompt set and from HumanEval, loadable by name, and refused for collection."""

from __future__ import annotations

import ast
import fnmatch
import re
from collections import Counter
from pathlib import Path

import pytest

from hf_jacobi import cli
from hf_jacobi.bench.sandbox import run_programs
from hf_jacobi.data.decontamination import find_overlaps, prompt_texts
from hf_jacobi.data.function_prompts import humaneval_entry_points
from hf_jacobi.data.humaneval import load_humaneval
from hf_jacobi.data.prompts import PROMPT_SOURCES, load_prompts
from hf_jacobi.data.quality_sets import (
    CODE_TASKS_FILE,
    REQUESTS_FILE,
    CodeTask,
    load_code_tasks,
    load_requests,
)

ROOT = Path(__file__).resolve().parents[1]
CARD = REQUESTS_FILE.with_name("requests.md")
CATEGORIES = ("explain", "code", "summarize", "howto", "translate", "write", "compare", "advice")


@pytest.fixture(scope="module")
def requests():
    return load_requests()


@pytest.fixture(scope="module")
def tasks() -> list[CodeTask]:
    return load_code_tasks()


def test_requests_are_48_in_8_categories_of_6_with_well_formed_ids(requests):
    assert requests.column_names == ["prompt_id", "category", "messages"]
    assert len(requests) == 48 and len(set(requests["prompt_id"])) == 48
    assert Counter(requests["category"]) == dict.fromkeys(CATEGORIES, 6)
    assert list(dict.fromkeys(requests["category"])) == list(CATEGORIES)  # file order groups the categories
    for row in requests:
        assert re.fullmatch(rf"requests/{row['category']}/[0-5]", row["prompt_id"]), row["prompt_id"]
        (turn,) = row["messages"]
        assert turn["role"] == "user" and len(turn["content"].split()) >= 4
    texts = [row["messages"][0]["content"] for row in requests]
    assert len({" ".join(text.lower().split()) for text in texts}) == len(texts)
    for row in requests.filter(lambda row: row["category"] == "summarize"):
        passage = row["messages"][0]["content"].split("\n\n", 1)[1]
        assert 60 <= len(passage.split()) <= 120, row["prompt_id"]
    assert load_requests(limit=7)["prompt_id"] == requests["prompt_id"][:7]


def test_code_tasks_are_32_well_formed_and_not_humaneval_problems(tasks):
    assert len(tasks) == 32
    assert [task.task_id for task in tasks] == [f"code-tasks/{n}" for n in range(32)]
    assert len({task.entry_point for task in tasks}) == 32
    assert not {task.entry_point for task in tasks} & humaneval_entry_points()
    for task in tasks:
        assert task.request.startswith(("Write a Python function", "I need a Python function", "Please write"))
        assert f"`{task.entry_point}(" in task.request, task.task_id
        solution = ast.parse(task.canonical_solution)
        assert [node.name for node in solution.body if isinstance(node, ast.FunctionDef)] == [task.entry_point]
        assert not any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(solution)), task.task_id
        (check,) = ast.parse(task.test).body
        assert isinstance(check, ast.FunctionDef) and check.name == "check"
        assert 3 <= sum(isinstance(node, ast.Assert) for node in ast.walk(check)) <= 6, task.task_id
        assert task.messages == [{"role": "user", "content": task.request}]
        assert task.program("X") == f"X\n\n{task.test}\n\ncheck({task.entry_point})\n"
    assert load_code_tasks(limit=3) == tasks[:3]


def test_canonical_solutions_pass_and_a_wrong_solution_fails_every_task(tasks):
    wrong = [f"def {task.entry_point}(*a, **k):\n    return None\n" for task in tasks]
    programs = [task.program(task.canonical_solution) for task in tasks] + [
        task.program(code) for task, code in zip(tasks, wrong, strict=True)
    ]
    results = run_programs(programs, timeout_s=20.0, workers=2)
    right, wrong_results = results[: len(tasks)], results[len(tasks) :]
    assert [(t.task_id, r.status) for t, r in zip(tasks, right, strict=True) if not r.passed] == []
    assert [t.task_id for t, r in zip(tasks, wrong_results, strict=True) if r.passed] == []
    assert all(r.status == "failed" and "AssertionError" in r.detail for r in wrong_results)


def test_no_request_shares_a_13_gram_with_training_prompts_or_humaneval(requests, tasks):
    candidates = prompt_texts(requests) | {task.task_id: task.request for task in tasks}
    references = {problem.task_id: problem.prompt for problem in load_humaneval()}
    for name, split in (("packages", "train"), ("magpie", "train"), ("stdlib", "train")):
        references |= prompt_texts(load_prompts(name, split=split))
    overlaps = find_overlaps(candidates, references)
    assert not overlaps, overlaps[:5]
    # the check does see a leak: a request that quotes a training prompt is caught
    quoted = next(text for text in references.values() if len(text.split()) > 20)
    assert find_overlaps({"leak": "Please answer this: " + quoted}, references)


@pytest.mark.parametrize("name, count", [("requests", 48), ("code-tasks", 32)])
def test_sources_load_by_name_with_only_a_test_split(name, count):
    source = PROMPT_SOURCES[name]
    assert source.evaluation_only
    rows = load_prompts(name, split="test")
    assert rows.column_names == ["prompt_id", "messages"] and len(rows) == count
    assert rows["prompt_id"][0] == ("requests/explain/0" if name == "requests" else "code-tasks/0")
    assert load_prompts(name, split="test", limit=5)["prompt_id"] == rows["prompt_id"][:5]
    for split in ("train", "all", "validation"):
        with pytest.raises(ValueError, match=rf"the {name} prompt set has one split, 'test' .*got split='{split}'"):
            load_prompts(name, split=split)


@pytest.mark.parametrize("name", ["requests", "code-tasks"])
def test_collect_refuses_the_sets(name, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_JACOBI_DEBUG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # main() sets it when unset; keep that from leaking into other tests
    assert cli.main(["collect", "--prompts", name, "--output_dir", str(tmp_path / "traj")]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and f"'{name}' is an evaluation set" in lines[0]
    assert not any(tmp_path.iterdir())


def test_the_files_ship_and_the_data_card_matches(requests, tasks):
    # pyproject's package-data line for the folder (read as text: tomllib is Python 3.11+, the project supports 3.10)
    line = re.search(r'^"hf_jacobi\.data\.prompt_sets" = \[(.*)\]$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert line is not None
    shipped = re.findall(r'"([^"]+)"', line.group(1))
    for path in (REQUESTS_FILE, CODE_TASKS_FILE, CARD):
        assert any(fnmatch.fnmatch(path.name, pattern) for pattern in shipped), path.name
    card = CARD.read_text()
    for category, count in Counter(requests["category"]).items():
        assert f"| {category} | {count} |" in card
    assert f"| total | {len(requests)} |" in card and f"{len(tasks)} tasks" in card
    assert "By hand" in card and "frozen as `prompt_sets/requests.jsonl` and `prompt_sets/code-tasks.jsonl`" in card
