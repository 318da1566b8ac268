"""The Jacobi decoding loop: the one place where drafts are proposed, verified and committed.

It runs as a `custom_generate` callable, so generate() has already resolved the generation config, built the logits
processors (sampling warpers included) and stopping criteria, and prepared the prompt's attention mask and position
ids. Every iteration is one `_step`: each running row (`RowState`) asks its proposers for branches (the Jacobi chain
first, then recycled n-grams), all rows' branches go through one forward (`StepLayout`), the scores of every column
are processed with the context the reference decoding would have had, and the acceptance rule chosen for the call
(greedy or sampling) walks the proposals. The row commits the accepted tokens plus one, keeps their KV, and tells its
proposers what happened (the chain's Jacobi update, the pool's harvest). Rows commit different numbers of tokens;
`KVSlots` keeps the shared cache consistent with per-row holes.

With `cache_implementation="static"` the same loop runs on a preallocated cache (`static_cache.StaticKVSlots`): every
forward of the call has one of a few fixed widths and the same batch (finished rows stay as padding), so the verify
forward can be compiled, as transformers' generate compiles its decoding forward on a static cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.cache_utils import Cache, DynamicLayer, DynamicSlidingWindowLayer
from transformers.generation.streamers import BaseStreamer

from .acceptance import AcceptanceRule, Verdict, acceptance_rule
from .cache import CACHE_ARGUMENT, CACHE_ARGUMENTS, KVSlots
from .cache_choice import resolve_cache
from .chain import DraftChain
from .checks import check_generation_config, check_memory, forward_widths, warn_unusable_block_size
from .compiled_forward import verify_forward
from .config import JacobiConfig
from .drafts import PromptDrafter
from .masks import AttentionLayout
from .outputs import JacobiDecoderOnlyOutput
from .proposers import Proposer, StepOutcome
from .recycling import RecyclingProposer
from .rows import CommittedText, RowState
from .static_cache import StaticKVSlots, defer_slot_moves, static_width_count, to_static
from .step_layout import StepLayout
from .stopping import RowStopper
from .streaming import ColumnStreamer
from .verify import greedy_choice, process_column_scores


class StepRecorder(Protocol):
    """Receives every draft chain the loop feeds, so that training data is recorded from the loop users run.

    `start` is the index, among the row's generated tokens, of the chain's first token (already committed); the
    tokens after it are the drafts for the positions that follow.
    """

    def record(self, row: int, start: int, tokens: list[int]) -> None: ...


@dataclass(frozen=True)
class VerifyForward:
    """How every step runs its forward: the callable (the model, or its compiled call), the dtype its masks are built
    in, and the keyword arguments every call takes."""

    call: Callable[..., Any]
    dtype: torch.dtype
    kwargs: dict[str, Any]


@dataclass
class JacobiRuntime:
    """What a Jacobi call needs beyond generate()'s own arguments.

    generate() does not hand a callable `custom_generate` its streamer, so it travels here, with the optional
    trajectory recorder.
    """

    config: JacobiConfig
    streamer: BaseStreamer | None = None
    recorder: StepRecorder | None = None


def jacobi_decode(
    model,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    jacobi_runtime: JacobiRuntime,
    **model_kwargs,
) -> JacobiDecoderOnlyOutput | torch.LongTensor:
    """Jacobi generation, identical to greedy (or distributed as sampling); the signature is the one generate() calls."""
    check_generation_config(model, generation_config, model_kwargs, jacobi_runtime.config)
    config, recorder = resolve_cache(jacobi_runtime.config, model, generation_config), jacobi_runtime.recorder
    accept = acceptance_rule(bool(generation_config.do_sample))
    pad_id = generation_config._pad_token_tensor
    pad_id = int(pad_id) if pad_id is not None else 0
    capacity = max(generation_config.max_length - input_ids.shape[1], 1)
    check_memory(model, config, input_ids.shape[0], input_ids.shape[1], capacity, input_ids.device)
    warn_unusable_block_size(model, config, capacity)

    cache, slots, valid, first_scores = _prefill(model, input_ids, generation_config, model_kwargs)
    cache, slots, forward = _verify_setup(model, config, generation_config, cache, slots, input_ids.shape[1], capacity)
    first_tokens = _first_tokens(logits_processor(input_ids, first_scores), bool(generation_config.do_sample))
    drafter = PromptDrafter(input_ids, valid, seed=config.draft_seed)
    rows = [
        RowState(index, drafter.prompts[index][:] if valid[index].any() else [], int(position) + 1)
        for index, position in enumerate(slots.positions[:, slots.length - 1].tolist())
    ]
    committed = CommittedText(input_ids, rows, RowStopper(stopping_criteria), capacity, pad_id)
    stream = ColumnStreamer(jacobi_runtime.streamer, committed)
    for row, token in zip(rows, first_tokens, strict=True):
        committed.commit(row, [token])
        row.proposers = _proposers(config, row, token, drafter, capacity)
    stream.flush()

    # The rows in the cache, in cache order. The dynamic cache drops finished rows; the static one keeps its batch, and
    # a finished row stays there as None (padding), so that its cache row is still its index in the batch.
    running: list[RowState | None] = list(rows)
    while True:
        keep = [i for i, row in enumerate(running) if row is not None and not committed.done(row)]
        if not keep:
            break
        if len(keep) < sum(row is not None for row in running):
            running = slots.select_rows(cache, running, keep)
        _step(forward, running, cache, slots, committed, logits_processor, accept, recorder, pad_id)
        stream.flush()

    stream.finish()
    sequences = committed.output(input_ids)
    if not generation_config.return_dict_in_generate:
        return sequences
    device = input_ids.device
    return JacobiDecoderOnlyOutput(
        sequences=sequences,
        forward_passes=torch.tensor([row.forward_passes for row in rows], device=device),
        forward_tokens=torch.tensor([row.forward_tokens for row in rows], device=device),
        recycled_tokens=torch.tensor([row.recycled_tokens for row in rows], device=device),
    )


def _verify_setup(model, config: JacobiConfig, generation_config, cache, slots, prompt_width: int, capacity: int):
    """The cache, its slots and the verify forward every step uses: the prefill's dynamic cache and the model itself,
    or, on the static path, the same KV moved into a preallocated cache and the (possibly compiled) call over it."""
    call = model
    if config.cache_implementation == "static":
        widths = forward_widths(config, prompt_width, capacity, static_width_count(config, model.device))
        cache, slots = to_static(model, cache, slots, widths, capacity, generation_config)
        call = verify_forward(model, config, generation_config, cache, len(widths))
        if call is not model:
            defer_slot_moves(cache, slots)
    # logits at every column
    forward = VerifyForward(call, model.dtype, {"logits_to_keep": 0} if model._supports_logits_to_keep() else {})
    return cache, slots, forward


def _first_tokens(scores: torch.Tensor, do_sample: bool) -> list[int]:
    """Each row's first new token from the prefill's processed scores, drawn or argmax as greedy/sampling would."""
    if do_sample:
        return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1).tolist()
    return greedy_choice(scores).tolist()


def _step(
    forward: VerifyForward,
    running: list[RowState | None],
    cache: Cache,
    slots: KVSlots | StaticKVSlots,
    committed: CommittedText,
    logits_processor: LogitsProcessorList,
    accept: AcceptanceRule,
    recorder: StepRecorder | None,
    pad_id: int,
) -> None:
    """One forward over every running row's proposals, and each row's commit.

    `forward.call` is the model, or its compiled call on the static path. Rows that are None (finished, kept in a
    fixed-batch cache) are padding: they propose nothing and keep nothing.
    """
    live = [(local, row) for local, row in enumerate(running) if row is not None]
    roots: list[int | None] = [None] * len(running)
    proposals: list[list[list[int]]] = [[] for _ in running]
    for local, row in live:
        roots[local] = row.text[-1]
        proposals[local] = row.propose(committed.capacity - len(row.generated))
        if recorder is not None:
            recorder.record(row.index, len(row.generated) - 1, [row.text[-1], *proposals[local][0]])
    starts = [row.position if row is not None else 0 for row in running]
    layout = StepLayout(roots, proposals, pad_id, committed.device, widths=slots.step_widths, starts=starts)
    mask = slots.attention_mask(layout, forward.dtype)
    scores, predictions = _verify(forward, layout, mask, cache, logits_processor, committed, running)

    orders, keeps = [list(range(layout.width)) for _ in running], [0] * len(running)
    for local, row in live:
        kept = _commit_row(
            row,
            layout,
            local,
            accept(layout.branches[local], scores[local], predictions[local]),
            committed,
            predictions[local],
        )
        kept_set = set(kept)
        orders[local] = kept + [c for c in range(layout.width) if c not in kept_set]
        keeps[local] = len(kept)
    slots.commit_columns(cache, orders, keeps, layout)
    slots.maybe_compact(cache)


def _verify(
    forward: VerifyForward,
    layout: StepLayout,
    mask: torch.Tensor | dict[str, torch.Tensor],
    cache: Cache,
    logits_processor: LogitsProcessorList,
    committed: CommittedText,
    running: list[RowState | None],
) -> tuple[torch.Tensor, list[list[int]]]:
    """The device's part of a step: the forward, the processed scores of every column and their argmax, read back
    (the step's one wait for the device). Everything else a step does is host work the device idles through, which
    is what `lab/benchmarks/profile_step.py --split` measures by timing this call."""
    logits = forward.call(
        input_ids=layout.tokens,
        attention_mask=mask,
        position_ids=layout.positions,
        use_cache=True,
        **{CACHE_ARGUMENT: cache},
        **forward.kwargs,
    ).logits
    if len(logits_processor):  # they get float32 scores, as generate gives them; an argmax needs no copy (exact cast)
        logits = logits.float()
    scores = process_column_scores(logits_processor, committed, running, logits, layout)
    return scores, greedy_choice(scores).tolist()


def _commit_row(
    row: RowState, layout: StepLayout, local: int, verdict: Verdict, committed: CommittedText, prediction: list[int]
) -> list[int]:
    """Commits one row's accepted tokens, updates its counters and proposers, and returns the forward columns whose KV
    it keeps, in order."""
    branches = layout.branches[local]
    taken = committed.commit(row, verdict.tokens)
    row.forward_passes += 1
    row.forward_tokens += layout.columns_used[local]
    if verdict.branch:
        row.recycled_tokens += min(verdict.accepted, taken)
    outcome = StepOutcome(row.text, taken, verdict, branches, prediction)
    for proposer in row.proposers:
        proposer.observe(outcome)
    row.position += taken
    return verdict.columns[:taken]


def _prefill(model, input_ids: torch.Tensor, generation_config: GenerationConfig, model_kwargs: dict):
    """The prompt's forward exactly as greedy runs it (same call, same kernels), into a cache that keeps full history
    on every layer; returns the cache, its slot bookkeeping, the prompt's validity mask and the last logits."""
    prompt_mask = model_kwargs.get("attention_mask")
    valid = prompt_mask.bool() if prompt_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    positions = model_kwargs.get("position_ids")
    if positions is None:
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    for name in CACHE_ARGUMENTS:  # generate has already made a cache of its own under the current name
        model_kwargs.pop(name, None)
    model_kwargs[CACHE_ARGUMENT] = cache
    outputs = model._prefill(input_ids, generation_config, model_kwargs)
    if any(
        isinstance(layer, DynamicSlidingWindowLayer) or not isinstance(layer, DynamicLayer) for layer in cache.layers
    ):
        raise ValueError("decoding='jacobi' supports models whose cache layers are plain dynamic layers.")
    slots = KVSlots(valid, positions.to(torch.long), AttentionLayout.from_config(model.config))
    return cache, slots, valid, outputs.logits[:, -1].to(dtype=torch.float32, copy=True)


def _proposers(
    config: JacobiConfig, row: RowState, first_token: int, drafter: PromptDrafter, capacity: int
) -> list[Proposer]:
    """A row's draft sources: the Jacobi chain, then (with recycling) its n-gram pool.

    Blocks, blocks in flight and n-grams are capped by the token budget `capacity`, so that a chain never holds (nor
    draws drafts for) more than about twice the budget; within the budget nothing changes. Each forward cuts the
    proposals again to what the row has left (`RowState.propose`).
    """
    n = min(config.block_size, capacity)
    num_blocks = min(config.num_blocks, math.ceil(capacity / n))

    def fill(count: int) -> list[int]:
        return drafter.draw(row.index, count)

    chain = DraftChain([first_token, *fill(n - 1)], n, num_blocks, config.spawn_ratio, fill)
    proposers: list[Proposer] = [chain]
    if config.ngram_pool_size:  # seeded with the prompt and the first token, the text known at this point
        pool = RecyclingProposer(
            row.text,
            config.ngram_pool_size,
            min(config.candidate_length, max(capacity - 1, 1)),
            config.ngram_key_size,
            config.candidates_per_step,
        )
        proposers.append(pool)
    return proposers
