"""The parallel collection method: every block's Jacobi iterations at once from the greedy answers, exact in float32.

What must hold for training to learn the paper's states: each row's answer is greedy decoding's, each block starts
from its initial draft (first token right, the rest drawn from the prompt) and ends at its fixed point, every state
keeps the converged prefix of the one before and converges at least one more token, and in float32 no batched argmax
disagrees with greedy's (`check_first_wrong`), so that taking the first wrong token from the answer instead (the
default, one query fewer per block and iteration) gives the same states. Several families (sliding windows, a dict of masks), left padding, EOS and rows without a
complete block; the resumed form (answers known, one prefill) gives the same states.
"""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_jacobi import collect_trajectories, enable_jacobi, load_trajectories
from hf_jacobi.data.block_iterations import block_trajectories
from hf_jacobi.data.trajectories import first_mismatch
from test_training import tiny_prompts
from tiny_models import EOS, PAD, random_prompts, tiny_model, tiny_tokenizer


def _prompt_lists(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]


def _greedy(model, ids, mask, max_new_tokens: int) -> list[list[int]]:
    out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False)
    answers = []
    for row in out[:, ids.shape[1] :].tolist():
        answers.append(row[: row.index(EOS) + 1] if EOS in row else row)
    return answers


def _check_block(states: list[list[int]], fixed: list[int], first_token: int) -> None:
    assert states[0][0] == first_token  # the first token of a block is known: greedy's next token
    assert states[-1] == fixed
    mismatches = [first_mismatch(state, fixed) for state in states]
    assert all(later > earlier for earlier, later in itertools.pairwise(mismatches))  # each step converges more
    for earlier, later in itertools.pairwise(states):
        kept = first_mismatch(earlier, fixed)
        assert later[:kept] == earlier[:kept]  # the converged prefix stays


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "gemma2"])
def test_parallel_states_reach_greedy_fixed_points_without_disagreement(family):
    model = enable_jacobi(tiny_model(family))
    ids, mask = random_prompts(4, 9, seed=3)
    n, budget = 5, 23
    common = dict(max_new_tokens=budget, pad_id=PAD, eos_ids={EOS}, max_query_tokens=16)
    found = block_trajectories(model, _prompt_lists(ids, mask), n, **common)
    checked = block_trajectories(model, _prompt_lists(ids, mask), n, check_first_wrong=True, **common)
    assert checked.disagreements == 0 and found.disagreements is None
    assert checked.states == found.states and checked.forwards >= found.forwards
    # the check queries each unconverged block's last converged token once more per iteration
    iterations = sum(len(block) - 1 for states in found.states for block in states)
    assert checked.query_tokens == found.query_tokens + iterations
    assert found.answers == _greedy(model, ids, mask, budget)
    for answer, states, passes in zip(found.answers, found.states, found.forward_passes, strict=True):
        assert len(states) == len(answer) // n
        for j, block in enumerate(states):
            _check_block(block, answer[j * n : (j + 1) * n], answer[j * n])
        assert passes == sum(len(block) - 1 for block in states) + len(answer) % n


def test_known_answers_give_the_states_of_generated_ones():
    model = enable_jacobi(tiny_model("llama"))
    prompts = _prompt_lists(*random_prompts(3, 8, seed=5))
    generated = block_trajectories(model, prompts, 4, max_new_tokens=18, pad_id=PAD, eos_ids={EOS}, draft_seed=2)
    known = block_trajectories(
        model, prompts, 4, max_new_tokens=18, pad_id=PAD, eos_ids={EOS}, draft_seed=2, answers=generated.answers
    )
    assert known.states == generated.states and known.answers == generated.answers


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(1, 4),
    block_size=st.integers(2, 7),
    budget=st.integers(1, 20),
    group=st.sampled_from([1, 8, 4096]),
)
def test_parallel_collection_is_exact_in_float32(seed, batch, block_size, budget, group):
    model = enable_jacobi(tiny_model("llama"))
    ids, mask = random_prompts(batch, 7, seed=seed)
    common = dict(max_new_tokens=budget, pad_id=PAD, eos_ids={EOS}, draft_seed=seed, max_query_tokens=group)
    found = block_trajectories(model, _prompt_lists(ids, mask), block_size, **common)
    checked = block_trajectories(model, _prompt_lists(ids, mask), block_size, check_first_wrong=True, **common)
    assert checked.disagreements == 0 and checked.states == found.states
    assert found.answers == _greedy(model, ids, mask, budget)
    for answer, states in zip(found.answers, found.states, strict=True):
        assert [block[-1] for block in states] == [
            answer[j : j + block_size] for j in range(0, len(answer) // block_size * block_size, block_size)
        ]


def test_both_methods_collect_the_same_answers_and_fixed_points(tmp_path):
    prompts = tiny_prompts(5)
    common = dict(block_size=4, max_new_tokens=14, batch_size=3, progress=False)
    rows = {}
    for method in ("sequential", "parallel"):
        folder = collect_trajectories(
            tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / method, method=method, **common
        )
        rows[method] = load_trajectories(folder).to_list()
    for sequential, parallel in zip(rows["sequential"], rows["parallel"], strict=True):
        for column in ("prompt_id", "prompt_ids", "completion_ids", "fixed_points", "block_size"):
            assert sequential[column] == parallel[column]
        for states, fixed in zip(parallel["states"], parallel["fixed_points"], strict=True):
            _check_block(states, fixed, fixed[0])
    assert json.loads((tmp_path / "parallel" / "collection.json").read_text())["method"] == "parallel"
    assert "method" not in json.loads((tmp_path / "sequential" / "collection.json").read_text())


def test_a_folder_takes_one_method_only(tmp_path):
    prompts = tiny_prompts(2)
    common = dict(block_size=4, max_new_tokens=8, progress=False)
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / "p", method="parallel", **common)
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / "s", **common)
    with pytest.raises(ValueError, match="method: 'parallel' on disk, 'sequential' now"):
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / "p", **common)
    with pytest.raises(ValueError, match="method: 'sequential' on disk, 'parallel' now"):
        collect_trajectories(
            tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / "s", method="parallel", **common
        )
    with pytest.raises(ValueError, match=r"method must be one of \['sequential', 'parallel'\], got 'fast'"):
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, tmp_path / "x", method="fast", **common)


def test_hf_jacobi_collect_takes_the_method(tmp_path, capsys):
    from hf_jacobi import cli

    checkpoint = tmp_path / "tiny"
    tiny_model("llama").save_pretrained(checkpoint)
    tiny_tokenizer().save_pretrained(checkpoint)
    argv = ["collect", "--model_name_or_path", str(checkpoint), "--prompts", "stdlib", "--num_prompts", "2"]
    argv += ["--max_new_tokens", "6", "--block_size", "2", "--batch_size", "2", "--output_dir", str(tmp_path / "t")]
    assert cli.main([*argv, "--method", "parallel"]) == 0
    assert json.loads((tmp_path / "t" / "collection.json").read_text())["method"] == "parallel"
    assert len(load_trajectories(tmp_path / "t")) == 2
    with pytest.raises(SystemExit):
        cli.main([*argv, "--method", "fast"])
    assert (
        "argument --method: invalid choice: 'fast' (choose from 'sequential', 'parallel')" in capsys.readouterr().err
    )


def test_iteration_groups_gather_rows_of_like_block_counts_and_prompt_lengths():
    from hf_jacobi.data.block_iterations import _groups

    counts = [2, 2, 2, 2, 1, 0, 2]
    lengths = [90, 10, 50, 11, 300, 5, 49]
    # 3 queries a block (n = 4): two rows padded to 2 blocks fill a forward of 12 queries; the row without a block
    # iterates nothing, and rows of 2 blocks pair by prompt length (10 with 11, 49 with 50), not by index
    assert _groups(counts, lengths, 4, 12) == [[4, 1], [3, 6], [2, 0]]
