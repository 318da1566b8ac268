"""`drop_looping_trajectories`: trajectories whose answer ends in a loop are left out of training (by the same test
`hf-jacobi quality` counts loops with), the rest and the evaluation sets kept whole."""

from __future__ import annotations

import logging

import datasets
import pytest

from hf_jacobi import JacobiForcingTrainer
from hf_jacobi.measurement import COLLAPSE_WINDOW, collapsed
from test_training import config
from test_training_data import trajectory
from tiny_models import fresh_tiny_model, tiny_tokenizer

LOOP = [5, 6, 7] * (COLLAPSE_WINDOW // 3 + 2)
"""An answer tail that ends in a loop: three tokens over and over, longer than the window the test reads."""
VARIED = [8 + i % 50 for i in range(COLLAPSE_WINDOW + 10)]
"""A tail as long, of varied tokens: runs to the budget without looping."""


def _rows(looping: list[bool]) -> datasets.Dataset:
    rows = []
    for i, loops in enumerate(looping):
        blocks = [[10 + i, 11, 12, 13], [14, 15, 16, 17 + i]]
        rows.append(trajectory(f"p{i}", [1, 2, 3 + i], blocks, completion_tail=LOOP if loops else VARIED))
    return datasets.Dataset.from_list(rows)


def test_the_rows_are_what_they_say():
    assert collapsed(_rows([True])[0]["completion_ids"]) and not collapsed(_rows([False])[0]["completion_ids"])


def test_looping_answers_are_left_out_of_training_with_a_count_and_evaluation_keeps_them(tmp_path, caplog):
    dataset = _rows([False, True, False, True])
    with caplog.at_level(logging.WARNING, logger="hf_jacobi.training.dataset"):
        trainer = JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path, drop_looping_trajectories=True),
            train_dataset=dataset,
            eval_dataset=dataset,
            processing_class=tiny_tokenizer(),
        )
    assert (
        trainer.train_dataset["prompt_id"] == ["p0", "p2"]
        and trainer.eval_dataset["prompt_id"] == dataset["prompt_id"]
    )
    assert "2 of 4 train trajectories end in a loop and are left out" in caplog.text
    kept = JacobiForcingTrainer(
        fresh_tiny_model("llama"), args=config(tmp_path), train_dataset=dataset, processing_class=tiny_tokenizer()
    )
    assert kept.train_dataset["prompt_id"] == dataset["prompt_id"]  # off by default: nothing else is dropped


def test_a_dataset_of_loops_only_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="every one of the 2 train trajectories has an answer that ends in a loop"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path, drop_looping_trajectories=True),
            train_dataset=_rows([True, True]),
            processing_class=tiny_tokenizer(),
        )
