"""Batches grouped by packed length (`train_sampling_strategy="group_by_length"`): the lengths are the collator's,
the batches pad less than random ones, every row is read once an epoch, and a run resumed mid-epoch reads the same
batches as an uninterrupted one."""

from __future__ import annotations

import datasets
import pytest
import torch

from hf_jacobi import JacobiForcingCollator, JacobiForcingTrainer
from hf_jacobi.training.dataset import with_anchor_texts
from hf_jacobi.training.sampling import LengthGroupedEpochSampler, packed_lengths, with_packed_lengths
from test_training import assert_resume_matches_uninterrupted, config
from tiny_models import PAD, fresh_tiny_model, tiny_tokenizer


def varied_texts(count: int = 12) -> datasets.Dataset:
    """Anchor texts of lengths 3 to 60, in an order unrelated to their length."""
    gen = torch.Generator().manual_seed(5)
    lengths = [3 + (i * 37) % 58 for i in range(count)]
    texts = [torch.randint(3, 120, (n,), generator=gen).tolist() for n in lengths]
    return datasets.Dataset.from_dict({"text_id": [f"v{i}" for i in range(count)], "input_ids": texts})


@pytest.mark.parametrize("max_length", [None, 12, 40])
def test_packed_lengths_are_what_the_collator_packs(trajectories, max_length):
    """Trajectories (blocks cut at max_length) and anchor texts (cut at max_length) alike."""
    collator = JacobiForcingCollator(pad_token_id=PAD, noise_window=4, max_length=max_length)
    rows = with_anchor_texts(trajectories, varied_texts())
    if max_length is not None:  # rows with no block that fits are dropped before training; keep the ones that fit
        rows = rows.filter(lambda r: r["anchor_text"] or collator.blocks_that_fit(len(r["prompt_ids"]), 4, 1) > 0)
    expected = [len(collator.pack(row)) for row in rows]
    assert packed_lengths(rows, collator) == expected
    assert len(set(expected)) > 3  # the rows differ: a constant would not test the rule
    added = with_packed_lengths(rows.add_column("length", [0] * len(rows)), collator, "length")
    assert added["length"] == expected  # a column of that name is replaced


def _trainer(tmp_path, trajectories, strategy: str, **overrides) -> JacobiForcingTrainer:
    return JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(tmp_path, train_sampling_strategy=strategy, base_kl_weight=1.0, **overrides),
        train_dataset=trajectories,
        anchor_dataset=varied_texts(),
        processing_class=tiny_tokenizer(),
    )


def test_group_by_length_pads_less_than_random_and_reads_every_row_once(tmp_path, trajectories):
    grouped = _trainer(tmp_path / "grouped", trajectories, "group_by_length")
    sampler = grouped._get_train_sampler()
    assert isinstance(sampler, LengthGroupedEpochSampler)
    lengths = grouped.train_dataset["length"]
    batch = grouped.args.train_batch_size

    def padded(order: list[int]) -> int:
        chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
        return sum(max(lengths[i] for i in chunk) * len(chunk) for chunk in chunks)

    orders = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
        assert sorted(orders[-1]) == list(range(len(lengths)))  # every row once
    assert orders[0] != orders[1]  # a fresh order each epoch
    sampler.set_epoch(0)
    assert list(sampler) == orders[0]  # and the same order for the same epoch
    shuffled = _trainer(tmp_path / "random", trajectories, "random")._get_train_sampler()
    random_order = list(shuffled)
    assert padded(orders[0]) < padded(random_order)
    # what the dataloader collates follows the sampler: the first batch is the longest, as transformers orders them
    loader = grouped.get_train_dataloader()
    first = next(iter(loader))
    assert first["input_ids"].shape[1] == max(lengths)


def test_a_run_resumed_mid_epoch_reads_the_batches_an_uninterrupted_run_reads(tmp_path, trajectories):
    """16 rows, batch 2: 8 steps an epoch, the break at step 10, in the second epoch (transformers' own sampler draws
    that epoch's order from the global random state, which the resumed run has not advanced through the first)."""
    settings = dict(max_steps=12, save_strategy="steps", save_steps=10, noise_schedule="random")

    def make(folder):
        return _trainer(folder, trajectories, "group_by_length", **settings)

    assert_resume_matches_uninterrupted(make, tmp_path, break_at=10, compared=2)


def test_evaluation_reads_length_grouped_batches_too(tmp_path, trajectories):
    """transformers groups evaluation batches by the same column; without it, it would look for `input_ids`."""
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(tmp_path, train_sampling_strategy="group_by_length", per_device_eval_batch_size=2),
        train_dataset=trajectories,
        eval_dataset={"held": trajectories},
        processing_class=tiny_tokenizer(),
    )
    assert trainer.evaluate()["eval_held_loss"] > 0
    assert trainer.eval_dataset["held"]["length"] == packed_lengths(trajectories, trainer.data_collator)
