"""Held-out tokens per forward logged during training, against tokens seen."""

from __future__ import annotations

import datasets
import pytest

from hf_jacobi import JacobiForcingConfig, JacobiForcingTrainer, collect_trajectories, load_trajectories
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.loading import encode_chat
from hf_jacobi.training.evaluation import greedy_answers
from hf_jacobi.training.heldout import PREFIX, HeldOutSpeedCallback, heldout_curve
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


def test_the_curve_is_logged_at_the_start_every_k_steps_and_at_the_end(tmp_path):
    tokenizer = tiny_tokenizer()
    collect_trajectories(
        fresh_tiny_model("llama"), tokenizer, _prompts(4, 0), tmp_path / "t", block_size=4, max_new_tokens=12,
        batch_size=2, progress=False,
    )  # fmt: skip
    heldout = [encode_chat(tokenizer, m) for m in _prompts(3, 50)["messages"]]
    callback = HeldOutSpeedCallback(
        heldout, {"plain": JacobiConfig(block_size=4)}, every_steps=2, max_new_tokens=10, batch_size=2
    )
    args = JacobiForcingConfig(
        output_dir=str(tmp_path / "o"), max_steps=5, per_device_train_batch_size=2, learning_rate=1e-3,
        use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[], save_strategy="no",
        include_num_input_tokens_seen=True, noise_window=4,
    )  # fmt: skip
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"), args=args, train_dataset=load_trajectories(tmp_path / "t"),
        processing_class=tokenizer, callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    curve = heldout_curve(trainer.state.log_history)
    assert [entry["step"] for entry in curve] == [0, 2, 4, 5]
    assert curve[0]["num_input_tokens_seen"] == 0 < curve[-1]["num_input_tokens_seen"]
    assert all(entry[f"{PREFIX}/plain_tokens_per_forward"] >= 1 for entry in curve)
    assert all(0 < entry[f"{PREFIX}/distinct_3grams"] <= 1 for entry in curve)
    # the reference answers are the untrained model's greedy answers, taken at step 0
    assert callback.reference_answers == greedy_answers(fresh_tiny_model("llama"), heldout, 10, batch_size=1)
    assert all(entry[f"{PREFIX}/reference_nll"] > 0 for entry in curve)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="every_steps must be an integer >= 1, got 0"):
        HeldOutSpeedCallback([[1, 2]], {"plain": JacobiConfig()}, every_steps=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="at least one prompt"):
        HeldOutSpeedCallback([], {"plain": JacobiConfig()}, every_steps=1, max_new_tokens=4)
