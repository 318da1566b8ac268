"""The CPU campaign (lab/campaigns/cpu_campaign.py) rehearsed on a tiny random model: collection that stops
and resumes in logged steps, training stopped at a deadline and resumed on a fresh machine from the committed
checkpoint alone, and judging beside the base."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

RECIPE = Path(__file__).resolve().parents[1] / "lab" / "campaigns"
sys.path.insert(0, str(RECIPE))

from campaign.prompts import PROMPT_SCHEMA  # noqa: E402
from campaign.tiny import build_tiny_checkpoint  # noqa: E402

from script_modules import load_script  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Model (has|with) `tie_word_embeddings=True`:UserWarning")


def _script():
    return load_script(RECIPE / "cpu_campaign.py")


def _prompt_set(path: Path, train: int, judge: int) -> None:
    rows = [
        {"prompt_id": f"t{i:02d}", "text": f"Explain item {i} in {3 + i % 4} words", "split": "train"}
        | ({"source": "packages", "kind": "code"} if i % 3 == 0 else {"source": "magpie", "kind": "plain"})
        for i in range(train)
    ]
    rows += [
        {"prompt_id": f"j{i}", "text": f"Describe colour {i}", "source": "magpie", "kind": "plain", "split": "judge"}
        for i in range(judge)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=PROMPT_SCHEMA), path)


def _tiny_campaign(tmp_path: Path, train: int):
    """The script, its common flags (a tiny checkpoint, data and run folders under tmp_path), and the two folders."""
    model = build_tiny_checkpoint(tmp_path / "tiny-model")
    data, runs = tmp_path / "data", tmp_path / "runs"
    _prompt_set(data / "prompts.parquet", train=train, judge=2)
    common = ["--data-dir", str(data), "--runs-dir", str(runs), "--model", str(model), "--tiny"]
    common += ["--results-dir", str(tmp_path / "results")]
    return _script(), common, data, runs


def test_collection_order_is_a_shuffle_sorted_by_length_within_chunks(monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "CHUNK", 4)
    ids = [f"p{i}" for i in range(10)]
    lengths = [9, 1, 8, 2, 7, 3, 6, 4, 5, 0]
    order = script.collection_order(ids, lengths)
    assert sorted(order) == list(range(10)) and order == script.collection_order(ids, lengths)
    for start in range(0, 10, 4):
        chunk = [lengths[i] for i in order[start : start + 4]]
        assert chunk == sorted(chunk)
    assert order != sorted(range(10), key=lambda i: lengths[i])  # shuffled across chunks


@pytest.mark.integration
def test_tiny_cpu_campaign_collects_trains_resumes_and_judges(tmp_path, capsys):
    script, common, data, runs = _tiny_campaign(tmp_path, train=10)

    collect = [*common, "collect", "--dtype", "float32", "--batch-size", "2", "--step", "4"]
    assert script.main([*collect, "--prompts", "6"]) == 0
    steps = [json.loads(line) for line in (data / "progress.jsonl").read_text().splitlines()]
    assert [s["collected"] for s in steps] == [4, 6] and all(s["tokens_per_s"] > 0 for s in steps)
    order = pq.read_table(data / "train-order.parquet").column("prompt_id").to_pylist()
    assert sorted(order) == [f"t{i:02d}" for i in range(10)]
    first = {row["prompt_id"]: row for row in _rows(data)}
    assert set(first) == set(order[:6])
    assert script.main([*collect, "--prompts", "8"]) == 0  # resumes: two more, the first six untouched
    again = {row["prompt_id"]: row for row in _rows(data)}
    assert set(again) == set(order[:8]) and all(again[k] == v for k, v in first.items())
    with pytest.raises(SystemExit, match="the first 9 prompts"):
        script.main([*common, "train", "--trajectories", "9"])

    # the padding a training epoch runs over, random against length-grouped batches, on the same rows
    assert script.main([*common, "padding", "--trajectories", "8", "--output", str(tmp_path / "padding.json")]) == 0
    padding = json.loads((tmp_path / "padding.json").read_text())
    assert padding["rows"] == padding["anchor_texts"] + 8 and padding["anchor_texts"] > 0
    real, grouped, random = (padding["real_tokens"], padding["group_by_length"], padding["random"])
    assert real <= grouped["padded_tokens"] < random["padded_tokens"]

    # a training stopped at once saves its step and commits it; a fresh machine (no run folder) resumes from it
    assert script.main([*common, "train", "--trajectories", "8", "--minutes", "0"]) == 0
    committed = sorted((data / "checkpoints" / "lora-r16-n8").glob("checkpoint-*"))
    assert [p.name for p in committed] == ["checkpoint-1"] and (committed[0] / "optimizer.pt").is_file()
    assert (runs / "lora-r16-n8" / "checkpoint-1" / "custom_generate").is_dir()
    assert not (committed[0] / "custom_generate").exists()  # a copy of the decoding code: resuming never reads it
    # its optimizer moments travel in bfloat16 (a third of a float32 checkpoint's bytes), the weights in float32
    local = torch.load(runs / "lora-r16-n8" / "checkpoint-1" / "optimizer.pt", weights_only=True)["state"]
    kept = torch.load(committed[0] / "optimizer.pt", weights_only=True)["state"]
    assert local.keys() == kept.keys() and local
    for index, moments in local.items():
        assert kept[index]["step"].dtype == moments["step"].dtype and kept[index]["step"] == moments["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            assert kept[index][key].dtype == torch.bfloat16
            assert torch.equal(kept[index][key], moments[key].to(torch.bfloat16))
    weights = "adapter_model.safetensors"
    assert (committed[0] / weights).read_bytes() == (runs / "lora-r16-n8" / "checkpoint-1" / weights).read_bytes()
    capsys.readouterr()
    assert script.main([*common, "status"]) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status["training"] == {"lora-r16-n8": f"1/{state_of(committed[0])['max_steps']}"}
    assert status["plan_left"][0] == "train lora-r16 4"  # the first point (4 prompts): collected, not trained
    shutil.rmtree(runs / "lora-r16-n8")
    capsys.readouterr()
    assert script.main([*common, "train", "--trajectories", "8"]) == 0
    assert "resuming from the committed" in capsys.readouterr().out
    state = json.loads((runs / "lora-r16-n8" / "trainer_state.json").read_text())
    assert state["global_step"] > 1 and state["epoch"] == pytest.approx(1.0)
    assert (data / "adapters" / "lora-r16-n8" / "adapter_model.safetensors").is_file()
    kept = json.loads((data / "adapters" / "lora-r16-n8" / "trainer_state.json").read_text())
    assert kept["global_step"] == state["global_step"]  # the run's log history travels with its weights
    assert not (data / "checkpoints" / "lora-r16-n8").exists()  # a finished run needs no resume checkpoint

    assert script.main([*common, "judge", "--run", "lora-r16-n8", "--batch-size", "4"]) == 0
    assert (data / "judged" / "base" / "quality.json").is_file()
    humaneval = json.loads((data / "judged" / "lora-r16-n8" / "evaluate-humaneval.json").read_text())
    assert [s["settings"]["block_size"] for s in humaneval["trained"]["settings"]] == [8, 8]
    table = (data / "judged" / "judged.md").read_text()  # with the steps the run took, from its kept trainer state
    assert f"| {kept['global_step']} | final adapter, epoch 1.00, {kept['num_input_tokens_seen']:,} tokens |" in table
    speed = data / "judged" / "lora-r16-n8" / "evaluate-judge.json"
    assert [s["settings"]["block_size"] for s in json.loads(speed.read_text())["trained"]["settings"]] == [16, 16]
    # a run judged before a part was added gets that part alone: the quality judge is not run again
    # and reuses the base's figures of another run's report (here the same report, moved to the base's folder)
    quality = (data / "judged" / "lora-r16-n8" / "quality.json").stat().st_mtime_ns
    earlier = speed.rename(data / "judged" / "base" / speed.name)
    assert script.main([*common, "judge", "--run", "lora-r16-n8", "--batch-size", "4"]) == 0
    assert speed.is_file() and (data / "judged" / "lora-r16-n8" / "quality.json").stat().st_mtime_ns == quality
    again, before = json.loads(speed.read_text()), json.loads(earlier.read_text())
    assert again["base_results"] == str(earlier) and again["base"] == {**before["base"], "reused": True}
    assert again["trained"] == before["trained"]
    earlier.unlink()
    curve = json.loads((tmp_path / "results" / "scaling.json").read_text())
    assert [(p["name"], p["prompts"]) for p in curve["points"]] == [("base", 0), ("lora-r16-n8", 8)]
    trained = curve["points"][1]
    sources = {row["prompt_id"]: row["source"] for row in pq.read_table(data / "prompts.parquet").to_pylist()}
    first = pq.read_table(data / "train-order.parquet").column("prompt_id").to_pylist()[:8]
    assert 0 < trained["packages_prompts"] == sum(sources[p] == "packages" for p in first) < 8
    assert trained["steps"] == kept["global_step"]
    assert all(value >= 1.0 for value in trained["tokens_per_forward"].values()) and trained["lossless"]
    assert set(trained["tokens_per_forward"]) == {*curve["targets"], "judge-b16-plain", "judge-b16-both"}
    assert trained["judge_loops"][1] == 2 and trained["canonical_nll_vs_base"] > 0
    assert (tmp_path / "results" / "scaling.png").stat().st_size > 0
    assert script.main([*common, "status"]) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status["rows"] == 8 and status["judged"] == ["base", "lora-r16-n8"]
    assert status["trained"] == ["lora-r16-n8"] and status["training"] == {}  # finished: no run left mid-epoch


def state_of(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def _rows(data: Path) -> list[dict]:
    from hf_jacobi.data.collection import load_trajectories

    return load_trajectories(data / "trajectories").to_list()


@pytest.mark.integration
def test_tiny_cpu_campaign_runs_its_plan_to_the_end_and_then_has_nothing_left(tmp_path, capsys):
    script, common, data, runs = _tiny_campaign(tmp_path, train=6)
    assert script.plan_steps(6, tiny=True) == [
        ("collect", None, 4),
        ("train", "lora-r16", 4),
        ("judge", "lora-r16-n4", 4),
        ("train", "lora-r16-kl30", 4),
        ("judge", "lora-r16-kl30-n4", 4),
        ("collect", None, 6),
        ("train", "lora-r16-kl30", 6),
        ("judge", "lora-r16-kl30-n6", 6),
        ("train", "lora-r64-kl30", 6),
        ("judge", "lora-r64-kl30-n6", 6),
    ]
    full = script.plan_steps(9999, tiny=False)
    assert full[:4] == [("collect", None, 2000), ("train", "lora-r16", 2000), ("judge", "lora-r16-n2000", 2000),
                        ("judge", "shipped", 0)]  # fmt: skip
    assert script.main([*common, "run", "--minutes", "0", "--dtype", "float32"]) == 0
    assert "stopping before collect" in capsys.readouterr().out and not (data / "trajectories").exists()
    assert script.main([*common, "run", "--dtype", "float32", "--batch-size", "2"]) == 0
    assert "every step is done" in capsys.readouterr().out
    assert script.main([*common, "status"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["plan_left"] == []
    names = ["lora-r16-kl30-n4", "lora-r16-kl30-n6", "lora-r16-n4", "lora-r64-kl30-n6"]
    assert sorted(p.name for p in (data / "adapters").iterdir()) == names
    judged = (data / "judged" / "judged.md").read_text()
    assert all(name in judged for name in names)

    def trained_args(run: str):
        return torch.load(runs / run / "training_args.bin", weights_only=False)

    assert trained_args("lora-r16-kl30-n6").base_kl_weight == 30  # the -kl<W> variants weigh the anchor W
    assert trained_args("lora-r16-n4").base_kl_weight == 10
    assert script.main([*common, "run", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "every step is done" in out and "[cpu-campaign] train" not in out


@pytest.mark.integration
def test_tiny_cpu_campaign_goes_on_in_another_dtype_in_a_second_folder_and_trains_on_both(tmp_path, capsys):
    """A machine without bfloat16 units goes on in float32: a folder refuses another dtype's rows, so they go to
    `trajectories-float32/`; no prompt is collected twice, and training and the padding count read both folders."""
    from campaign import training

    from hf_jacobi.data.collection import load_trajectories

    script, common, data, runs = _tiny_campaign(tmp_path, train=6)
    collect = [*common, "collect", "--batch-size", "2", "--step", "4"]
    assert script.main([*collect, "--dtype", "bfloat16", "--prompts", "4"]) == 0
    assert script.main([*collect, "--dtype", "float32", "--prompts", "6"]) == 0
    order = pq.read_table(data / "train-order.parquet").column("prompt_id").to_pylist()
    first, second = (load_trajectories(data / name).to_list() for name in ("trajectories", "trajectories-float32"))
    assert sorted(r["prompt_id"] for r in first) == sorted(order[:4])
    assert sorted(r["prompt_id"] for r in second) == sorted(order[4:6])
    models = [json.loads((data / name / "collection.json").read_text())["model"] for name in
              ("trajectories", "trajectories-float32")]  # fmt: skip
    assert [m.rsplit(" ", 1)[1] for m in models] == ["(bfloat16)", "(float32)"]
    steps = [json.loads(line) for line in (data / "progress.jsonl").read_text().splitlines()]
    assert [(s["dtype"], s["collected"]) for s in steps] == [("bfloat16", 4), ("float32", 6)]
    assert script.main([*collect, "--dtype", "bfloat16", "--prompts", "6"]) == 0  # all there: nothing again
    assert len(load_trajectories(data / "trajectories")) == 4 and len(steps) == len(
        (data / "progress.jsonl").read_text().splitlines()
    )
    capsys.readouterr()
    assert script.main([*common, "status"]) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status["rows"] == 6 and status["folders"] == {"trajectories": 4, "trajectories-float32": 2}
    assert [key.rsplit(", ", 1)[1] for key in status["tokens_per_s"]] == ["bfloat16", "float32"]

    assert script.main([*common, "padding", "--trajectories", "6", "--output", str(tmp_path / "padding.json")]) == 0
    padding = json.loads((tmp_path / "padding.json").read_text())
    assert padding["rows"] == padding["anchor_texts"] + 6
    assert script.main([*common, "train", "--trajectories", "6"]) == 0
    record = json.loads((runs / "lora-r16-n6" / "jacobi_forcing_training.json").read_text())
    flags = training.TINY_FLAGS
    anchors = int(flags[flags.index("--num_anchor_texts") + 1])
    assert record["trajectories"] == 6 + anchors  # the six trajectories of both folders, and the anchor texts


def test_auto_dtype_is_bfloat16_only_where_the_cpu_has_its_units(monkeypatch):
    script = _script()
    from hf_jacobi.decoding import cpu_info

    for units, expected in (("amx", "bfloat16"), ("avx512_bf16", "bfloat16"), (None, "float32")):
        monkeypatch.setattr(cpu_info, "bfloat16_units", lambda units=units: units)
        assert script.resolve_dtype("auto") == expected
        batch, accumulation = (4, 8) if units else (2, 16)
        assert script.cpu_batching() == (batch, accumulation) and batch * accumulation == script.CPU_ROWS_PER_STEP
        flags = ["--bf16", "true" if units else "false", "--per_device_train_batch_size", str(batch)]
        assert script.cpu_precision_flags() == [*flags, "--gradient_accumulation_steps", str(accumulation)]
    assert script.resolve_dtype("float16") == "float16"


def test_a_machine_with_bfloat16_units_collects_and_trains_before_it_judges(monkeypatch):
    """Judging is float32 on any machine, collection and training run ~2-3x faster in bfloat16 where the units are:
    such a machine leaves the judges for one without them, and no step comes before what it needs."""
    from hf_jacobi.decoding import cpu_info

    script = _script()
    plan = script.plan_steps(9999, tiny=False)
    assert script.machine_order(plan, bfloat16_units=False) == plan
    order = script.machine_order(plan, bfloat16_units=True)
    assert sorted(order) == sorted(plan) and order[0] == plan[0]
    stages = [stage for stage, _, _ in order]
    assert stages == sorted(stages, key=lambda stage: stage == "judge")  # every judge after every training
    for place, (stage, name, n) in enumerate(order):
        before = order[:place]
        if stage == "judge" and name != "shipped":
            assert ("train", script.run_size(name)[0], n) in before
        if stage == "train":  # its prompts collected first, the collections in the plan's order
            assert any(s == "collect" and k >= n for s, _, k in before)
    assert [step for step in order if step[0] != "judge"] == [step for step in plan if step[0] != "judge"]
    layout = script.Layout(data=Path("/nonexistent"))
    monkeypatch.setattr(script, "_plan_total", lambda layout: 9999)
    monkeypatch.setattr(cpu_info, "bfloat16_units", lambda: "avx512_bf16")
    assert script._machine_steps(layout) == order
    monkeypatch.setattr(cpu_info, "bfloat16_units", lambda: None)
    assert script._machine_steps(layout) == plan


def test_a_judge_starts_each_part_only_with_its_time_left_and_the_plan_waits_for_the_next_part(
    tmp_path, monkeypatch, capsys
):
    """No part of a judge resumes, so a sitting starts one only with its measured time left (more where it measures
    the base too): a part cut by the deadline would lose all it did."""
    import argparse

    import hf_jacobi.cli

    script = _script()
    layout = script.Layout(data=tmp_path / "data", runs=tmp_path / "runs", results=tmp_path / "results")
    _prompt_set(layout.prompts, train=2, judge=2)
    (layout.adapters / "r").mkdir(parents=True)
    (layout.adapters / "r" / "adapter_model.safetensors").write_bytes(b"")
    parts, base_more = script.JUDGE_PART_MINUTES, script.BASE_PART_MINUTES
    first = {part: parts[part] + base_more[part] for part in parts}
    assert {part: script.judge_part_minutes(layout, part) for part in parts} == first
    assert script.judge_parts_left(layout, "r") == ["quality.json", "evaluate-humaneval.json", "evaluate-judge.json"]
    assert script._minutes_needed(layout, "judge", "r") == first["quality.json"]
    assert script._minutes_needed(layout, "train", "lora-r16") == 0.0

    def refuse(argv):
        raise AssertionError(f"a part started without its time: hf-jacobi {argv[0]}")

    monkeypatch.setattr(hf_jacobi.cli, "main", refuse)
    monkeypatch.setattr(script, "write_judged", lambda layout: None)  # the reports below are stand-ins
    cut = argparse.Namespace(layout=layout, run="r", judge_batch_size=16, minutes=first["quality.json"] - 1)
    assert script.judge(cut) == 0
    assert "stopping before quality.json" in capsys.readouterr().out
    # the base's quality and another run's judging-speed report (in the judge's dtype) done: the base is reused
    (layout.judged / "base").mkdir(parents=True)
    (layout.judged / "base" / "quality.json").write_text("{}")
    (layout.judged / "r" / "quality.json").parent.mkdir(parents=True)
    (layout.judged / "r" / "quality.json").write_text("{}")
    (layout.judged / "other").mkdir()
    (layout.judged / "other" / "evaluate-judge.json").write_text(json.dumps({"dtype": "float32"}))
    assert script.judge_parts_left(layout, "r") == ["evaluate-humaneval.json", "evaluate-judge.json"]
    assert script.judge_part_minutes(layout, "quality.json") == parts["quality.json"]
    assert script.judge_part_minutes(layout, "evaluate-judge.json") == parts["evaluate-judge.json"]
    assert (
        script._minutes_needed(layout, "judge", "r") == first["evaluate-humaneval.json"]
    )  # no HumanEval report to reuse
    cut = argparse.Namespace(layout=layout, run="r", judge_batch_size=16, minutes=first["evaluate-humaneval.json"] - 1)
    assert script.judge(cut) == 0
    assert "stopping before evaluate-humaneval.json" in capsys.readouterr().out


def test_judging_the_reference_refuses_weights_that_are_not_its_own(tmp_path, monkeypatch):
    """`judge --run shipped` judges the adapter the package shipped while the campaign ran; since the campaign's own
    point replaced it in the package, judging the package's weights under that name would file the new adapter's
    figures under the old one's training, so it refuses them and names the commit that still holds the reference."""
    import hashlib

    import campaign.scaling

    import hf_jacobi

    script = _script()
    with pytest.raises(SystemExit, match=f"{campaign.scaling.SHIPPED_COMMIT}"):
        script.reference_weights()  # the package ships the campaign's adapter now
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"the reference")
    monkeypatch.setattr(hf_jacobi, "JACOBI_FORCING_WEIGHTS", folder)
    monkeypatch.setattr(campaign.scaling, "SHIPPED_SHA256", hashlib.sha256(b"the reference").hexdigest())
    assert script.reference_weights() == folder
