"""What every task is made of: items to feed, how to encode them, and a scorer for what comes back.

Nothing here imports torch or transformers, so a task (and the HumanEval reader) can be loaded and checked before any
model is, and by code that never decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Score:
    correct: bool | None  # None: the task has no reference answer to score against
    status: str


@dataclass(frozen=True)
class BenchItem:
    item_id: str
    text: str
    reference: Any


@dataclass(frozen=True)
class TaskOptions:
    """What the command line can say about a task; each task reads the options that apply to it.

    `data` and `split` name where GSM8K/MATH problems or the prompts task's prompts come from (`split=None`: the task's
    usual split, see `load_task`); `chat=None` picks the task's usual form; `timeout_s` and `workers` bound
    HumanEval's test runs.
    """

    data: str | None = None
    split: str | None = None
    limit: int | None = None
    chat: bool | None = None
    timeout_s: float = 10.0
    workers: int | None = None


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
        """A left-padded batch; chat items go through the chat template (the project's one chat encoder)."""
        from ...data.batching import left_padded  # torch is imported only when a batch is encoded
        from ...data.chat import encode_chat

        if self.uses_chat(tokenizer):
            ids = [encode_chat(tokenizer, item.text) for item in items]
        else:
            ids = [tokenizer(self.raw_format.format(text=item.text))["input_ids"] for item in items]
        return left_padded(ids, tokenizer.pad_token_id)
