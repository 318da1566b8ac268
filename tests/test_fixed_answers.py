"""Collecting one model's Jacobi states on another model's answers (`collect_trajectories(..., answers=...)`): the
on-policy states of a trained model that still converge to the base's answers. Tiny random Llamas, seconds."""

from __future__ import annotations

import json

import pytest

from hf_jacobi import (
    collect_trajectories,
    collected_answers,
    collection_settings,
    load_trajectories,
    probe_acceptance,
)
from hf_jacobi.data.trajectories import first_mismatch
from test_training import tiny_prompts
from tiny_models import tiny_model, tiny_tokenizer


def _collect(model, folder, **kwargs):
    settings = dict(block_size=4, max_new_tokens=16, batch_size=2, method="parallel", progress=False)
    return collect_trajectories(model, tiny_tokenizer(), tiny_prompts(4), folder, **(settings | kwargs))


def test_a_models_states_converge_to_another_models_answers(tmp_path) -> None:
    base, other = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    base_rows = load_trajectories(_collect(base, tmp_path / "base", model_id="base"))
    folder = _collect(other, tmp_path / "other-on-base", model_id="other", answers=tmp_path / "base")
    rows = load_trajectories(folder)
    assert rows["completion_ids"] == base_rows["completion_ids"] and rows["fixed_points"] == base_rows["fixed_points"]
    assert json.loads((folder / "collection.json").read_text())["answers_of"] == "base"
    own = load_trajectories(_collect(other, tmp_path / "other-own", model_id="other"))
    assert own["completion_ids"] != base_rows["completion_ids"]  # the other model answers otherwise
    # each iteration is the other model's argmax past the forced first wrong token: the probe of that model on these
    # states reproduces their iterations exactly, while saying the answers are not its own
    probe = probe_acceptance(other, rows)
    tokens = sum(
        len(f) - first_mismatch(list(s[0]), list(f))
        for r in rows
        for s, f in zip(r["states"], r["fixed_points"], strict=True)
    )
    assert probe.committed == tokens and probe.states == sum(len(s) - 1 for r in rows for s in r["states"])
    assert probe.agreement < 1.0


def test_a_models_own_answers_as_fixed_answers_give_its_own_trajectories(tmp_path) -> None:
    model = tiny_model("llama")
    own = load_trajectories(_collect(model, tmp_path / "own", model_id="m"))
    answers = collected_answers(tmp_path / "own")
    assert answers == {r["prompt_id"]: r["completion_ids"] for r in own}
    again = load_trajectories(_collect(model, tmp_path / "again", model_id="m", answers=answers, answers_of="m"))
    assert again["states"] == own["states"] and again["completion_ids"] == own["completion_ids"]
    # the same folder as a collection without them: it records no answers_of, and a resume without answers (the prompts
    # whose answers were not kept) goes on in it, while another model's answers are refused there
    assert collection_settings(tmp_path / "again") == collection_settings(tmp_path / "own")
    assert "answers_of" not in collection_settings(tmp_path / "own")
    prompts = tiny_prompts(6)
    collect_trajectories(model, tiny_tokenizer(), prompts, tmp_path / "again", block_size=4, max_new_tokens=16, batch_size=2, method="parallel", progress=False, model_id="m")  # fmt: skip
    assert load_trajectories(tmp_path / "again")["states"][:4] == own["states"]
    assert len(collected_answers(tmp_path / "again")) == 6
    with pytest.raises(ValueError, match="answers_of"):
        _collect(model, tmp_path / "again", model_id="m", answers=answers, answers_of="another")


def test_a_folder_without_a_collection_has_no_settings_and_no_answers(tmp_path) -> None:
    assert collection_settings(tmp_path / "none") is None and collected_answers(tmp_path / "none") == {}
    (tmp_path / "empty").mkdir()
    assert collection_settings(tmp_path / "empty") is None and collected_answers(tmp_path / "empty") == {}


def test_fixed_answers_are_refused_where_they_cannot_be_used(tmp_path) -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="parallel method only; got method='sequential'"):
        _collect(model, tmp_path / "a", method="sequential", answers={"p00": [5, 6]}, answers_of="x")
    with pytest.raises(ValueError, match="need answers_of"):
        _collect(model, tmp_path / "b", answers={"p00": [5, 6]})
    with pytest.raises(ValueError, match=r"no fixed answer for the prompts \['p01', 'p02', 'p03'\] \(3 of 4\)"):
        _collect(model, tmp_path / "c", answers={"p00": [5, 6, 7, 8, 9]}, answers_of="x", batch_size=4)
    with pytest.raises(ValueError, match="names the owner of fixed answers, but no answers are given"):
        _collect(model, tmp_path / "d", answers_of="x")


def test_the_collect_command_records_states_on_another_folders_answers(tmp_path) -> None:
    from hf_jacobi import cli

    checkpoints = {}
    for seed in (0, 1):
        checkpoints[seed] = tmp_path / f"model{seed}"
        tiny_model("llama", seed=seed).save_pretrained(checkpoints[seed])
        tiny_tokenizer().save_pretrained(checkpoints[seed])
    common = ["--prompts", "stdlib", "--num_prompts", "2", "--max_new_tokens", "8", "--block_size", "4"]
    base = tmp_path / "base"
    assert cli.main(["collect", "--model_name_or_path", str(checkpoints[0]), *common, "--output_dir", str(base)]) == 0
    theirs = tmp_path / "theirs"
    argv = ["collect", "--model_name_or_path", str(checkpoints[1]), *common, "--method", "parallel", "--answers"]
    assert cli.main([*argv, str(base), "--output_dir", str(theirs)]) == 0
    assert load_trajectories(theirs)["completion_ids"] == load_trajectories(base)["completion_ids"]
    assert json.loads((theirs / "collection.json").read_text())["answers_of"] == str(checkpoints[0])
    sequential = ["collect", "--model_name_or_path", str(checkpoints[1]), *common, "--answers", str(base)]
    assert cli.main([*sequential, "--output_dir", str(tmp_path / "x")]) == 1
