"""Turning one block forward into the tokens greedy decoding would have chosen at each block position.

The logits at block position i are processed by generate()'s logits processors with the context greedy would have
had if the block's first i drafts were right: the row's committed tokens plus those drafts. Where the drafts were
right the processed scores are exactly greedy's; where they were wrong the scores only shape the next draft, which is
verified again before anything is committed.
"""

from __future__ import annotations

import copy

import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import PrefixConstrainedLogitsProcessor, RepetitionPenaltyLogitsProcessor


def process_block_logits(
    logits_processor: LogitsProcessorList,
    sequences: torch.Tensor,
    context_lengths: torch.Tensor,
    logits: torch.Tensor,
    batch_rows: torch.Tensor,
    batch_size: int,
) -> torch.Tensor:
    """Processed scores [b, q, V] for the q block positions of each row.

    Args:
        sequences: LongTensor [b, W]; each row's committed tokens followed by its block's drafts (block[1:]).
        context_lengths: LongTensor [b]; the committed length of each row: position i sees
            sequences[:, : context_lengths + i].
        logits: float32 [b, q, V], the raw logits at the block positions.
        batch_rows: LongTensor [b]; each row's index in the original batch of `batch_size` rows, for processors
            that hold per-row state or pass the row index to user code.
    """
    if len(logits_processor) == 0:
        return logits
    q = logits.shape[1]
    lengths = context_lengths.tolist()
    rows = batch_rows.tolist()
    scores = torch.empty_like(logits)
    if all(length == lengths[0] for length in lengths):
        processors = processors_for_rows(logits_processor, rows, batch_size)
        for i in range(q):
            scores[:, i] = processors(sequences[:, : lengths[0] + i], logits[:, i].clone())
        return scores
    for r, length in enumerate(lengths):
        processors = processors_for_rows(logits_processor, [rows[r]], batch_size)
        for i in range(q):
            scores[r : r + 1, i] = processors(sequences[r : r + 1, : length + i], logits[r : r + 1, i].clone())
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


def accepted_draft_counts(block: torch.Tensor, predictions: torch.Tensor) -> torch.Tensor:
    """Number of leading drafts block[:, 1:] that equal the predictions before them: LongTensor [b].

    block[:, 0] is always right (it is the last committed token), so a row can commit this count plus one token.
    """
    matches = (block[:, 1:] == predictions[:, :-1]).to(torch.long)
    return matches.cumprod(dim=1).sum(dim=1)
