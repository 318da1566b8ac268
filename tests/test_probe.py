"""The acceptance probe (`hf_jacobi.training.probe`) on tiny random models of several families: on a model's own
block-by-block trajectories in float32 it must reproduce, exactly, the iterations the collection took; on another
model's trajectories it measures that model's states without pretending they are its own."""

from __future__ import annotations

import pytest

from hf_jacobi import collect_trajectories, load_trajectories, probe_acceptance
from hf_jacobi.data.trajectories import first_mismatch
from hf_jacobi.training.probe import ProbeResult
from test_training import tiny_prompts
from tiny_models import fresh_tiny_model, tiny_model, tiny_tokenizer


def _collect(model, folder, method: str = "parallel", block_size: int = 4):
    collect_trajectories(
        model,
        tiny_tokenizer(),
        tiny_prompts(6),
        folder,
        block_size=block_size,
        max_new_tokens=24,
        batch_size=3,
        method=method,
        progress=False,
    )
    return load_trajectories(folder)


def _iterations(rows) -> tuple[int, int]:
    """What block-by-block Jacobi decoding took on these rows: tokens committed after each block's initial draft, and
    iterations (states before the fixed point)."""
    tokens = iterations = 0
    for row in rows:
        for states, fixed in zip(row["states"], row["fixed_points"], strict=True):
            tokens += len(fixed) - first_mismatch(list(states[0]), list(fixed))
            iterations += len(states) - 1
    return tokens, iterations


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma"])
def test_the_probe_reproduces_a_models_own_iterations_exactly(family: str, tmp_path) -> None:
    model = tiny_model(family)
    rows = _collect(model, tmp_path / "own", block_size=5)
    result = probe_acceptance(model, rows, max_states_per_forward=3)  # several forwards per trajectory
    tokens, iterations = _iterations(rows)
    assert result.states == iterations and result.committed == tokens
    assert result.agreement == 1.0 and result.trajectories == len(rows)
    assert result.tokens_per_iteration == pytest.approx(tokens / iterations)
    assert (
        len(result.rates) == 3 and all
    )  # depths 0-2: a block's first token is never wrong(0.0 <= rate <= 1.0 for rate in result.rates)
    assert model.training is False


def test_the_probe_of_another_models_states_says_whose_answers_they_are(tmp_path) -> None:
    collector = tiny_model("llama", seed=0)
    other = fresh_tiny_model("llama", seed=1)
    other.train()
    rows = _collect(collector, tmp_path / "theirs")
    result = probe_acceptance(other, rows, limit=3, max_states_per_block=2)
    assert result.trajectories == 3 and result.agreement < 1.0
    assert result.states <= 2 * sum(len(row["states"]) for row in rows.select(range(3)))
    assert other.training is True  # left in the mode it was in
    metrics = result.metrics("eval_probe", depths=2)
    assert set(metrics) == {"eval_probe/tokens_per_iteration", "eval_probe/agreement", "eval_probe/depth0_rate",
                            "eval_probe/depth1_rate"}  # fmt: skip


def test_probe_counts_add_up_over_parts() -> None:
    first, second = ProbeResult(), ProbeResult()
    first.add_state([True, True, False])  # commits 3
    second.add_state([False])  # commits 1
    second.add_state([True, True, True, True])  # commits 5
    merged = first.merge(second)
    assert merged.states == 3 and merged.committed == 9 and merged.tokens_per_iteration == 3.0
    assert merged.depth_counts == [3, 2, 2, 1] and merged.rates == [2 / 3, 1.0, 0.5, 1.0]


def test_probe_refuses_bad_settings(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_states_per_forward must be an integer >= 1, got 0"):
        probe_acceptance(tiny_model("llama"), [], max_states_per_forward=0)
    with pytest.raises(ValueError, match="needs at least one trajectory"):
        probe_acceptance(tiny_model("llama"), [])
