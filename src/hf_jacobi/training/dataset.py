"""The trainer's side of the trajectory data: which rows it can train on, the collator that packs them and the id that
pads them, and the epoch the collator draws noise for."""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any

import datasets
from transformers import PreTrainedTokenizerBase, TrainerCallback

from ..data.trajectory_schema import TRAINED_COLUMNS, check_not_empty, check_trajectory_table
from ..measurement import collapsed
from .collator import ANCHOR_TEXT, JacobiForcingCollator
from .sampling import with_packed_lengths

if TYPE_CHECKING:
    from .config import JacobiForcingConfig

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
    check_trajectory_table(dataset.data.table, source, columns=TRAINED_COLUMNS, allow_extra=True)

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


def without_looping_answers(dataset: datasets.Dataset, name: str) -> datasets.Dataset:
    """The trajectories whose answer (`completion_ids`, the fixed point) does not end in a loop, by the test
    `hf-jacobi quality` counts loops with (`measurement.collapsed`); the count left out is logged."""
    kept = dataset.filter(lambda example: not collapsed(example["completion_ids"]), desc=f"dropping looping {name}")
    if len(kept) == 0:
        raise ValueError(
            f"every one of the {len(dataset)} {name} trajectories has an answer that ends in a loop: nothing is left "
            "to train on with drop_looping_trajectories=True."
        )
    logger.warning(
        "%d of %d %s trajectories end in a loop and are left out (drop_looping_trajectories).",
        len(dataset) - len(kept),
        len(dataset),
        name,
    )
    return kept


def with_anchor_texts(trajectories: datasets.Dataset, anchor_texts: datasets.Dataset) -> datasets.Dataset:
    """The trajectories followed by the anchor texts (`text_id`, `input_ids`; see `data.anchor_texts`), as rows of
    one table that the Trainer's sampler shuffles together; `ANCHOR_TEXT` marks the texts, which the collator packs
    with no block (`pack_anchor_text`). Only the columns the collator reads are kept."""
    missing = [c for c in ("text_id", "input_ids") if c not in anchor_texts.column_names]
    if missing:
        raise ValueError(
            f"the anchor texts lack the column(s) {missing} (columns: {anchor_texts.column_names}): encode them with "
            "hf_jacobi.data.anchor_texts.encode_anchor_texts"
        )
    check_not_empty(len(anchor_texts), "the anchor text dataset")
    short = [t for t, ids in zip(anchor_texts["text_id"], anchor_texts["input_ids"], strict=True) if len(ids) < 2]
    if short:
        raise ValueError(f"{len(short)} anchor texts hold fewer than 2 tokens (nothing to predict), e.g. {short[0]!r}")
    kept = trajectories.select_columns(list(TRAINED_COLUMNS))
    kept = kept.add_column(ANCHOR_TEXT, [False] * len(kept))
    n = len(anchor_texts)
    texts = datasets.Dataset.from_dict(
        {
            "prompt_id": [f"anchor/{text_id}" for text_id in anchor_texts["text_id"]],
            "prompt_ids": anchor_texts["input_ids"],
            "completion_ids": [[]] * n,
            "block_size": [kept[0]["block_size"]] * n,
            "states": [[]] * n,
            "fixed_points": [[]] * n,
            ANCHOR_TEXT: [True] * n,
        },
        features=kept.features,
    )
    return datasets.concatenate_datasets([kept, texts])


def training_datasets(
    train_dataset: datasets.Dataset,
    eval_dataset: datasets.Dataset | dict[str, datasets.Dataset] | None,
    anchor_dataset: datasets.Dataset | None,
    collator: JacobiForcingCollator,
    base_kl_weight: float,
    length_column: str | None = None,
    drop_looping: bool = False,
) -> tuple[datasets.Dataset, datasets.Dataset | dict[str, datasets.Dataset] | None, int]:
    """The train and eval rows the trainer reads (`usable_trajectories`; the anchor texts mixed into the train rows),
    and the block size most training trajectories have (the trained model's Jacobi default). With `length_column`,
    every row carries its packed length there, for a sampler that groups batches by length; with `drop_looping`, the
    train rows leave out the trajectories whose answer ends in a loop (`without_looping_answers`)."""
    train_dataset = usable_trajectories(train_dataset, collator, "train")
    if drop_looping:
        train_dataset = without_looping_answers(train_dataset, "train")
    trained_block_size = collections.Counter(train_dataset["block_size"]).most_common(1)[0][0]
    if anchor_dataset is not None:
        if not base_kl_weight > 0:
            raise ValueError(
                "anchor_dataset is read only by the KL anchor, which is off (base_kl_weight=0): set "
                f"base_kl_weight > 0 or leave the {len(anchor_dataset)} anchor texts out."
            )
        train_dataset = with_anchor_texts(train_dataset, anchor_dataset)

    def lengths(dataset: datasets.Dataset) -> datasets.Dataset:
        return with_packed_lengths(dataset, collator, length_column) if length_column is not None else dataset

    if isinstance(eval_dataset, dict):
        eval_dataset = {k: lengths(usable_trajectories(v, collator, k)) for k, v in eval_dataset.items()}
    elif eval_dataset is not None:
        eval_dataset = lengths(usable_trajectories(eval_dataset, collator, "eval"))
    return lengths(train_dataset), eval_dataset, trained_block_size


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


def training_collator(data_collator: Any, args: JacobiForcingConfig, processing_class: Any) -> JacobiForcingCollator:
    """The trainer's collator: the one given, which must be a `JacobiForcingCollator` (the losses index the packed
    layout it builds), or, when None is given, the one `args` describe, padding with `pad_token_id`."""
    if data_collator is None:
        return JacobiForcingCollator.from_config(args, pad_token_id(processing_class, args.pad_token))
    if not isinstance(data_collator, JacobiForcingCollator):
        raise TypeError(
            f"data_collator must be a JacobiForcingCollator (the losses index the packed layout it builds), got "
            f"{type(data_collator).__name__}; pass None to build one from args."
        )
    return data_collator
