"""Jacobi trajectories from known fixed points: the `parallel` collection method.

Why: the `sequential` method runs the decoding loop itself, so a row costs about as many sequential forwards as greedy
decoding and each forward holds one block of one row. Once the greedy answer is known, so is every block's fixed point
and the prefix it iterates on (the prompt and the fixed points before it): the Jacobi iterations of all blocks of all
rows are then independent, and iteration k of every block is one forward over the blocks' unconverged tokens. A batch
costs one greedy generation plus about `block_size` wide forwards, which is what a wide matrix unit (a GPU, a CPU's
bfloat16 units) is fast at.

What it records is the paper's block-by-block Jacobi decoding (iterate a block to its fixed point, then start the
next): state 0 is the block's first token (the fixed point's: the argmax after the prefix) followed by n - 1 drafts
drawn from the prompt (`PromptDrafter`, as the decoding loop draws them); state k+1 keeps the converged prefix and
takes the model's argmax at every later position given state k. The rows are `TrajectoryRow`s like the sequential
method's (initial draft to fixed point, fixed points equal to the answer's complete blocks); the states in between
differ from the loop's, whose rolling chain slides over block boundaries. `forward_passes` counts the block iterations
plus one forward per token of a trailing partial block.

The iterations reuse the KV cache greedy generation filled (prompt and answer are already in it), and run in groups of
rows with similar block counts, so that a forward is not padded to the row with the most blocks. In exact arithmetic
the first unconverged token always becomes the fixed point's, so an iteration takes it from the answer and queries
only the tokens after it, whose keys and values see the converged prefix in the cache: a block of n tokens costs
about n^2 / 2 query tokens over its iterations, and the query that would only predict a known token is one in every
n - d. `check_first_wrong=True` queries it too (the last converged token, recomputed) and counts where the batched
argmax disagrees with the greedy answer (a near-tie rounded differently in bfloat16; the token is still set to the
fixed point's, so every block ends at its fixed point): a check of the method, none in float32 (tested), and the
same states there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..decoding.cache import CACHE_ARGUMENT
from ..decoding.drafts import PromptDrafter
from ..decoding.masks import AttentionLayout, layer_masks
from ..decoding.sdpa_gqa import cpu_gqa
from ..decoding.verify import greedy_choice
from .answer_cache import AnswerCache, ReservedCache, greedy_answers, prefill_answers
from .batching import left_padded

MAX_QUERY_TOKENS = 1024
"""Query tokens one iteration forward holds at most (rows are grouped to stay under it): wide enough to keep a matrix
unit busy, narrow enough that its attention mask and activations stay small."""


@dataclass
class BlockRows:
    """The trajectory states of a batch: per row its blocks' states, per row its forward count, and totals."""

    answers: list[list[int]]
    """Each row's greedy answer, cut after its first EOS (kept)."""
    states: list[list[list[list[int]]]]
    forward_passes: list[int]
    disagreements: int | None
    """First-wrong tokens whose batched argmax differed from the greedy answer (set to the answer's; 0 in float32);
    None unless `check_first_wrong`."""
    forwards: int
    """Model forwards the iterations took (greedy generation and prefill not counted)."""
    query_tokens: int
    """Tokens those forwards computed (padding not counted): about n^2 / 2 a block, what the iterations cost."""


def _argmax(model, hidden: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """The LM head's argmax at each row of `hidden` [N, H], a chunk at a time (full logits of every query would not
    fit). A final soft-cap or a positive logit scale leaves the argmax unchanged."""
    head = model.get_output_embeddings()
    parts = [greedy_choice(head(hidden[start : start + chunk])) for start in range(0, hidden.shape[0], chunk)]
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.long)


def _initial_states(prompts, fixed: torch.Tensor, seed: int) -> torch.Tensor:
    """State 0 of every block: its first token (the fixed point's) and n - 1 tokens drawn from the row's prompt."""
    rows, blocks, n = fixed.shape
    batch = left_padded(prompts, 0)
    drafter = PromptDrafter(batch["input_ids"], batch["attention_mask"].bool(), seed)
    drafts = [[drafter.draw(row, n - 1) for _ in range(blocks)] for row in range(rows)]
    states = fixed.clone()
    states[:, :, 1:] = torch.tensor(drafts, dtype=torch.long).view(rows, blocks, n - 1).to(fixed.device)
    return states


def _fixed_points(answers, counts, n, device) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, K, n] fixed points (the answers' complete blocks, zero past a row's last) and [B, K] presence."""
    fixed = torch.zeros(len(answers), max(counts), n, dtype=torch.long)
    present = torch.zeros(len(answers), max(counts), dtype=torch.bool)
    for row, (answer, count) in enumerate(zip(answers, counts, strict=True)):
        if count:
            fixed[row, :count] = torch.tensor(answer[: count * n]).view(count, n)
            present[row, :count] = True
    return fixed.to(device), present.to(device)


def _first_wrong(states: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
    """Index of each block's first wrong token (n when converged)."""
    n = states.shape[-1]
    wrong = states != fixed
    return torch.where(wrong.any(-1), wrong.float().argmax(-1), torch.full_like(wrong[..., 0], n, dtype=torch.long))


@dataclass
class _Queries:
    """One iteration's forward, packed per row: for each unconverged block the slots t = d - check .. n-2 (with
    `check`, the last converged token, whose argmax checks the first wrong one; then every later token but the last,
    whose argmax is the next token's new state). [B, Q] each."""

    tokens: torch.Tensor
    positions: torch.Tensor
    bound: torch.Tensor
    """Cache columns a query sees end here (exclusive): its prompt and its block's converged prefix."""
    block: torch.Tensor
    slot: torch.Tensor
    valid: torch.Tensor


def _queries(states, first_wrong, present, prompt_len, width, check: int) -> _Queries:
    rows, _, n = states.shape
    slot = torch.arange(n - 1, device=states.device)
    active = present & (first_wrong < n)
    take = (active[..., None] & (slot >= (first_wrong - check)[..., None])).view(rows, -1)
    count = max(int(take.sum(1).max()), 1)
    order = torch.sort((~take).to(torch.uint8), dim=1, stable=True).indices[:, :count]
    block, t = order // (n - 1), order % (n - 1)
    start = block * n  # answer index of each query's block
    return _Queries(
        tokens=states[:, :, : n - 1].reshape(rows, -1).gather(1, order),
        positions=prompt_len[:, None] + start + t,
        bound=width + start + first_wrong.gather(1, block) - check,
        block=block,
        slot=t,
        valid=take.gather(1, order),
    )


def _mask(q: _Queries, padding, columns: int, layout: AttentionLayout, dtype):
    """The additive 4D mask(s) of one iteration: a query sees its row's prompt and its block's converged prefix in
    the cache, and the earlier queries of its own block; a padding query sees only itself (a row that sees nothing
    gives NaN). Sliding windows apply on positions."""
    width = q.block.shape[1]
    column = torch.arange(columns, device=q.block.device)
    to_cache = (column >= padding[:, None, None]) & (column < q.bound[..., None]) & q.valid[..., None]
    same = (q.block[:, :, None] == q.block[:, None, :]) & (q.slot[:, None, :] <= q.slot[:, :, None])
    to_queries = same & q.valid[:, :, None] & q.valid[:, None, :]
    to_queries |= torch.eye(width, dtype=torch.bool, device=q.block.device) & ~q.valid[..., None]
    allowed = torch.cat([to_cache, to_queries], dim=-1)
    kv_positions = torch.cat([(column[None, :] - padding[:, None]).clamp(min=0), q.positions], dim=1)
    return layer_masks(allowed, q.positions, kv_positions, layout, dtype)


def _step(states, fixed, first_wrong, present, guess: torch.Tensor, q: _Queries) -> tuple[torch.Tensor, int]:
    """One Jacobi step of every unconverged block: the converged prefix stays, position i > d takes the argmax at
    i - 1 and position d the fixed point's token. Returns the new states and how many first-wrong tokens the argmax
    got wrong (where it was queried: `check_first_wrong`)."""
    rows, blocks, n = states.shape
    dummy = blocks * (n - 1)
    spread = torch.zeros(rows, dummy + 1, dtype=torch.long, device=states.device)
    spread.scatter_(1, torch.where(q.valid, q.block * (n - 1) + q.slot, dummy), guess)
    guessed = spread[:, :dummy].view(rows, blocks, n - 1)
    active = present & (first_wrong < n)
    take = active[..., None] & (torch.arange(1, n, device=states.device) >= first_wrong[..., None])
    new = states.clone()
    new[..., 1:] = torch.where(take, guessed, states[..., 1:])
    first = first_wrong.clamp(max=n - 1)[..., None]
    queried = torch.zeros(rows, dummy + 1, dtype=torch.bool, device=states.device)
    queried.scatter_(1, torch.where(q.valid, q.block * (n - 1) + q.slot, dummy), q.valid)
    checked = queried[:, :dummy].view(rows, blocks, n - 1).gather(-1, (first - 1).clamp(min=0)).squeeze(-1)
    wrong = active & (new.gather(-1, first) != fixed.gather(-1, first)).squeeze(-1)
    wrong_count = int((wrong & checked).sum())
    new = torch.where(wrong[..., None], new.scatter(-1, first, fixed.gather(-1, first)), new)
    return new, wrong_count


def _sub_cache(cache: DynamicCache, rows: torch.Tensor, first: int, last: int, queries: int) -> DynamicCache:
    """Rows `rows`, columns [first, last) of `cache`, as a new plain cache (a copy: iterations append and crop) with
    room for `queries` more columns, what an iteration's forward appends before it is cropped again."""
    sub = ReservedCache(last - first + queries)
    for index, layer in enumerate(cache.layers):
        sub.update(layer.keys[rows, :, first:last], layer.values[rows, :, first:last], index)
    return sub


def _iterate_group(
    model, prompts, answers, counts, prefilled: AnswerCache, rows: list[int], n: int, seed: int, check: bool
):
    """Iterates every block of the rows `rows` (indices into the batch) to its fixed point; returns their histories,
    the disagreements, the forwards and the tokens they queried."""
    device = model.device
    index = torch.tensor(rows, device=device)
    prompt_len = prefilled.prompt_len[index]
    padding = prefilled.width - prompt_len
    first = int(padding.min())  # columns every row of the group pads, and those past its last block, are cut
    last = prefilled.width + max(counts[r] for r in rows) * n
    cache = _sub_cache(prefilled.cache, index, first, last, max(counts[r] for r in rows) * (n - 1))
    padding, width = padding - first, prefilled.width - first
    fixed, present = _fixed_points([answers[r] for r in rows], [counts[r] for r in rows], n, device)
    states = torch.where(present[..., None], _initial_states([prompts[r] for r in rows], fixed, seed), fixed)
    start = states.tolist()
    history = [[[start[i][j]] for j in range(counts[r])] for i, r in enumerate(rows)]
    layout = AttentionLayout.from_config(model.config)
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    disagreements = forwards = queried = 0
    columns = cache.get_seq_length()
    while True:
        first_wrong = _first_wrong(states, fixed)
        if not bool((present & (first_wrong < n)).any()):
            break
        q = _queries(states, first_wrong, present, prompt_len, width, int(check))
        guess = torch.zeros_like(q.tokens)
        if bool(q.valid.any()):  # none when every unconverged block lacks only its last token
            mask = _mask(q, padding, columns, layout, model.dtype)
            with cpu_gqa(device):
                hidden = base(
                    input_ids=q.tokens,
                    position_ids=q.positions,
                    attention_mask=mask,
                    use_cache=True,
                    **{CACHE_ARGUMENT: cache},
                ).last_hidden_state
            cache.crop(-q.tokens.shape[1])
            guess[q.valid] = _argmax(model, hidden[q.valid])
            forwards, queried = forwards + 1, queried + int(q.valid.sum())
        new, wrong = _step(states, fixed, first_wrong, present, guess, q)
        disagreements += wrong
        listed = new.tolist()
        for i, j in ((new != states).any(-1) & present).nonzero().tolist():
            history[i][j].append(listed[i][j])
        states = new
    return history, disagreements, forwards, queried


def _groups(counts: list[int], lengths: list[int], n: int, max_query_tokens: int) -> list[list[int]]:
    """Rows with complete blocks, sorted by block count, then prompt length, and cut into groups whose first forward
    (every row padded to the group's most blocks) holds at most `max_query_tokens` (one row at least).

    Why the prompt length: a group's cache starts at its longest prompt's first column, so every query of the group
    attends over that many prompt columns; rows of a batch whose prompt lengths vary several-fold would otherwise
    iterate on caches as wide as the longest prompt of the batch."""
    order = sorted((r for r, c in enumerate(counts) if c), key=lambda r: (counts[r], lengths[r]))
    groups: list[list[int]] = []
    for row in order:
        if groups and (len(groups[-1]) + 1) * counts[row] * (n - 1) <= max_query_tokens:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


@torch.no_grad()
def block_trajectories(
    model,
    prompts: Sequence[Sequence[int]],
    block_size: int,
    *,
    max_new_tokens: int,
    pad_id: int,
    eos_ids: set[int],
    draft_seed: int = 0,
    answers: Sequence[Sequence[int]] | None = None,
    max_query_tokens: int = MAX_QUERY_TOKENS,
    check_first_wrong: bool = False,
) -> BlockRows:
    """Every complete block's Jacobi states, initial draft to fixed point, for a batch of prompts (token ids).

    Greedy answers are generated first (`max_new_tokens`, cut after EOS), unless `answers` gives them (then one
    prefill replaces the generation); then all blocks of a group of rows iterate together, one forward per
    iteration, on the cache generation filled. `check_first_wrong` also queries each block's last converged token and
    counts where its argmax disagrees with the answer (`BlockRows.disagreements`), for one more query per block and
    iteration (about an eighth more at block 16).
    """
    n = block_size
    if answers is None:
        answers, prefilled = greedy_answers(model, prompts, max_new_tokens, pad_id, eos_ids)
    else:
        answers = [list(a) for a in answers]
        prefilled = prefill_answers(model, prompts, answers, pad_id) if any(len(a) >= n for a in answers) else None
    counts = [len(answer) // n for answer in answers]
    tails = [len(answer) - count * n for answer, count in zip(answers, counts, strict=True)]
    states: list[list] = [[] for _ in prompts]
    disagreements = forwards = queried = 0
    for rows in _groups(counts, [len(prompt) for prompt in prompts], n, max_query_tokens):
        history, wrong, steps, tokens = _iterate_group(
            model, prompts, answers, counts, prefilled, rows, n, draft_seed, check_first_wrong
        )
        for row, blocks in zip(rows, history, strict=True):
            states[row] = blocks
        disagreements, forwards, queried = disagreements + wrong, forwards + steps, queried + tokens
    passes = [sum(len(s) - 1 for s in blocks) + tail for blocks, tail in zip(states, tails, strict=True)]
    return BlockRows(answers, states, passes, disagreements if check_first_wrong else None, forwards, queried)
