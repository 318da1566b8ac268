"""Speed on held-out prompts: any prompt source (by default the `packages` test split, which no shipped weights saw),
asked as chat turns and not scored.

This is where the Jacobi Forcing adapter is meant to help: prompts from the same kind of text it was trained on, but
never in its training set. There is no reference answer, so the score column stays empty; the bench still checks every
output token by token against greedy's.
"""

from __future__ import annotations

from .base import BenchItem, BenchTask, Score, TaskOptions

DEFAULT_SOURCE = "packages"
HELD_OUT_SPLIT = "test"
"""The split read when --split is not given, wherever the source has it: speed is meant on held-out prompts."""


def _unscored(items: list[BenchItem], completions: list[str]) -> list[Score]:
    return [Score(None, "unscored") for _ in items]


def build(options: TaskOptions) -> BenchTask:
    """`--data` names the prompt source (a name of `hf_jacobi.data.prompts.PROMPT_SOURCES`, a local file or a Hub
    dataset) and `--split` its split (default: `test` where the source has one, else its own); single-turn prompts
    only, since the bench encodes one user turn per item."""
    from ...data.prompts import load_prompts, resolve_split  # datasets is imported only when this task is asked for

    source = options.data or DEFAULT_SOURCE
    if options.chat is False:
        raise ValueError("the prompts task asks chat turns; --no-chat is not accepted for it")
    split = resolve_split(source, options.split, prefer=HELD_OUT_SPLIT)
    prompts = load_prompts(source, split=split, limit=options.limit)
    items = []
    for prompt_id, messages in zip(prompts["prompt_id"], prompts["messages"], strict=True):
        if len(messages) != 1 or messages[0]["role"] != "user":
            raise ValueError(
                f"prompt {prompt_id!r} of {source!r} has {len(messages)} turns "
                f"({', '.join(m['role'] for m in messages)}); the prompts task takes one user turn per prompt"
            )
        items.append(BenchItem(str(prompt_id), messages[0]["content"], None))
    return BenchTask(f"prompts:{source}/{split}", "score", items, True, (), _unscored)
