"""The trainer's side of the trajectory data: which rows it can train on, the id that pads them, and the epoch the
collator draws noise for."""

from __future__ import annotations

import logging
from typing import Any

import datasets
from transformers import PreTrainedTokenizerBase, TrainerCallback

from ..data.packing import TRAJECTORY_COLUMNS, JacobiForcingCollator
from ..data.trajectory_schema import check_not_empty, check_trajectory_table

logger = logging.getLogger(__name__)


class CollatorEpoch(TrainerCallback):
    """Tells the collator which epoch is starting, so that each epoch draws fresh noisy views (and a resumed run the
    same views as an uninterrupted one)."""

    def __init__(self, collator: JacobiForcingCollator) -> None:
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


def usable_trajectories(dataset: datasets.Dataset, collator: JacobiForcingCollator, name: str) -> datasets.Dataset:
    """Checks the dataset is not empty and that the columns the collator reads are there, of the right types and
    without missing values (one error naming each bad column; other columns are ignored, as the collator ignores
    them), then drops (with a count) the trajectories that hold no block that fits in max_length: a completion shorter
    than one block, or a prompt too long. Nothing else is dropped."""
    source = f"the {name} dataset"
    check_not_empty(len(dataset), source)
    check_trajectory_table(dataset.data.table, source, columns=TRAJECTORY_COLUMNS, allow_extra=True)

    def fits(example: dict[str, Any]) -> bool:
        blocks = collator.blocks_that_fit(
            len(example["prompt_ids"]), example["block_size"], len(example["fixed_points"])
        )
        return blocks > 0

    kept = dataset.filter(fits, desc=f"checking {name} trajectories")
    if len(kept) == 0:
        raise ValueError(
            f"none of the {len(dataset)} {name} trajectories holds a complete block that fits in max_length="
            f"{collator.max_length}: raise max_length or collect with more max_new_tokens."
        )
    if len(kept) < len(dataset):
        logger.warning(
            "%d of %d %s trajectories hold no complete block within max_length=%s and are skipped.",
            len(dataset) - len(kept),
            len(dataset),
            name,
            collator.max_length,
        )
    return kept


def pad_token_id(processing_class: Any, pad_token: str | None = None) -> int:
    """The id that pads batches: `pad_token` (SFTConfig's, deprecated there but honoured), else the tokenizer's pad
    token, else its EOS token, the rule SFTTrainer applies to its own collator."""
    tokenizer: PreTrainedTokenizerBase = getattr(processing_class, "tokenizer", processing_class)
    token = pad_token or tokenizer.pad_token or tokenizer.eos_token
    if token is None or token not in tokenizer.get_vocab():
        raise ValueError(
            f"cannot pad batches: the pad token {token!r} is not in the vocabulary of {type(tokenizer).__name__}; "
            "set tokenizer.pad_token (or eos_token) to a token it knows."
        )
    return tokenizer.convert_tokens_to_ids(token)
