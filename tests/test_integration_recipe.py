"""The CPU recipe, end to end in a smaller form: collect, train with LoRA, evaluate, through the `hf-jacobi` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_jacobi.cli import main
from hf_jacobi.data.collection import load_trajectories

pytestmark = pytest.mark.integration

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "smollm2-135m" / "jacobi_forcing"


def test_cpu_recipe_runs_end_to_end(embedded_model, tmp_path, capsys):
    del embedded_model  # the fixture makes sure the embedded model's cache exists
    trajectories, adapter, report = tmp_path / "trajectories", tmp_path / "lora", tmp_path / "evaluate.json"
    assert main(["collect", "--config", str(RECIPE / "collect.yaml"), "--num_prompts", "2",
                 "--max_new_tokens", "32", "--output_dir", str(trajectories)]) == 0  # fmt: skip
    collected = load_trajectories(trajectories)
    assert len(collected) == 2 and all(len(states) >= 2 for row in collected["states"] for states in row)

    assert main(["train", "--config", str(RECIPE / "train.yaml"), "--trajectories", str(trajectories),
                 "--output_dir", str(adapter), "--num_train_epochs", "1", "--logging_steps", "1"]) == 0  # fmt: skip
    assert (adapter / "adapter_model.safetensors").is_file() and (adapter / "README.md").is_file()
    assert "jacobi-forcing" in (adapter / "README.md").read_text()

    assert main(["evaluate", "--config", str(RECIPE / "evaluate.yaml"), "--adapter", str(adapter),
                 "--num_prompts", "1", "--max_new_tokens", "16", "--output_file", str(report)]) == 0  # fmt: skip
    results = json.loads(report.read_text())
    for model in ("base", "trained"):
        figures = results[model]
        assert [s["name"] for s in figures["settings"]] == ["plain", "both"]
        assert all(s["identical_to_greedy"] and s["tokens_per_forward"] >= 1 for s in figures["settings"])
        assert 0 < figures["distinct_3grams"] <= 1 and figures["reference_nll"] > 0
    # the base model scores its own greedy answers better than any other model does (a fine-tuned one drifts)
    assert results["base"]["reference_nll"] <= results["trained"]["reference_nll"]

    # a second round collects from the round-1 model, into its own folder: the round-1 folder refuses it by name
    round2 = ["collect", "--config", str(RECIPE / "collect.yaml"), "--num_prompts", "1", "--max_new_tokens", "32",
              "--adapter", str(adapter)]  # fmt: skip
    assert main([*round2, "--output_dir", str(trajectories)]) == 1
    assert f"model: 'embedded' on disk, 'embedded + {adapter}' now" in capsys.readouterr().err
    assert main([*round2, "--output_dir", str(tmp_path / "round2")]) == 0
    assert json.loads((tmp_path / "round2" / "collection.json").read_text())["model"] == f"embedded + {adapter}"
    assert len(load_trajectories(tmp_path / "round2")) == 1
    # and trains the round-1 adapter further on them
    assert main(["train", "--config", str(RECIPE / "train.yaml"), "--trajectories", str(tmp_path / "round2"),
                 "--init_adapter", str(adapter), "--output_dir", str(tmp_path / "lora2"), "--max_steps", "1"]) == 0  # fmt: skip
    assert (tmp_path / "lora2" / "adapter_model.safetensors").is_file()


def test_recipe_steps_report_bad_settings(capsys, tmp_path):
    assert main(["collect", "--prompts", "stdlib", "--block_size", "1", "--output_dir", str(tmp_path),
                 "--model_name_or_path", "embedded"]) == 1  # fmt: skip
    assert "block_size must be an integer >= 2, got 1" in capsys.readouterr().err
    assert main(["train", "--trajectories", str(tmp_path / "missing"), "--model_name_or_path", "embedded",
                 "--use_cpu", "true", "--output_dir", str(tmp_path / "o")]) == 1  # fmt: skip
    assert "no trajectory shards" in capsys.readouterr().err


def test_collect_refuses_an_evaluation_set(capsys, tmp_path):
    assert main(["collect", "--prompts", "humaneval", "--output_dir", str(tmp_path)]) == 1
    assert "'humaneval' is an evaluation set" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
