"""The recipe's A/B runner (lab/recipe_ab.py) end to end on a tiny model: arms trained to their steps with the probe
on held-out trajectories at each evaluation, resumed without retraining, and read back as a table."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import datasets
import pytest
import yaml

from hf_jacobi import collect_trajectories, load_prompts, load_trajectories
from tiny_models import fresh_tiny_model, tiny_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab import recipe_ab


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    tokenizer, model = tiny_tokenizer(), fresh_tiny_model("llama")
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rows = [{"prompt_id": f"p{i}", "prompt": " ".join(f"t{(i * 7 + j * 3) % 100 + 3}" for j in range(5))}
            for i in range(6)]  # fmt: skip
    order = datasets.Dataset.from_list(rows)
    order.to_parquet(tmp_path / "order.parquet")
    collect_trajectories(model, tokenizer, load_prompts(str(tmp_path / "order.parquet")), tmp_path / "t", block_size=4, max_new_tokens=12, batch_size=3,
                         progress=False)  # fmt: skip
    (tmp_path / "train.yaml").write_text(
        yaml.safe_dump({"model_name_or_path": str(tmp_path / "model"), "noise_window": 4, "learning_rate": 1e-3,
                        "use_cpu": True, "bf16": False, "per_device_train_batch_size": 2, "logging_steps": 1}),
    )  # fmt: skip
    path = tmp_path / "ab.yaml"
    path.write_text(yaml.safe_dump({
        "config": str(tmp_path / "train.yaml"), "trajectories": str(tmp_path / "t"),
        "prompt_order": str(tmp_path / "order.parquet"), "train_prompts": 4, "eval_prompts": [4, 6], "steps": 2,
        "eval_steps": 1, "flags": ["--eval_probe_trajectories", "2", "--per_device_eval_batch_size", "2"],
        "arms": {"baseline": [], "fixed-point-targets": ["--consistency_targets", "fixed_point"]},
    }))  # fmt: skip
    return path


def test_arms_train_to_their_steps_resume_and_tabulate(settings: Path, tmp_path: Path) -> None:
    runs, results = tmp_path / "runs", tmp_path / "results"
    common = ["--settings", str(settings), "--output-dir", str(runs), "--results", str(results)]
    arguments = recipe_ab.parse([*common, "run"])
    assert arguments.func(arguments) == 0
    arguments = recipe_ab.parse([*common, "table"])
    assert arguments.func(arguments) == 0
    report = json.loads((results / "ab.json").read_text())
    assert list(report["arms"]) == ["baseline", "fixed-point-targets"]
    for arm in report["arms"].values():
        assert arm["steps"] == 2 and [p["step"] for p in arm["curve"]] == [1, 2]
        assert 0 <= arm["curve"][-1]["depth0_rate"] <= 1 and "consistency_agreement" in arm["last_log"]
    assert "| fixed-point-targets | `--consistency_targets fixed_point` | 2 |" in (results / "ab.md").read_text()
    assert (results / "ab.png").stat().st_size > 0
    # a finished arm is not trained again
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("trainer_state.json")}
    arguments = recipe_ab.parse([*common, "run", "--arms", "baseline"])
    assert arguments.func(arguments) == 0
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("trainer_state.json")} == before
    # the committed table outlives the runs: an arm it holds under the same settings is neither trained again nor
    # dropped from the table; an arm defined anew, or any change of the settings, drops what it recorded
    committed = (results / "ab.json").read_text()
    shutil.rmtree(runs)
    arguments = recipe_ab.parse([*common, "run"])
    assert arguments.func(arguments) == 0
    assert not list(runs.rglob("trainer_state.json"))
    arguments = recipe_ab.parse([*common, "table"])
    assert arguments.func(arguments) == 0
    assert (results / "ab.json").read_text() == committed
    data = yaml.safe_load(settings.read_text())
    data["arms"]["fixed-point-targets"] = ["--consistency_targets", "fixed_point", "--learning_rate", "1e-2"]
    settings.write_text(yaml.safe_dump(data))
    assert list(recipe_ab.recorded_arms(recipe_ab.load_settings(settings), results)) == ["baseline"]
    settings.write_text(yaml.safe_dump({**data, "steps": 3}))
    assert recipe_ab.recorded_arms(recipe_ab.load_settings(settings), results) == {}


def test_bad_arms_and_an_eval_slice_inside_the_training_prompts_are_refused(settings: Path, tmp_path: Path) -> None:
    common = ["--settings", str(settings), "--output-dir", str(tmp_path / "runs")]
    arguments = recipe_ab.parse([*common, "run", "--arms", "nope"])
    with pytest.raises(SystemExit, match=r"unknown arm\(s\) \['nope'\]"):
        arguments.func(arguments)
    data = yaml.safe_load(settings.read_text())
    settings.write_text(yaml.safe_dump({**data, "eval_prompts": [2, 6]}))
    arguments = recipe_ab.parse([*common, "run"])
    with pytest.raises(SystemExit, match=r"eval_prompts \[2, 6\] overlap the first 4"):
        arguments.func(arguments)


def test_an_arm_of_other_prompts_or_its_own_collection_trains_on_them(settings: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(settings.read_text())
    model = data["config"].replace("train.yaml", "model")
    data["collect_flags"] = ["--model_name_or_path", model, "--block_size", "4", "--batch_size", "2"]
    data["arms"] = {"longer": {"collect": ["--max_new_tokens", "16"]}, "prefixed": {"prompts": "p", "flags": []}}
    settings.write_text(yaml.safe_dump(data))
    runs, results = tmp_path / "runs", tmp_path / "results"
    # an arm's own collection cut by the time limit is not trained on; the next call goes on with it
    loaded = recipe_ab.load_settings(settings)
    assert recipe_ab.arm_data(loaded, recipe_ab.arm_spec(loaded, "longer"), runs / "longer", 0) is None
    assert (runs / "longer-trajectories" / "collection.json").is_file()
    common = ["--settings", str(settings), "--output-dir", str(runs), "--results", str(results)]
    arguments = recipe_ab.parse([*common, "run"])
    assert arguments.func(arguments) == 0
    own = load_trajectories(runs / "longer-trajectories")
    assert own["prompt_id"] == ["p0", "p1", "p2", "p3"] and max(map(len, own["completion_ids"])) > 12
    assert (runs / "train-prompts-p.parquet").is_file()
    arguments = recipe_ab.parse([*common, "table"])
    assert arguments.func(arguments) == 0
    report = json.loads((results / "ab.json").read_text())
    assert {arm: a["steps"] for arm, a in report["arms"].items()} == {"longer": 2, "prefixed": 2}
    table = (results / "ab.md").read_text()
    assert "| longer | `collected with --max_new_tokens 16` |" in table and "| prefixed | `prompts p*` |" in table
    # too few prompts of a prefix before the evaluation slice, or a key an arm cannot have, is refused up front
    settings.write_text(yaml.safe_dump({**data, "arms": {"few": {"prompts": "p1"}}}))
    arguments = recipe_ab.parse([*common, "run"])
    with pytest.raises(SystemExit, match=r"prompts 'p1': 1 of them come before the evaluation slice, fewer than"):
        arguments.func(arguments)
    settings.write_text(yaml.safe_dump({**data, "arms": {"odd": {"flag": []}}}))
    arguments = recipe_ab.parse([*common, "run"])
    with pytest.raises(SystemExit, match=r"arm 'odd' has unknown key\(s\) \['flag'\]"):
        arguments.func(arguments)
