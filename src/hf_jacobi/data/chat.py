"""How a prompt becomes the token ids a model answers, for every command, benchmark and recipe step.

Each entry point used to carry its own chat encoder (three of them), and copies drift: a prompt encoded one way for
collection and another for evaluation measures a different question. Standard library only (no torch), so that
reading prompts costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Messages = list[dict[str, str]]


def encode_chat(tokenizer: Any, prompt: str | Sequence[Mapping[str, str]], *, chat: bool = True) -> list[int]:
    """Token ids of a prompt as the model sees it when it answers.

    chat=True renders the chat template with the generation prompt (what an instruct model expects); a string becomes
    one user turn. chat=False encodes the user turns joined by blank lines, for base models. Asking for the chat
    template on a tokenizer without one raises rather than silently encoding something else.
    """
    messages: Messages = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(turn) for turn in prompt]
    )
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise ValueError(
                f"tokenizer {name!r} has no chat template; pass chat=False to encode the plain prompt text"
            )
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
    else:
        text = "\n\n".join(turn["content"] for turn in messages if turn["role"] == "user")
        ids = tokenizer(text)["input_ids"]
    return [int(i) for i in ids]
