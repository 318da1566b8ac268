"""Decoding for the quality evaluation: each model's greedy answers to the held-out request sets, scored against the
base model's, and its Jacobi speed on held-out code prompts, so that speed is never read without quality beside it.

The base model scores every model's answers (its NLL of them), so it stays loaded for the whole evaluation; each
trained model is the base with an adapter merged into a fresh copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..data.chat import encode_chat
from ..data.humaneval import HumanEvalProblem, load_humaneval
from ..data.prompts import encode_prompts, held_out_split, load_prompts
from ..data.quality_sets import CodeTask, load_code_tasks
from ..decoding.config import JacobiConfig
from ..training.evaluation import (
    SettingFigures,
    answer_nll,
    batched_answers,
    greedy_answers,
    greedy_outputs,
    measure_setting,
)
from .answers import CODE_TASKS, HUMANEVAL, AnswerQuality, answer_quality, passed_code_tasks


@dataclass
class RequestSet:
    """One held-out set, encoded for the model: `tasks` holds the code tasks when its answers can be executed."""

    name: str
    prompts: list[list[int]]
    tasks: list[CodeTask] | list[HumanEvalProblem] | None = None


def load_request_sets(names: Sequence[str], tokenizer, limit: int | None = None) -> list[RequestSet]:
    """The prompt sources' held-out prompts (`held_out_split`; the first `limit` of each), as chat prompts; the code
    tasks and HumanEval come with their tests, in the prompts' order."""
    sets = []
    for name in names:
        prompts = encode_prompts(load_prompts(name, split=held_out_split(name), limit=limit), tokenizer, chat=True)
        tasks = load_code_tasks(limit) if name == CODE_TASKS else load_humaneval(limit) if name == HUMANEVAL else None
        sets.append(RequestSet(name, prompts, tasks))
    return sets


@dataclass
class ModelQuality:
    """Everything measured on one model: quality per request set, Jacobi speed per setting, and the answers.

    A row of Jacobi answers (`measure_jacobi_answers`) names the model whose answers they are (`jacobi_of`) and the
    settings that decoded them; its speed is that model's (the same weights), so it sits beside it on the front."""

    name: str
    quality: dict[str, AnswerQuality] = field(default_factory=dict)
    speed: list[SettingFigures] = field(default_factory=list)
    answers: dict[str, list[list[int]]] = field(default_factory=dict)
    jacobi_of: str | None = None
    jacobi_settings: dict | None = None

    def to_dict(self) -> dict:
        speed = [{**vars(s), "tokens_per_forward": s.tokens_per_forward} for s in self.speed]
        data = {"name": self.name, "quality": {k: v.to_dict() for k, v in self.quality.items()}, "speed": speed}
        if self.jacobi_of is not None:  # greedy rows keep the keys they had before Jacobi rows existed
            data |= {"jacobi_of": self.jacobi_of, "jacobi_settings": self.jacobi_settings}
        return data

    @classmethod
    def from_dict(cls, data: dict, answers: dict[str, list[list[int]]]) -> ModelQuality:
        """A model measured earlier, from its `to_dict()` and its answers' token ids (as `hf-jacobi quality` saves
        them), so that the base of a protocol is measured once."""
        quality = {
            name: AnswerQuality(**{k: v for k, v in figures.items() if k != "collapse_rate"})
            for name, figures in data["quality"].items()
        }
        speed = [
            SettingFigures(s["name"], s["settings"], s["new_tokens"], s["forwards"], s["identical_to_greedy"])
            for s in data["speed"]
        ]
        return cls(data["name"], quality, speed, answers, data.get("jacobi_of"), data.get("jacobi_settings"))

    @property
    def identical_to_greedy(self) -> bool:
        return all(s.identical_to_greedy for s in self.speed)


@dataclass
class QualityProtocol:
    """How every model of one evaluation is measured (the same for all, so their figures compare)."""

    sets: list[RequestSet]
    speed_prompts: list[list[int]]
    settings: dict[str, JacobiConfig]
    max_new_tokens: int = 128
    batch_size: int = 8


def demo_protocol(tokenizer, max_new_tokens: int = 128, batch_size: int = 8) -> QualityProtocol:
    """What `hf-jacobi demo` prints beside its speed figures: greedy answers to the first plain chat request of each
    category (no speed settings). Eight answers show the figures, they do not judge a model: the quality bars are read
    on the whole set (`hf-jacobi quality`, and the test suite's guard on the shipped adapter)."""
    from ..data.quality_sets import load_requests

    requests = load_requests()
    firsts: dict[str, list] = {}
    for row in requests:
        firsts.setdefault(row["category"], row["messages"])
    prompts = [encode_chat(tokenizer, messages) for messages in firsts.values()]
    sample = RequestSet("requests (first of each category)", prompts)
    return QualityProtocol([sample], [], {}, max_new_tokens, batch_size)


def measure_model(
    name: str, model, base_model, tokenizer, protocol: QualityProtocol, base: ModelQuality | None = None
) -> ModelQuality:
    """`model`'s figures; `base` is the base model's own result (None when `model` is the base)."""
    measured = ModelQuality(name)
    for request_set in protocol.sets:
        answers = greedy_answers(model, request_set.prompts, protocol.max_new_tokens, protocol.batch_size)
        measured.quality[request_set.name] = judge_answers(answers, request_set, base_model, tokenizer, protocol, base)
        measured.answers[request_set.name] = answers
    if not protocol.settings:
        return measured
    # greedy once for every setting: each is checked against the same reference outputs
    greedy = greedy_outputs(model, protocol.speed_prompts, protocol.max_new_tokens, protocol.batch_size)
    for setting, config in protocol.settings.items():
        measured.speed.append(
            measure_setting(
                model, setting, config, protocol.speed_prompts, protocol.max_new_tokens, protocol.batch_size, greedy
            )
        )
    return measured


def judge_answers(
    answers: list[list[int]],
    request_set: RequestSet,
    base_model,
    tokenizer,
    protocol: QualityProtocol,
    base: ModelQuality | None,
) -> AnswerQuality:
    """The figures of one model's answers to one set: the base model's NLL of them, the code tasks they pass, and their
    agreement with the base's answers (`base`; None when these are the base's greedy answers)."""
    nll = answer_nll(base_model, request_set.prompts, answers, protocol.batch_size)
    passed = None
    if request_set.tasks is not None:
        passed = passed_code_tasks(request_set.tasks, tokenizer.batch_decode(answers, skip_special_tokens=True))
    base_answers = None if base is None else base.answers[request_set.name]
    return answer_quality(answers, nll, base_answers, passed)


def own_jacobi_config(model) -> JacobiConfig:
    """The settings `model.generate(decoding="jacobi")` decodes with by default (its generation config's, else
    JacobiConfig's defaults), run on every device: a checkpoint that falls back to greedy on some device would
    otherwise judge its greedy answers a second time."""
    return JacobiConfig.from_generation_config(model.generation_config).replace(greedy_devices=())


def jacobi_label(name: str, model) -> str:
    """The row's name, e.g. "mine · Jacobi (block 8, pool 4)"; a model whose generation config sets no Jacobi
    settings (a base model) says that it decoded with JacobiConfig's defaults."""
    own = "" if JacobiConfig.settings_in(model.generation_config) else ", JacobiConfig defaults"
    return f"{name} · Jacobi ({own_jacobi_config(model).describe()}{own})"


def measure_jacobi_answers(
    greedy: ModelQuality, model, base_model, tokenizer, protocol: QualityProtocol, base: ModelQuality | None = None
) -> ModelQuality:
    """`model`'s answers decoded by Jacobi with its own default settings, judged exactly like a model's greedy answers
    (against `base`, the base model's result; None when `model` is the base), and counted against its own greedy
    answers (`greedy`, its `measure_model` result). Jacobi is token-identical to greedy in float32, not in bfloat16,
    where a forward over a block rounds otherwise than a forward over one token: this row judges what Jacobi answers."""
    config = own_jacobi_config(model)
    reference = greedy if base is None else base
    name = jacobi_label(greedy.name, model)
    measured = ModelQuality(name, speed=greedy.speed, jacobi_of=greedy.name, jacobi_settings=config.to_dict())
    for request_set in protocol.sets:
        answers = batched_answers(model, request_set.prompts, protocol.max_new_tokens, protocol.batch_size, config)
        quality = judge_answers(answers, request_set, base_model, tokenizer, protocol, reference)
        own = greedy.answers[request_set.name]
        quality.identical_to_own_greedy = sum(list(a) == list(b) for a, b in zip(answers, own, strict=True))
        measured.quality[request_set.name] = quality
        measured.answers[request_set.name] = answers
    return measured


def relative(value: float | None, base: float | None) -> float | None:
    """`value` as a multiple of the base model's figure (None where either is missing or the base is 0)."""
    if value is None or base is None or base == 0:
        return None
    return value / base


HUMANEVAL_PASS_SLACK = 1
"""HumanEval problems an adapter may pass fewer than the base: one of 164 is within what a greedy answer's first
different token decides either way."""


def targets_met(model: ModelQuality, base: ModelQuality) -> dict[str, bool]:
    """The quality bars on each request set: collapse rate at most 3 points above the base's, distinct
    3-grams >= 0.9x, the base's NLL of the answers <= 1.2x its NLL of its own, and code tasks passed not below.
    On HumanEval the bars are a user's: loops at most 3 points above the base's, and pass@1 no more than one problem
    below; its answers are code completing a given stub, whose n-gram variety and NLL say little beyond whether the
    code runs."""
    checks: dict[str, bool] = {}
    for name, quality in model.quality.items():
        reference = base.quality[name]
        checks[f"{name}/collapse"] = quality.collapse_rate <= reference.collapse_rate + 0.03
        if name == HUMANEVAL:
            passed, floor = quality.code_passed or 0, (reference.code_passed or 0) - HUMANEVAL_PASS_SLACK
            checks[f"{name}/pass@1"] = passed >= floor
            continue
        checks[f"{name}/distinct_3grams"] = quality.distinct_3grams >= 0.9 * reference.distinct_3grams
        checks[f"{name}/base_nll"] = quality.base_nll <= 1.2 * reference.base_nll
        if quality.code_passed is not None:
            checks[f"{name}/code_passed"] = quality.code_passed >= (reference.code_passed or 0)
    return checks


def same_figures(first: object, second: object, rel_tol: float = 1e-4) -> bool:
    """Equal figures, floats equal to `rel_tol`: the same greedy answers scored on another device (a GPU's float32
    kernels against a CPU's) give NLLs that differ in the sixth digit, and a merge must not refuse them for that."""
    if isinstance(first, float) or isinstance(second, float):
        return (
            isinstance(first, (int, float))
            and isinstance(second, (int, float))
            and math.isclose(first, second, rel_tol=rel_tol)
        )
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_figures(first[k], second[k], rel_tol) for k in first)
    if isinstance(first, list) and isinstance(second, list):
        return len(first) == len(second) and all(
            same_figures(a, b, rel_tol) for a, b in zip(first, second, strict=True)
        )
    return first == second
