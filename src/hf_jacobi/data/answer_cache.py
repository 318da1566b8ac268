"""A batch's greedy answers and the KV cache that holds them, laid out for the parallel collection method.

Why a layout of its own: `block_iterations` reads every row's prompt and answer from one cache, the prompt left-padded
to a common width and the answer from that width on, so that a block's prefix is a column range. Greedy generation
leaves exactly that cache behind (a resumed collection, whose answers are known, fills it in one prefill instead), and
the cache is a plain `DynamicCache` (every layer keeps every slot), so that sliding-window layers keep the slots the
iterations' masks select by position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..batching import left_padded
from ..decoding.cache import CACHE_ARGUMENT
from ..measurement import generated_tokens


@dataclass
class AnswerCache:
    """A KV cache holding each row's prompt, left-padded to `width` columns, then its answer from column `width`."""

    cache: DynamicCache
    width: int
    prompt_len: torch.Tensor


@torch.no_grad()
def greedy_answers(
    model, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int, eos_ids: set[int]
) -> tuple[list[list[int]], AnswerCache]:
    """Stock greedy generation of a batch (`generate`), each answer cut after its first EOS, with the cache it filled."""
    inputs = left_padded(prompts, pad_id, model.device)
    cache = DynamicCache()
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
        decoding="greedy",
        return_dict_in_generate=True,
        **{CACHE_ARGUMENT: cache},
    )
    width = inputs["input_ids"].shape[1]
    answers = [generated_tokens(row, eos_ids) for row in out.sequences[:, width:]]
    prompt_len = torch.tensor([len(p) for p in prompts], device=model.device)
    return answers, AnswerCache(cache, width, prompt_len)


@torch.no_grad()
def prefill_answers(
    model, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], pad_id: int
) -> AnswerCache:
    """The cache `greedy_answers` leaves, from answers already known (a resumed collection): one forward over the
    left-padded prompts followed by the answers (right-padded)."""
    inputs = left_padded(prompts, pad_id)
    width, longest = inputs["input_ids"].shape[1], max(len(a) for a in answers)
    ids = torch.full((len(prompts), width + longest), pad_id, dtype=torch.long)
    valid = torch.zeros_like(ids)
    ids[:, :width], valid[:, :width] = inputs["input_ids"], inputs["attention_mask"]
    for row, answer in enumerate(answers):
        ids[row, width : width + len(answer)] = torch.tensor(list(answer), dtype=torch.long)
        valid[row, width : width + len(answer)] = 1
    cache = DynamicCache()
    position_ids = (valid.cumsum(1) - 1).clamp(min=0)
    model(
        input_ids=ids.to(model.device),
        attention_mask=valid.to(model.device),
        position_ids=position_ids.to(model.device),
        use_cache=True,
        logits_to_keep=1,
        **{CACHE_ARGUMENT: cache},
    )
    return AnswerCache(cache, width, torch.tensor([len(p) for p in prompts], device=model.device))
