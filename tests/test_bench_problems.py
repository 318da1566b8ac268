"""GSM8K and MATH problems from local files and Hub datasets: columns, references, ids, limits and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_jacobi.bench.tasks import MathProblem, load_math_problems
from hf_jacobi.bench.tasks.gsm8k import gsm8k_correct
from hf_jacobi.bench.tasks.problems import MATH_INSTRUCTION

DATA = Path(__file__).parent / "data"
GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
MATH_SAMPLE = DATA / "math_sample.jsonl"


# ------------------------------------------------------------------------------------------------------------------
# Loading GSM8K / MATH problems
# ------------------------------------------------------------------------------------------------------------------


def test_load_gsm8k_sample():
    problems = load_math_problems("gsm8k", str(GSM8K_SAMPLE))
    assert [problem.problem_id for problem in problems] == [f"gsm8k/{i}" for i in range(5)]
    assert [problem.reference for problem in problems] == ["31", "1245", "28", "18", "-7"]
    assert problems[0].question.startswith("Priya bakes 4 trays")
    rows = [json.loads(line) for line in GSM8K_SAMPLE.read_text().splitlines()]
    assert all(gsm8k_correct(row["answer"], problem.reference) for row, problem in zip(rows, problems, strict=True))


def test_load_math_sample_uses_unique_ids_and_falls_back_to_the_boxed_solution():
    problems = load_math_problems("math", str(MATH_SAMPLE), limit=3)
    assert problems == [
        MathProblem(
            "test/prealgebra/9001.json", "What is the value of $\\frac{3}{4} + \\frac{1}{6}$?", "\\frac{11}{12}"
        ),
        MathProblem("test/algebra/9002.json", "Solve for $x$: $5x - 7 = 18$.", "5"),
        MathProblem("test/algebra/9003.json", "Simplify $\\sqrt{50} \\cdot \\sqrt{2}$.", "10"),
    ]


def test_load_math_problems_limit_larger_than_the_file():
    assert len(load_math_problems("math", str(MATH_SAMPLE), limit=50)) == 5


def test_load_math_problems_from_parquet_with_id_column(tmp_path):
    import datasets

    path = tmp_path / "gsm.parquet"
    datasets.Dataset.from_list(
        [{"id": "q-7", "question": "1+1?", "answer": "#### 2"}, {"id": "q-8", "question": "2+2?", "answer": "#### 4"}]
    ).to_parquet(str(path))
    assert load_math_problems("gsm8k", str(path), limit=1) == [MathProblem("q-7", "1+1?", "2")]


def test_missing_column_names_source_column_and_columns_present(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "solution": "#### 2"}) + "\n")
    with pytest.raises(ValueError, match="no column 'answer'") as error:
        load_math_problems("gsm8k", str(path))
    assert str(path) in str(error.value)
    assert "'question'" in str(error.value) and "'solution'" in str(error.value)


def test_math_task_needs_answer_or_solution(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps([{"problem": "1+1?", "reasoning": "2"}]))
    with pytest.raises(ValueError, match=r"no column 'answer' or 'solution'.*'problem', 'reasoning'"):
        load_math_problems("math", str(path))


def test_bad_reference_row_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n" + json.dumps({"question": "?", "answer": "two"})
    )
    with pytest.raises(ValueError, match="row 1: GSM8K answer has no number"):
        load_math_problems("gsm8k", str(path))


def test_bad_task_is_rejected():
    with pytest.raises(ValueError, match="task must be one of gsm8k, math, got 'mbpp'"):
        load_math_problems("mbpp", str(GSM8K_SAMPLE))


def test_bad_limit_is_rejected():
    with pytest.raises(ValueError, match="limit must be an integer >= 1 or None, got 0"):
        load_math_problems("gsm8k", str(GSM8K_SAMPLE), limit=0)


def test_missing_local_file_is_named(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl"):
        load_math_problems("gsm8k", str(missing))


def test_unsupported_local_file_type_is_rejected(tmp_path):
    path = tmp_path / "gsm.csv"
    path.write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"unsupported dataset file .*gsm\.csv.*\.jsonl"):
        load_math_problems("gsm8k", str(path))


def test_hub_failure_suggests_a_local_file(monkeypatch):
    import datasets

    calls = []

    def offline(name, config=None, split=None):
        calls.append((name, config, split))
        raise ConnectionError("no internet")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match=r"could not load dataset 'openai/gsm8k'.*no internet.*local \.json, \.jsonl"):
        load_math_problems("gsm8k", "openai/gsm8k")
    with pytest.raises(ValueError, match="could not load dataset 'someone/math:hard'"):
        load_math_problems("math", "someone/math:hard", split="validation")
    assert calls == [("openai/gsm8k", "main", "test"), ("someone/math", "hard", "validation")]


def test_math_instruction_asks_for_a_boxed_answer():
    assert MATH_INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."
