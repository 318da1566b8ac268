"""The overfit check that can fail: trained hard on a few prompts' trajectories, with every block noised and several
drafts per prompt, a model must learn to jump from noisy states to the fixed point, which the acceptance probe sees on
the training states and plain Jacobi decoding turns into tokens per forward on the same prompts. A loss that teaches
the wrong target, a mask that lets a noisy token see its answer or a collator that never noises some blocks would
each stop one of the two figures short."""

from __future__ import annotations

import datasets
import torch

from hf_jacobi import JacobiForcingTrainer, collect_trajectories, load_trajectories, probe_acceptance
from hf_jacobi.measurement import decode
from test_training import config, tiny_prompts
from tiny_models import fresh_tiny_model, tiny_tokenizer

BLOCK = 8


def _drafts(model, prompts: datasets.Dataset, folder, seeds: int) -> datasets.Dataset:
    """Each prompt's trajectories from `seeds` different initial drafts, one row each (ids made unique per draft)."""
    parts = []
    for seed in range(seeds):
        collect_trajectories(model, tiny_tokenizer(), prompts, folder / f"seed{seed}", block_size=BLOCK,
                             max_new_tokens=24, batch_size=4, draft_seed=seed, method="parallel", progress=False)  # fmt: skip
        rows = load_trajectories(folder / f"seed{seed}")
        parts.append(rows.map(lambda row, s=seed: {"prompt_id": f"{row['prompt_id']}#draft{s}"}))
    return datasets.concatenate_datasets(parts)


def _plain_tokens_per_forward(model, rows: datasets.Dataset) -> float:
    """Plain Jacobi on the prompts the trajectories answer, as they were encoded for collection."""
    tokens = forwards = 0
    for ids in {tuple(ids): None for ids in rows["prompt_ids"]}:
        inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        run = decode(model, inputs, 24, _plain(), eos_ids={2})
        tokens, forwards = tokens + run.new_tokens[0], forwards + run.forwards[0]
    return tokens / forwards


def _plain():
    from hf_jacobi import JacobiConfig

    return JacobiConfig(block_size=BLOCK, greedy_devices=())


def test_trained_hard_on_few_trajectories_a_model_accepts_many_tokens_per_forward(tmp_path) -> None:
    model = fresh_tiny_model("llama")
    prompts = tiny_prompts(4)
    rows = _drafts(model, prompts, tmp_path, seeds=3)
    before = probe_acceptance(model, rows)
    speed_before = _plain_tokens_per_forward(model, rows)
    args = config(tmp_path / "run", noise_schedule="random", learning_rate=3e-3, max_steps=600,
                  per_device_train_batch_size=4, base_kl_weight=0.0, logging_steps=50)  # fmt: skip
    JacobiForcingTrainer(model, args=args, train_dataset=rows, processing_class=tiny_tokenizer()).train()
    after = probe_acceptance(model, rows)
    speed_after = _plain_tokens_per_forward(model, rows)
    assert before.rates[0] < 0.3 and after.rates[0] >= 0.8, (before.rates, after.rates)
    assert after.agreement >= 0.95  # the AR loss keeps the trained answers the model's greedy answers
    assert speed_after >= 2.5 > 1.5 > speed_before, (speed_before, speed_after)
    # the model's own states predict its decoding only from drafts it was not trained on: the initial drafts of a
    # trained seed are memorised, and the probe over-reads on them
    own = {seed: probe_acceptance(model, _own_states(model, prompts, tmp_path, seed)).tokens_per_iteration
           for seed in (0, 7)}  # fmt: skip
    assert 0.8 * speed_after <= own[7] <= 1.25 * speed_after < 1.3 * own[7] <= own[0], (speed_after, own)


def _own_states(model, prompts: datasets.Dataset, folder, seed: int) -> datasets.Dataset:
    out = collect_trajectories(model, tiny_tokenizer(), prompts, folder / f"own{seed}", block_size=BLOCK,
                               max_new_tokens=24, batch_size=4, draft_seed=seed, method="parallel", progress=False)  # fmt: skip
    return load_trajectories(out)
