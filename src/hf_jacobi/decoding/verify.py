"""Turning the logits of one forward into the scores generate() would have computed at each column.

The logits at a column are processed by generate()'s logits processors with the context greedy (or ancestral
sampling) would have had if the drafts before it on its branch were right: the row's committed tokens plus those
drafts. Where the drafts were right the processed scores are exactly the reference's; where they were wrong the scores
only shape the next draft, which is verified again before anything is committed.
"""

from __future__ import annotations

import copy

import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from .rows import CommittedText, RowState
from .step_layout import StepLayout

# Processors whose output depends on the scores alone, never on the tokens before them: every column of a forward can
# go through them in one call.
CONTEXT_FREE = (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    MinPLogitsWarper,
    TypicalLogitsWarper,
    EpsilonLogitsWarper,
    EtaLogitsWarper,
)


def greedy_choice(scores: torch.Tensor) -> torch.Tensor:
    """The index of each row's largest score over the last dimension: `argmax(dim=-1)`, the same index (the first
    largest on ties, NaN taken as largest), computed as `max(dim=-1).indices`.

    Why not `argmax`: on a CPU, torch 2.13's argmax over bfloat16 runs a scalar loop, several times slower than `max`
    over the same tensor, a visible share of a bfloat16 decoding step at a vocabulary the size of the embedded model's
    (figures: docs/results/campaign-cpu/README.md, from `lab/benchmarks/argmax_cpu.py`)."""
    return scores.max(dim=-1).indices


def process_column_scores(
    logits_processor: LogitsProcessorList,
    committed: CommittedText,
    running: list[RowState | None],
    logits: torch.Tensor,
    layout: StepLayout,
) -> torch.Tensor:
    """Processed scores [b, Q, V] for every column of a forward, each with the context greedy would have given it.

    A column's context is its row's committed text (prompt included) followed by the drafts before it on its branch
    (`layout.drafts_before`). Only processors that read the context make the committed text go to the device
    (`committed.sequences`); with none, or with warpers that read the scores alone, it stays on the host.

    Args:
        running: the forward's rows in order (None: padding a fixed-batch cache keeps), for their committed lengths and
            their index in the original batch (processors that keep per-row state).
        logits: [b, Q, V], the raw logits of the forward: float32 whenever there are processors to run.
    """
    if len(logits_processor) == 0:
        return logits
    rows, width, vocab = logits.shape
    if all(isinstance(p, CONTEXT_FREE) for p in logits_processor):
        placeholder = torch.zeros((rows * width, 1), dtype=torch.long, device=logits.device)
        return logits_processor(placeholder, logits.reshape(rows * width, vocab).clone()).view(rows, width, vocab)
    lengths = [committed.prompt_len + (len(row.generated) if row is not None else 0) for row in running]
    batch_rows = [row.index if row is not None else local for local, row in enumerate(running)]
    sequences = committed.sequences
    # Columns whose contexts have the same length go through the processors together.
    groups: dict[tuple[int, int], list[tuple[int, int, list[int]]]] = {}
    for row in range(rows):
        for column in range(layout.columns_used[row]):
            drafts = layout.drafts_before(row, column)
            if drafts is not None:
                groups.setdefault((lengths[row], len(drafts)), []).append((row, column, drafts))
    scores = logits.clone()
    for (length, level), members in groups.items():
        local = [row for row, _, _ in members]
        columns = [column for _, column, _ in members]
        original = [batch_rows[row] for row in local]
        drafts = torch.tensor([d for _, _, d in members], dtype=torch.long, device=logits.device)
        context = torch.cat([sequences[original, :length], drafts.reshape(len(members), level)], dim=1)
        processors = processors_for_rows(logits_processor, original, len(committed.rows))
        scores[local, columns] = processors(context, logits[local, columns].clone())
    return scores


def processors_for_rows(
    logits_processor: LogitsProcessorList, rows: list[int], batch_size: int
) -> LogitsProcessorList:
    """The processors as they must be called on a subset `rows` of the original batch, in that order.

    Two processors generate() builds hold per-row state: the repetition penalty's per-row prompt length (so that left
    padding is ignored) and prefix_allowed_tokens_fn's batch index. Copies see the subset; the rest are shared as is.
    """
    if rows == list(range(batch_size)):
        return logits_processor
    adapted = LogitsProcessorList()
    for processor in logits_processor:
        if isinstance(processor, PrefixConstrainedLogitsProcessor):
            original = processor._prefix_allowed_tokens_fn
            processor = copy.copy(processor)
            processor._prefix_allowed_tokens_fn = lambda batch_id, sent, fn=original: fn(rows[batch_id], sent)
        elif isinstance(processor, RepetitionPenaltyLogitsProcessor) and isinstance(
            processor.prompt_ignore_length, torch.Tensor
        ):
            ignore = processor.prompt_ignore_length
            processor = copy.copy(processor)
            processor.prompt_ignore_length = ignore[torch.tensor(rows, device=ignore.device)]
        adapted.append(processor)
    return adapted
