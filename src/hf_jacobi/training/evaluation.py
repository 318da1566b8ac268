"""Held-out figures of a model before and after Jacobi Forcing: tokens per forward, and the quality beside it.

Training for fewer forwards has a cheap failure mode: a model that degenerates into repetitive text is easy to predict
and scores a high tokens per forward for free. So every figure comes with two quality measures, both on the same
prompts: how well the model still predicts the base model's own greedy answers (NLL per token; the base model scores
its own answers lowest), and how varied its greedy answers are (distinct word 3-grams). Jacobi outputs are checked
token for token against greedy decoding of the same model, batch by batch, as everywhere in the project.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

from ..data.batching import in_batches, left_padded
from ..decoding.config import JacobiConfig
from ..decoding.generate import enable_jacobi
from ..loading import eos_token_ids
from ..measurement import Decoded, decode, distinct_ngrams


@dataclass
class SettingFigures:
    """One Jacobi setting on the prompt set. Tokens per forward counts decoding forwards (the prefill excluded) and
    each row's tokens up to its EOS, never the padding of a batch."""

    name: str
    settings: dict
    new_tokens: int
    forwards: int
    identical_to_greedy: bool

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)


@dataclass
class ModelFigures:
    """Everything measured on one model. `reference_nll` scores the reference answers (the base model's greedy answers
    when comparing a trained model, else the model's own)."""

    prompts: int
    greedy_new_tokens: int
    distinct_3grams: float
    reference_nll: float
    settings: list[SettingFigures]
    reused: bool = False
    """True where the settings' figures and the NLL were taken from an earlier measurement (`evaluate_model`'s
    `known`), only the greedy answers decoded again."""

    def to_dict(self) -> dict:
        data = asdict(self)
        for entry, setting in zip(data["settings"], self.settings, strict=True):
            entry["tokens_per_forward"] = setting.tokens_per_forward
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelFigures:
        """The figures `to_dict` wrote (keys it adds, or a report adds beside them, are left out)."""
        fields = ("name", "settings", "new_tokens", "forwards", "identical_to_greedy")
        settings = [SettingFigures(**{key: entry[key] for key in fields}) for entry in data["settings"]]
        return cls(
            data["prompts"], data["greedy_new_tokens"], data["distinct_3grams"], data["reference_nll"], settings
        )

    def same_greedy(self, other: ModelFigures) -> bool:
        """Whether two measurements' greedy answers agree in every figure kept of them (prompts, tokens, distinct
        3-grams): the test that an earlier measurement is of the same model on the same prompts."""
        return (self.prompts, self.greedy_new_tokens, self.distinct_3grams) == (
            other.prompts,
            other.greedy_new_tokens,
            other.distinct_3grams,
        )


@torch.inference_mode()
def batched_outputs(
    model, prompts: list[list[int]], max_new_tokens: int, batch_size: int, config: JacobiConfig | None = None
) -> list[Decoded]:
    """Each batch of prompts decoded and measured: greedy (`config` None), or Jacobi with `config` on every device
    (`decode`), in the same batches and cut at EOS the same way, so that the two sides' answers compare row by row."""
    model = enable_jacobi(model)
    pad_id, eos_ids = model.generation_config.pad_token_id, eos_token_ids(model.generation_config)
    batches = tqdm(list(in_batches(prompts, batch_size)), desc="greedy" if config is None else "jacobi", leave=False)
    return [
        decode(model, left_padded(batch, pad_id, model.device), max_new_tokens, config, eos_ids=eos_ids, pad_id=pad_id)
        for batch in batches
    ]


def greedy_outputs(model, prompts: list[list[int]], max_new_tokens: int, batch_size: int) -> list[Decoded]:
    """Greedy decoding of each batch of prompts, measured (the reference Jacobi outputs must equal)."""
    return batched_outputs(model, prompts, max_new_tokens, batch_size)


def answers_of(outputs: list[Decoded]) -> list[list[int]]:
    """Each prompt's generated tokens, batch after batch."""
    return [answer for output in outputs for answer in output.answers]


def batched_answers(
    model, prompts: list[list[int]], max_new_tokens: int, batch_size: int, config: JacobiConfig | None = None
) -> list[list[int]]:
    """Each prompt's answer, up to and including its EOS: greedy, or Jacobi with `config` (`batched_outputs`)."""
    return answers_of(batched_outputs(model, prompts, max_new_tokens, batch_size, config))


def greedy_answers(model, prompts: list[list[int]], max_new_tokens: int, batch_size: int) -> list[list[int]]:
    """Each prompt's greedy answer, up to and including its EOS."""
    return batched_answers(model, prompts, max_new_tokens, batch_size)


@torch.inference_mode()
def measure_setting(
    model,
    name: str,
    config: JacobiConfig,
    prompts: list[list[int]],
    max_new_tokens: int,
    batch_size: int,
    greedy: list[Decoded] | None = None,
) -> SettingFigures:
    """Jacobi decoding with `config` over the prompts in batches, each batch checked against greedy's output
    (`greedy`, from `greedy_outputs` with the same batching, is computed here when not given)."""
    model = enable_jacobi(model)
    if greedy is None:
        greedy = greedy_outputs(model, prompts, max_new_tokens, batch_size)
    pad_id, eos_ids = model.generation_config.pad_token_id, eos_token_ids(model.generation_config)
    tokens = forwards = 0
    identical = True
    batches = list(in_batches(prompts, batch_size))
    for batch, reference in tqdm(list(zip(batches, greedy, strict=True)), desc=name, leave=False):
        inputs = left_padded(batch, pad_id, model.device)
        out = decode(model, inputs, max_new_tokens, config, eos_ids=eos_ids, pad_id=pad_id)
        identical &= all(out.same_as(reference))
        tokens += sum(out.new_tokens)
        forwards += sum(out.forwards)
    return SettingFigures(name, config.to_dict(), tokens, forwards, identical)


@torch.inference_mode()
def answer_nll(model, prompts: list[list[int]], answers: list[list[int]], batch_size: int) -> float:
    """Mean negative log-likelihood per answer token of `answers` given their prompts (right-padded batches)."""
    total, count = 0.0, 0
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        rows = [p + a for p, a in zip(chunk, answers[start : start + batch_size], strict=True)]
        starts = [len(p) for p in chunk]
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for i, (row, begin) in enumerate(zip(rows, starts, strict=True)):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            labels[i, begin : len(row)] = ids[i, begin : len(row)]
        logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
        targets = labels[:, 1:].to(model.device)
        losses = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100, reduction="sum"
        )
        total += float(losses)
        count += int((targets != -100).sum())
    return total / max(count, 1)


def canonical_solution_nll(model, tokenizer, limit: int | None = None, batch_size: int = 8) -> float:
    """NLL per token of HumanEval's canonical solutions, each given its problem's prompt as a raw completion.

    A quality check independent of any model's own text: training for fewer forwards must not make a model worse at
    predicting correct code (the project's gate: at most 1.10x the base model's figure)."""
    from ..data.humaneval import load_humaneval

    problems = load_humaneval(limit)
    prompts = [tokenizer(p.prompt)["input_ids"] for p in problems]
    answers = [tokenizer(p.canonical_solution, add_special_tokens=False)["input_ids"] for p in problems]
    return answer_nll(model, prompts, answers, batch_size)


def evaluate_model(
    model,
    prompts: list[list[int]],
    settings: dict[str, JacobiConfig],
    *,
    max_new_tokens: int,
    batch_size: int = 8,
    reference_answers: list[list[int]] | None = None,
    known: ModelFigures | None = None,
) -> tuple[ModelFigures, list[list[int]]]:
    """All figures of one model, and its greedy answers (the reference for the next model measured).

    `known`, figures measured earlier of this model with the same settings (e.g. the base's, which every adapter of
    a study is compared with), saves all but greedy decoding: when this run's greedy answers agree with them
    (`same_greedy`), its settings' figures and NLL are taken from `known` (marked `reused`); where they do not (another
    model, dtype or machine's arithmetic), everything is measured. Its NLL is of the model's own answers, so `known`
    is refused beside `reference_answers`."""
    if known is not None and reference_answers is not None:
        raise ValueError("known figures score the model's own answers: give known or reference_answers, not both")
    if known is not None and [s.name for s in known.settings] != list(settings):
        raise ValueError(f"known figures of settings {[s.name for s in known.settings]}, not {list(settings)}")
    model.eval()
    greedy = greedy_outputs(model, prompts, max_new_tokens, batch_size)
    answers = answers_of(greedy)
    fresh = ModelFigures(len(prompts), sum(len(a) for a in answers), distinct_ngrams(answers), 0.0, [])
    if known is not None and known.same_greedy(fresh):
        return replace(known, reused=True), answers
    figures = [
        measure_setting(model, name, config, prompts, max_new_tokens, batch_size, greedy)
        for name, config in settings.items()
    ]
    reference = answers if reference_answers is None else reference_answers
    nll = answer_nll(model, prompts, reference, batch_size)
    return replace(fresh, reference_nll=nll, settings=figures), answers
