"""Held-out tokens per forward logged during training, against tokens seen."""

from __future__ import annotations

import json
import re

import datasets
import pytest

from hf_jacobi import JacobiForcingConfig, JacobiForcingTrainer, collect_trajectories, load_trajectories
from hf_jacobi.data.chat import encode_chat
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.training.evaluation import greedy_answers
from hf_jacobi.training.heldout import PREFIX, REFERENCE_FILE, HeldOutSpeedCallback, heldout_curve
from tiny_models import fresh_tiny_model, tiny_tokenizer


def _prompts(count: int, offset: int) -> datasets.Dataset:
    rows = [
        {
            "prompt_id": f"p{i}",
            "messages": [{"role": "user", "content": " ".join(f"t{(i * 11 + j * 5) % 120 + 3}" for j in range(5))}],
        }
        for i in range(offset, offset + count)
    ]
    return datasets.Dataset.from_list(rows)


def _trajectories_and_heldout(tmp_path):
    """The tiny model's trajectories of 4 prompts in tmp_path/t; its tokenizer and 3 other prompts, chat-encoded."""
    tokenizer = tiny_tokenizer()
    collect_trajectories(
        fresh_tiny_model("llama"), tokenizer, _prompts(4, 0), tmp_path / "t", block_size=4, max_new_tokens=12,
        batch_size=2, progress=False,
    )  # fmt: skip
    return tokenizer, _heldout()


def _heldout() -> list[list[int]]:
    """3 prompts none of the trajectories holds, chat-encoded for the tiny tokenizer."""
    return [encode_chat(tiny_tokenizer(), m) for m in _prompts(3, 50)["messages"]]


def _trainer(tmp_path, folder: str, tokenizer, callback: HeldOutSpeedCallback, **settings) -> JacobiForcingTrainer:
    """A fresh tiny llama's trainer on the trajectories in tmp_path/t, into tmp_path/folder, measured by `callback`."""
    args = JacobiForcingConfig(
        output_dir=str(tmp_path / folder), per_device_train_batch_size=2, use_cpu=True, bf16=False,
        gradient_checkpointing=False, report_to=[], noise_window=4, **settings,
    )  # fmt: skip
    return JacobiForcingTrainer(
        fresh_tiny_model("llama"), args=args, train_dataset=load_trajectories(tmp_path / "t"),
        processing_class=tokenizer, callbacks=[callback],
    )  # fmt: skip


def test_the_curve_is_logged_at_the_start_every_k_steps_and_at_the_end(tmp_path):
    tokenizer, heldout = _trajectories_and_heldout(tmp_path)
    callback = HeldOutSpeedCallback(
        heldout, {"plain": JacobiConfig(block_size=4)}, every_steps=2, max_new_tokens=10, batch_size=2
    )
    trainer = _trainer(tmp_path, "o", tokenizer, callback, max_steps=5, learning_rate=1e-3, save_strategy="no",
                       include_num_input_tokens_seen=True)  # fmt: skip
    trainer.train()
    curve = heldout_curve(trainer.state.log_history)
    assert [entry["step"] for entry in curve] == [0, 2, 4, 5]  # the end (step 5) too
    assert curve[0]["num_input_tokens_seen"] == 0 < curve[-1]["num_input_tokens_seen"]
    assert all(entry[f"{PREFIX}/plain_tokens_per_forward"] >= 1 for entry in curve)
    assert all(0 < entry[f"{PREFIX}/distinct_3grams"] <= 1 for entry in curve)
    # the reference answers are the untrained model's greedy answers, taken at step 0
    assert callback.reference_answers == greedy_answers(fresh_tiny_model("llama"), heldout, 10, batch_size=1)
    assert all(entry[f"{PREFIX}/reference_nll"] > 0 for entry in curve)


def test_a_run_ending_on_a_measured_step_is_measured_once_and_its_state_saved_with_the_final_point(tmp_path):
    from hf_jacobi.cli import main

    tokenizer = tiny_tokenizer()
    model = fresh_tiny_model("llama")
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    collect_trajectories(
        model, tokenizer, _prompts(4, 0), tmp_path / "t", block_size=4, max_new_tokens=12, batch_size=2, progress=False
    )
    datasets.Dataset.from_list(_prompts(3, 50).to_list()).to_json(tmp_path / "heldout.jsonl")
    argv = [
        "train", "--model_name_or_path", str(tmp_path / "model"), "--trajectories", str(tmp_path / "t"),
        "--output_dir", str(tmp_path / "o"), "--max_steps", "4", "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-3", "--use_cpu", "true", "--bf16", "false", "--report_to", "none",
        "--save_strategy", "steps", "--save_steps", "3", "--noise_window", "4", "--heldout_block_size", "4",
        "--heldout_prompts", str(tmp_path / "heldout.jsonl"), "--heldout_every_steps", "2",
        "--heldout_max_new_tokens", "6", "--heldout_settings", "plain",
    ]  # fmt: skip
    assert main(argv) == 0
    # the run folder's own state holds the whole curve, the end included; the last checkpoint (step 3) stops at 2
    curve = heldout_curve(json.loads((tmp_path / "o" / "trainer_state.json").read_text())["log_history"])
    assert [entry["step"] for entry in curve] == [0, 2, 4]  # step 4 ends the run and is measured once
    checkpoint = json.loads((tmp_path / "o" / "checkpoint-3" / "trainer_state.json").read_text())
    assert [entry["step"] for entry in heldout_curve(checkpoint["log_history"])] == [0, 2]


def _resumable_run(
    tmp_path, folder: str, save_steps: int, max_steps: int, resume: bool
) -> tuple[HeldOutSpeedCallback, list[int]]:
    """A tiny run into tmp_path/folder measured every 2 steps and saved every `save_steps`, or its resume from the
    checkpoint at `save_steps`: the callback and the steps of the held-out curve the trainer's state holds."""
    tokenizer, heldout = tiny_tokenizer(), _heldout()
    callback = HeldOutSpeedCallback(heldout, {"plain": JacobiConfig(block_size=4)}, every_steps=2, max_new_tokens=8)
    trainer = _trainer(tmp_path, folder, tokenizer, callback, max_steps=max_steps, learning_rate=5e-2,
                       save_strategy="steps", save_steps=save_steps)  # fmt: skip
    checkpoint = tmp_path / folder / f"checkpoint-{save_steps}"
    trainer.train(resume_from_checkpoint=str(checkpoint) if resume else None)
    return callback, [entry["step"] for entry in heldout_curve(trainer.state.log_history)]


def test_a_resumed_run_scores_the_starting_models_answers_not_its_own(tmp_path):
    _, heldout = _trajectories_and_heldout(tmp_path)
    untrained = greedy_answers(fresh_tiny_model("llama"), heldout, 8, batch_size=1)
    assert _resumable_run(tmp_path, "o", 3, 3, resume=False)[0].reference_answers == untrained
    # checkpoint-3 was saved after step 3, which is not measured: the resume measures it once, at its start
    assert [entry["step"] for entry in _curve(tmp_path / "o" / "checkpoint-3")] == [0, 2]
    # the resumed run measures at step 3 first: the model there is trained, its answers are not the base's
    callback, steps = _resumable_run(tmp_path, "o", 3, 5, resume=True)
    assert callback.reference_answers == untrained and steps == [0, 2, 3, 4, 5]
    # a resume that finds no saved reference warns and leaves none behind for the next resume to trust
    (tmp_path / "o" / REFERENCE_FILE).unlink()
    _resumable_run(tmp_path, "o", 3, 5, resume=True)
    assert not (tmp_path / "o" / REFERENCE_FILE).exists()


def _curve(folder) -> list[dict]:
    return heldout_curve(json.loads((folder / "trainer_state.json").read_text())["log_history"])


def test_a_run_resumed_at_a_measured_step_logs_that_step_once(tmp_path):
    _trajectories_and_heldout(tmp_path)
    _resumable_run(tmp_path, "r", 2, 2, resume=False)
    assert [entry["step"] for entry in _curve(tmp_path / "r" / "checkpoint-2")] == [0, 2]
    callback, steps = _resumable_run(tmp_path, "r", 2, 4, resume=True)
    assert steps == [0, 2, 4]  # step 2 once, not again on resume
    assert callback.reference_answers is not None  # step 4 was still scored against the saved reference


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="every_steps must be an integer >= 1, got 0"):
        HeldOutSpeedCallback([[1, 2]], {"plain": JacobiConfig()}, every_steps=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="at least one prompt"):
        HeldOutSpeedCallback([], {"plain": JacobiConfig()}, every_steps=1, max_new_tokens=4)


def test_eval_trajectories_give_the_probe_on_held_out_prompts_and_bad_ones_are_refused(tmp_path, capsys):
    from hf_jacobi.cli import main

    tokenizer = tiny_tokenizer()
    model = fresh_tiny_model("llama")
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    settings = dict(block_size=4, max_new_tokens=12, batch_size=2, progress=False)
    collect_trajectories(model, tokenizer, _prompts(4, 0), tmp_path / "t", **settings)
    collect_trajectories(model, tokenizer, _prompts(3, 50), tmp_path / "e", **settings)
    base = [
        "train", "--model_name_or_path", str(tmp_path / "model"), "--trajectories", str(tmp_path / "t"),
        "--max_steps", "2", "--per_device_train_batch_size", "2", "--learning_rate", "1e-3", "--use_cpu", "true",
        "--bf16", "false", "--report_to", "none", "--save_strategy", "no", "--noise_window", "4",
    ]  # fmt: skip
    evaluated = ["--eval_trajectories", str(tmp_path / "e"), "--eval_strategy", "steps", "--eval_steps", "1"]
    assert main([*base, "--output_dir", str(tmp_path / "o"), *evaluated]) == 0
    history = json.loads((tmp_path / "o" / "trainer_state.json").read_text())["log_history"]
    probed = [entry for entry in history if "eval_probe/tokens_per_iteration" in entry]
    assert [entry["step"] for entry in probed] == [1, 2]
    assert [entry["step"] for entry in history if "eval_loss" in entry] == [1, 2]
    # refused before any training: no eval schedule, an eval set that shares a prompt with training, two eval sets
    refusals = [
        (["--eval_trajectories", str(tmp_path / "e")], "set eval_strategy"),
        (
            ["--eval_trajectories", str(tmp_path / "t"), "--eval_strategy", "steps"],
            "4 prompt\\(s\\) the run also trains",
        ),
        ([*evaluated, "--eval_fraction", "0.5"], "both choose the eval set"),
        (["--eval_trajectory_prompts", "packages"], "needs eval_trajectories"),
    ]
    for flags, message in refusals:
        capsys.readouterr()
        assert main([*base, "--output_dir", str(tmp_path / "refused"), *flags]) == 1
        assert re.search(message, capsys.readouterr().err), (flags, message)
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
