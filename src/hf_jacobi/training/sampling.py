"""The order the trainer reads its rows in, when batches are grouped by length.

Why: a batch is right-padded to its longest packed sequence, and Jacobi Forcing's rows vary a lot in length (a prompt
and two copies of every block of an answer of a few to hundreds of tokens, mixed with anchor texts of any length), so
randomly drawn batches spend much of every forward on padding. transformers' `group_by_length` sorts mega-batches by
a length column; the packed length is not a column of a trajectory table, so `with_packed_lengths` adds it. Its
`LengthGroupedSampler` draws its order from the global random state when an epoch's iterator is created, and a run
resumed in a later epoch has not advanced that state through the epochs before: it skips the trained batches of
another order, reading some rows twice and others never (tests/test_length_grouping.py). The sampler here draws the
order from (seed, epoch), as accelerate's seedable sampler does for random order, so a resumed run skips exactly the
batches it trained.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import datasets
import pyarrow.compute as pc
import torch
from torch.utils.data import Sampler
from transformers.trainer_pt_utils import get_length_grouped_indices

from ..decoding.drafts import stable_seed
from .collator import ANCHOR_TEXT, JacobiForcingCollator

LENGTH_STRATEGIES = ("group_by_length", "batch_rebalance")
"""`train_sampling_strategy` values that read a length per row (`length_column_name`)."""


def packed_lengths(dataset: datasets.Dataset, collator: JacobiForcingCollator) -> list[int]:
    """The length of every row as the collator packs it (`JacobiForcingCollator.packed_length`), read from the list
    lengths without the states."""
    table = dataset.with_format("arrow")[:]
    prompts = pc.list_value_length(table.column("prompt_ids")).to_pylist()
    blocks = pc.list_value_length(table.column("fixed_points")).to_pylist()
    sizes = table.column("block_size").to_pylist()
    anchor = table.column(ANCHOR_TEXT).to_pylist() if ANCHOR_TEXT in table.column_names else [False] * len(prompts)
    rows = zip(prompts, sizes, blocks, anchor, strict=True)
    return [collator.packed_length(prompt, n, count, is_text) for prompt, n, count, is_text in rows]


def with_packed_lengths(dataset: datasets.Dataset, collator: JacobiForcingCollator, column: str) -> datasets.Dataset:
    """`dataset` with its packed lengths in `column` (replacing a column of that name: only the packed length says
    how a batch pads)."""
    if column in dataset.column_names:
        dataset = dataset.remove_columns(column)
    return dataset.add_column(column, packed_lengths(dataset, collator))


class LengthGroupedEpochSampler(Sampler[int]):
    """transformers' length-grouped order (shuffled, then sorted by length within mega-batches of up to 50 batches, the
    longest batch first so that a run fails on memory at once), drawn from (seed, epoch): the trainer calls `set_epoch`
    before each epoch, and the same seed gives the same order in every process and after a resume."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(stable_seed(self.seed, self.epoch, "length-grouped order"))
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))
