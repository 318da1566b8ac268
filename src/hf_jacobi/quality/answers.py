"""Answer quality beside speed: is a Jacobi Forcing model still the model it was trained from?

Jacobi decoding is lossless with respect to the model it runs, so any loss of quality comes from training, and it
flatters speed: a model that loops or copies its prompt is the easiest to accept many tokens from. So every quality
figure here compares a model's greedy answers with the base model's, on held-out requests of the kind users type:
- how often an answer collapses into a loop (its last 64 tokens hold under 40% distinct 4-grams),
- how varied the answers are (distinct 3-grams over all answers),
- how likely the base model finds them (its NLL per answer token: the base scores its own answers lowest),
- how often they agree with the base's (identical answers, mean common prefix in tokens),
- and, for code requests, whether the code runs and passes the task's tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..bench.sandbox import run_programs
from ..bench.tasks.humaneval import chat_completion_code
from ..measurement import collapsed, common_prefix, distinct_ngrams

if TYPE_CHECKING:
    from ..data.humaneval import HumanEvalProblem
    from ..data.quality_sets import CodeTask

CODE_TASKS = "code-tasks"
HUMANEVAL = "humaneval"
DEFAULT_SETS = ("requests", CODE_TASKS, HUMANEVAL)
"""The held-out prompt sources a quality evaluation answers by default: plain chat requests and code tasks with
tests (`hf_jacobi.data.quality_sets`), and HumanEval's 164 problems asked as users ask them, a function's signature
and docstring to complete in a chat turn: where a model is sold for code, a loop or a wrong function there is what a
user meets first, and the two hand-written sets ask for code in plain words only."""


def code_of(answer: str, task: CodeTask | HumanEvalProblem) -> str:
    """The program a chat answer offers for a task: its first fenced code block, else the whole answer."""
    return chat_completion_code(answer, task.entry_point)


def passed_code_tasks(
    tasks: Sequence[CodeTask | HumanEvalProblem],
    answers: Sequence[str],
    timeout_s: float = 10.0,
    workers: int | None = None,
) -> list[bool]:
    """Whether each answer's code passes its task's tests, run in the sandbox (`bench.sandbox`): a code task's program
    is the answer's code, a HumanEval problem's its prompt with the answer's code after it (`chat_completion_code`)."""
    if len(tasks) != len(answers):
        raise ValueError(f"need one answer per code task, got {len(tasks)} tasks and {len(answers)} answers")
    programs = [task.program(code_of(answer, task)) for task, answer in zip(tasks, answers, strict=True)]
    return [result.passed for result in run_programs(programs, timeout_s, workers)]


@dataclass
class AnswerQuality:
    """Quality figures of one model's greedy answers to one request set. The agreement figures are None for the base
    model itself, the code figures None for a set without tests."""

    answers: int
    tokens: int
    collapsed: int
    distinct_3grams: float
    base_nll: float
    """The base model's NLL per token of these answers."""
    identical_to_base: int | None = None
    mean_common_prefix: float | None = None
    code_passed: int | None = None
    identical_to_own_greedy: int | None = None
    """For Jacobi answers (`hf-jacobi quality --jacobi-answers`): how many equal the same model's greedy answers. In
    float32 all do; in bfloat16 a forward over a block rounds otherwise than a forward over one token, and some may not.
    None for greedy answers."""

    @property
    def collapse_rate(self) -> float:
        return self.collapsed / max(self.answers, 1)

    def to_dict(self) -> dict:
        """The figures for JSON; `identical_to_own_greedy` only where measured, so that greedy rows read as they did
        before the field existed (and merge with runs written then)."""
        figures = {**asdict(self), "collapse_rate": self.collapse_rate}
        if self.identical_to_own_greedy is None:
            del figures["identical_to_own_greedy"]
        return figures


def answer_quality(
    answers: Sequence[Sequence[int]],
    base_nll: float,
    base_answers: Sequence[Sequence[int]] | None = None,
    passed: Sequence[bool] | None = None,
) -> AnswerQuality:
    """The figures of `answers` (token ids up to EOS), given the base model's NLL of them, the base's own answers to
    the same requests (None when these are the base's) and, for code tasks, which passed."""
    quality = AnswerQuality(
        answers=len(answers),
        tokens=sum(len(a) for a in answers),
        collapsed=sum(collapsed(a) for a in answers),
        distinct_3grams=distinct_ngrams(answers),
        base_nll=base_nll,
        code_passed=None if passed is None else sum(passed),
    )
    if base_answers is not None:
        if len(base_answers) != len(answers):
            raise ValueError(f"{len(answers)} answers against {len(base_answers)} base answers")
        quality.identical_to_base = sum(list(a) == list(b) for a, b in zip(answers, base_answers, strict=True))
        prefixes = [common_prefix(a, b) for a, b in zip(answers, base_answers, strict=True)]
        quality.mean_common_prefix = sum(prefixes) / max(len(prefixes), 1)
    return quality
