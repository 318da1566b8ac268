"""Jacobi trajectories from known fixed points: every block's iterations of a batch in one forward each.

Why: the project's collection (`hf-jacobi collect`) runs the Jacobi loop itself, one block after another, so a row of
128 tokens costs about as many sequential forwards as greedy decoding. Once greedy's answer is known, the fixed point of
every block is known, and so is the prefix each block iterates on (the prompt and the fixed points before it). The
iterations of all blocks are then independent: iteration k of every block of every row is one forward over their
unconverged tokens, on a KV cache of prompt + answer filled once, with a mask that lets each block see its own prefix
only. A block of n tokens converges in at most n iterations, so a batch costs one greedy generation plus about n
forwards.

What it records is the paper's block-by-block Jacobi decoding (iterate a block to its fixed point, then start the
next): state 0 is the block's first token (known: the argmax after the prefix) followed by n - 1 draft tokens drawn
from the prompt (`PromptDrafter`, as the project's loop draws them); state k+1 keeps the converged prefix and takes
the argmax of the model at every later position given state k. The rows have the columns and meaning
`collect_trajectories` writes (states from the initial draft to the fixed point, fixed points equal to the
completion's blocks); the states differ from the project's rolling-chain loop, which slides its window over block
boundaries. `forward_passes` counts the block iterations plus one forward per token of a trailing partial block.

In exact arithmetic the first unconverged token always becomes correct. Where the batched forward's argmax disagrees
with the greedy generation that produced the fixed point (bfloat16 near-ties), the token is set to the fixed point's
and the disagreement is counted, so every block still ends at its fixed point; in float32 none are expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from hf_jacobi.batching import left_padded
from hf_jacobi.decoding.cache import CACHE_ARGUMENT
from hf_jacobi.decoding.drafts import PromptDrafter


@dataclass
class BlockRows:
    """The trajectory rows of one batch: per row its blocks' states, forwards and argmax disagreements."""

    states: list[list[list[list[int]]]]
    forward_passes: list[int]
    disagreements: int
    forwards: int
    """Forwards this batch took (prefill and iterations), for the tokens-per-second figures."""


@torch.no_grad()
def greedy_completions(
    model, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int, eos_ids: set[int]
) -> list[list[int]]:
    """Stock greedy generation of a batch, each answer cut after its first EOS (kept, as collection keeps it)."""
    inputs = left_padded(prompts, pad_id, model.device)
    out = model.generate(
        **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id, decoding="greedy"
    )
    answers = []
    for row in out[:, inputs["input_ids"].shape[1] :].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        answers.append(row[:end])
    return answers


def _argmax(model, hidden: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """The LM head's argmax at every position, a chunk of positions at a time: full-vocabulary logits of a whole
    batch of blocks would not fit in memory. (A final soft-cap or positive logit scale leaves the argmax unchanged.)"""
    head = model.get_output_embeddings()
    flat = hidden.reshape(-1, hidden.shape[-1])
    parts = [head(flat[start : start + chunk]).argmax(-1) for start in range(0, flat.shape[0], chunk)]
    return torch.cat(parts).view(hidden.shape[:-1])


def _prefill(model, prompts, completions, blocks, block_size, pad_id):
    """Fills a KV cache with each row's prompt and the complete blocks of its answer; returns the cache, each row's
    left padding and prompt length (tensors on the model's device)."""
    sequences = [list(p) + list(c[: k * block_size]) for p, c, k in zip(prompts, completions, blocks, strict=True)]
    inputs = left_padded(sequences, pad_id, model.device)
    valid = inputs["attention_mask"]
    position_ids = (valid.cumsum(1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    model(**inputs, position_ids=position_ids, use_cache=True, logits_to_keep=1, **{CACHE_ARGUMENT: cache})
    padding = (valid == 0).sum(1)
    prompt_len = torch.tensor([len(p) for p in prompts], device=model.device)
    return cache, padding, prompt_len


def _initial_states(prompts, fixed: torch.Tensor, seed: int) -> torch.Tensor:
    """State 0 of every block: its first token (the fixed point's) and n - 1 tokens drawn from the row's prompt."""
    rows, blocks, n = fixed.shape
    batch = left_padded(prompts, 0)
    drafter = PromptDrafter(batch["input_ids"], batch["attention_mask"].bool(), seed)
    drafts = [[drafter.draw(row, n - 1) for _ in range(blocks)] for row in range(rows)]
    states = fixed.clone()
    states[:, :, 1:] = torch.tensor(drafts, dtype=torch.long).view(rows, blocks, n - 1).to(fixed.device)
    return states


def _mismatch(states: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
    """Index of each block's first wrong token (n when converged)."""
    n = states.shape[-1]
    wrong = states != fixed
    return torch.where(wrong.any(-1), wrong.float().argmax(-1), torch.full_like(wrong[..., 0], n, dtype=torch.long))


def _queries(states, first_wrong, present, padding, prompt_len):
    """The tokens one iteration forwards, packed per row: for each unconverged block, slots t = d-1 .. n-2 (the
    last converged token, whose argmax checks the first wrong one, and every later token but the last). Returns
    (token ids, position ids, cache bound per query, block per query, slot per query, valid) as [B, Q] tensors."""
    rows, _, n = states.shape
    slot = torch.arange(n - 1, device=states.device)
    active = present & (first_wrong < n)
    take = active[..., None] & (slot >= (first_wrong - 1)[..., None])  # [B, K, n-1]
    flat = take.view(rows, -1)
    width = max(int(flat.sum(1).max()), 1)
    order = torch.sort((~flat).to(torch.uint8), dim=1, stable=True).indices[:, :width]
    valid = flat.gather(1, order)
    block = order // (n - 1)
    t = order % (n - 1)
    tokens = states[:, :, : n - 1].reshape(rows, -1).gather(1, order)
    start = prompt_len[:, None] + block * n  # position of each query's block
    # a query sees cache columns [padding, bound): the prompt and its block's converged prefix
    bound = padding[:, None] + start + first_wrong.gather(1, block) - 1
    return tokens, start + t, bound, block, t, valid


def _mask(bound, block, t, valid, padding, cache_len, dtype):
    """The additive 4D mask [B, 1, Q, cache + Q]: a query sees its prefix in the cache and the earlier queries of its
    own block; a padding query sees only itself (a row with nothing to see would give NaN)."""
    width = block.shape[1]
    columns = torch.arange(cache_len, device=block.device)
    to_cache = (columns >= padding[:, None, None]) & (columns < bound[..., None]) & valid[..., None]
    same = (block[:, :, None] == block[:, None, :]) & (t[:, None, :] <= t[:, :, None])
    to_queries = same & valid[:, :, None] & valid[:, None, :]
    to_queries |= torch.eye(width, dtype=torch.bool, device=block.device) & ~valid[..., None]
    allowed = torch.cat([to_cache, to_queries], dim=-1)[:, None]
    return torch.zeros(allowed.shape, dtype=dtype, device=block.device).masked_fill(~allowed, torch.finfo(dtype).min)


def _update(states, fixed, first_wrong, present, guess, block, t, valid) -> tuple[torch.Tensor, int]:
    """One Jacobi step of every unconverged block: the converged prefix stays, position i >= d takes the argmax at
    i - 1. Returns the new states and how many first-wrong tokens the argmax got wrong (then set to the fixed point)."""
    rows, blocks, n = states.shape
    dummy = blocks * (n - 1)
    spread = torch.zeros(rows, dummy + 1, dtype=torch.long, device=states.device)
    spread.scatter_(1, torch.where(valid, block * (n - 1) + t, dummy), guess)
    guessed = spread[:, :dummy].view(rows, blocks, n - 1)
    active = present & (first_wrong < n)
    position = torch.arange(1, n, device=states.device)
    take = active[..., None] & (position >= first_wrong[..., None])
    new = states.clone()
    new[..., 1:] = torch.where(take, guessed, states[..., 1:])
    first = first_wrong.clamp(max=n - 1)[..., None]
    wrong = active & (new.gather(-1, first) != fixed.gather(-1, first)).squeeze(-1)
    new = torch.where(wrong[..., None], new.scatter(-1, first, fixed.gather(-1, first)), new)
    return new, int(wrong.sum())


def _fixed_points(completions, counts, block_size, device) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, K, n] fixed points (the answers' complete blocks, zero-filled past a row's last) and [B, K] presence."""
    rows, blocks = len(completions), max(counts)
    fixed = torch.zeros(rows, blocks, block_size, dtype=torch.long)
    present = torch.zeros(rows, blocks, dtype=torch.bool)
    for row, (answer, count) in enumerate(zip(completions, counts, strict=True)):
        if count:
            fixed[row, :count] = torch.tensor(answer[: count * block_size]).view(count, block_size)
            present[row, :count] = True
    return fixed.to(device), present.to(device)


@torch.no_grad()
def block_trajectories(
    model,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    block_size: int,
    pad_id: int,
    draft_seed: int = 0,
) -> BlockRows:
    """Every complete block's Jacobi states, initial draft to fixed point, for a batch of prompts whose greedy
    answers (`completions`, cut after EOS) are known; all blocks iterate together, one forward per iteration."""
    n = block_size
    counts = [len(answer) // n for answer in completions]
    tails = [len(answer) - count * n for answer, count in zip(completions, counts, strict=True)]
    if max(counts, default=0) == 0:
        return BlockRows([[] for _ in prompts], tails, 0, 0)
    fixed, present = _fixed_points(completions, counts, n, model.device)
    cache, padding, prompt_len = _prefill(model, prompts, completions, counts, n, pad_id)
    cache_len = cache.get_seq_length()
    states = torch.where(present[..., None], _initial_states(prompts, fixed, draft_seed), fixed)
    start = states.tolist()
    history = [[[start[row][j]] for j in range(count)] for row, count in enumerate(counts)]
    disagreements, forwards = 0, 1
    while True:
        first_wrong = _mismatch(states, fixed)
        if not bool((present & (first_wrong < n)).any()):
            break
        tokens, positions, bound, block, t, valid = _queries(states, first_wrong, present, padding, prompt_len)
        mask = _mask(bound, block, t, valid, padding, cache_len, model.dtype)
        hidden = model.base_model(
            input_ids=tokens, position_ids=positions, attention_mask=mask, use_cache=True, **{CACHE_ARGUMENT: cache}
        ).last_hidden_state
        cache.crop(-tokens.shape[1])
        new, wrong = _update(states, fixed, first_wrong, present, _argmax(model, hidden), block, t, valid)
        disagreements, forwards = disagreements + wrong, forwards + 1
        changed = ((new != states).any(-1) & present).nonzero().tolist()
        listed = new.tolist()
        for row, j in changed:
            history[row][j].append(listed[row][j])
        states = new
    passes = [sum(len(s) - 1 for s in blocks) + tail for blocks, tail in zip(history, tails, strict=True)]
    return BlockRows(history, passes, disagreements, forwards)
