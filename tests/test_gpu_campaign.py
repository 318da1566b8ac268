"""The GPU campaign (lab/campaigns/gpu_campaign.py) rehearsed on the CPU: every stage on a tiny random model,
the files it returns, resuming from them, and the pieces a GPU window relies on (the budget's deadlines, the
disjointness check, the SVD approximation of a full-parameter run, what one device call can bring back)."""

from __future__ import annotations

import copy
import json
import sys
import tarfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

RECIPE = Path(__file__).resolve().parents[1] / "lab" / "campaigns"
sys.path.insert(0, str(RECIPE))

from campaign import bundle, judging  # noqa: E402
from campaign.budget import Budget, StageTimer, parse_shares  # noqa: E402
from campaign.lowrank import svd_adapter  # noqa: E402
from campaign.prompts import CollectingFilter, PromptSet, check_disjoint, held_out_texts, make_disjoint  # noqa: E402
from campaign.tiny import build_tiny_checkpoint  # noqa: E402

from script_modules import load_script  # noqa: E402

# Merging an adapter into the tied embedding of the tiny model (as of SmolLM2) is what the SVD adapter does on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Model (has|with) `tie_word_embeddings=True`:UserWarning")


def _script():
    return load_script(RECIPE / "gpu_campaign.py")


def _expired(stage: str = "prompts") -> StageTimer:
    budget = Budget(60.0)
    return StageTimer(budget, stage, time.monotonic() - 1.0)


@pytest.mark.integration
def test_tiny_campaign_end_to_end_then_resumed(tmp_path):
    """One whole --tiny campaign, its jobs in this process (one test, so that it runs once under xdist too): every
    stage's files, then a later call resuming from them, and a training run stopped by its deadline."""
    out, work = tmp_path / "out", tmp_path / "work"
    code = _script().main(["--tiny", "--inline", "--output-dir", str(out), "--work-dir", str(work)])
    record = json.loads((out / "campaign.json").read_text())
    assert code == 0, record.get("outcome")
    _check_files(out, record)
    _check_trajectories(work, record)
    _check_variants(out, record)
    _check_resume(out, work, tmp_path / "again")
    _check_training_deadline(work, tmp_path / "stopped")


def _check_files(out: Path, record: dict) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["campaign.json", "prompts.parquet", "completions.parquet", "judged.md", "winner.tar"]
    )
    assert bundle.check_limits(out) == [] and record["stages"]["bundle"]["problems"] == []
    prompts = PromptSet.read(out / "prompts.parquet")
    assert len(prompts.of("train")) == 40 and len(prompts.of("judge")) == 8
    assert {row["kind"] for row in prompts.of("judge")} == {"plain"}
    assert {row["source"] for row in prompts.of("train")} == {"packages", "magpie"}
    completions = pq.read_table(out / "completions.parquet").to_pydict()
    assert sorted(completions["prompt_id"]) == sorted(prompts.texts("train"))
    assert all(0 < len(answer) <= 32 for answer in completions["completion_ids"])


def _check_trajectories(work: Path, record: dict) -> None:
    from hf_jacobi.data.collection import load_trajectories

    rows = load_trajectories(work / "trajectories").to_list()
    assert len(rows) == 40
    for row in rows:
        blocks = row["fixed_points"]
        assert [t for block in blocks for t in block] == row["completion_ids"][: 8 * len(blocks)]
        assert [states[-1] for states in row["states"]] == blocks and all(len(s[0]) == 8 for s in row["states"])
    stage = record["stages"]["trajectories"]
    for method in ("sequential", "parallel"):
        assert stage["measured"][method]["tokens_per_s"] > 0
    check = stage["float32_check"]
    assert check["exact"] and check["jacobi_answers_equal_greedy"] == "8/8" and check["parallel"]["disagreements"] == 0


def _check_variants(out: Path, record: dict) -> None:
    variants = record["stages"]["training"]["variants"]
    assert set(variants) == {"lora-r16", "lora-r64", "full"}
    assert all(v["exit_code"] == 0 and v["steps"] >= 1 for v in variants.values())
    assert variants["full"]["judged"]["rank"] >= 1 and variants["full"]["judged"]["relative_error"] > 0
    rows = record["stages"]["judging"]["rows"]
    assert [row["name"] for row in rows] == ["base", "lora-r16", "lora-r64", "full"]
    assert all(set(row["sets"]) == {"requests", "code-tasks", "judge"} for row in rows)
    assert "(Wilson 95%)" in (out / "judged.md").read_text()
    winner = record["stages"]["judging"]["winner"]
    assert winner in variants
    with tarfile.open(out / "winner.tar") as tar:
        names = tar.getnames()
    assert {"weights/adapter_model.safetensors", "weights/adapter_config.json", "train.log"} <= set(names)
    assert record["stages"]["bundle"]["train_logs"][winner]["log_history"]


def _check_resume(first_out: Path, first_work: Path, root: Path) -> None:
    from hf_jacobi.data.collection import load_trajectories

    out, work = root / "out", root / "work"
    argv = ["--tiny", "--inline", "--output-dir", str(out), "--work-dir", str(work), "--resume-from", str(first_out)]
    assert _script().main([*argv, "--stages", "prompts", "trajectories", "--measure-prompts", "0"]) == 0
    stages = json.loads((out / "campaign.json").read_text())["stages"]
    assert stages["prompts"]["resumed_rows"] == 48 and stages["prompts"]["batches"] == 0
    assert stages["trajectories"]["resume"] == "40 answers resumed"
    assert stages["trajectories"]["generated_rows"] == 0 and stages["trajectories"]["rows"] == 40
    again = load_trajectories(work / "trajectories").to_list()
    assert again == load_trajectories(first_work / "trajectories").to_list()


def _check_training_deadline(work: Path, run: Path) -> None:
    from campaign import training

    arguments = training.train_arguments("lora-r16", [work / "trajectories"], run, str(work / "tiny-model"), tiny=True)
    assert training.run_variant(arguments, deadline=time.time() - 1) == 0
    weights, steps = training.newest_weights(run)
    assert weights == run and steps == 1


def test_stages_stop_at_an_expired_deadline(tmp_path):
    from campaign.prompts import PromptSettings, build_prompt_set
    from campaign.trajectories import TrajectorySettings, collect_stage

    from hf_jacobi.loading import load_model

    model, tokenizer = load_model(str(build_tiny_checkpoint(tmp_path / "tiny")))
    settings = PromptSettings(num_prompts=40, judge_prompts=8, batch_size=8, packages=4)
    prompt_set, record = build_prompt_set(model, tokenizer, settings, _expired())
    assert record["stopped"] == "deadline" and record["batches"] == 0 and len(prompt_set.of("train")) == 4
    trajectories = TrajectorySettings(block_size=8, max_new_tokens=16, batch_size=4, dtype="float32")
    saved = []
    result = collect_stage(
        model,
        tokenizer,
        prompt_set.dataset("train"),
        trajectories,
        _expired("trajectories"),
        tmp_path,
        {},
        lambda done, progress: saved.append(len(done)),
    )
    assert result["stopped"] == "deadline" and result["rows"] == 0 and saved == [0]


def test_budget_hands_unused_time_to_later_stages():
    budget = Budget(100.0, parse_shares(["prompts=1", "trajectories=1", "training=2", "judging=0", "bundle=0"]))
    assert budget.deadline("prompts", ["prompts", "trajectories", "training"]) - budget.started == pytest.approx(
        25, abs=1
    )
    assert budget.deadline("training", ["training", "judging"]) - budget.started == pytest.approx(100, abs=1)
    with pytest.raises(ValueError, match="STAGE=SHARE"):
        parse_shares(["nothing=1"])


def test_disjointness_check_refuses_an_overlapping_prompt():
    references = held_out_texts()
    request = next(text for key, text in references.items() if key.startswith("requests:") and len(text.split()) > 13)
    with pytest.raises(ValueError, match="overlap held-out text"):
        check_disjoint({"leak": "Please answer: " + request}, references, "training")
    assert CollectingFilter(exclude=references).accept(request, ended=True) is None
    row = {"source": "magpie", "kind": "plain"}
    judge = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    prompt_set = PromptSet(
        [
            {**row, "prompt_id": "j", "text": judge, "split": "judge"},
            {**row, "prompt_id": "t", "text": "so " + judge, "split": "train"},
            {**row, "prompt_id": "u", "text": "a different request entirely about gardens", "split": "train"},
        ]
    )
    assert make_disjoint(prompt_set, references) == 1 and sorted(prompt_set.texts("train")) == ["u"]
    prompt_set.rows.append({**row, "prompt_id": "leak", "text": request, "split": "train"})
    with pytest.raises(ValueError, match="1 training prompts overlap"):
        make_disjoint(prompt_set, references)


def test_svd_adapter_round_trip(tmp_path):
    from hf_jacobi.adapters import apply_adapter
    from hf_jacobi.loading import load_model

    base, _ = load_model(str(build_tiny_checkpoint(tmp_path / "tiny")))
    tuned = copy.deepcopy(base)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in tuned.parameters():
            param.add_(0.01 * torch.randn_like(param))
    exact = svd_adapter(base, tuned, tmp_path / "exact", rank=64, dtype=torch.float32)
    merged = apply_adapter(copy.deepcopy(base), tmp_path / "exact")
    assert exact["relative_error"] < 1e-6 and exact["vectors_kept_whole"] == 5
    assert merged.lm_head.weight is merged.model.embed_tokens.weight
    for name, value in tuned.state_dict().items():
        torch.testing.assert_close(merged.state_dict()[name], value, atol=1e-5, rtol=0)
    low = svd_adapter(base, tuned, tmp_path / "low", rank=2)
    assert 0 < low["relative_error"] < 1 and low["rank"] == 2
    assert (tmp_path / "low" / "adapter_model.safetensors").stat().st_size < exact["bytes"]


def test_winner_is_cut_into_pieces_that_fit_one_call(tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 40)
    out = tmp_path / "out"
    out.mkdir()
    pieces = bundle.pack_winner(weights, [], out, chunk=4096)
    assert [p.name for p in pieces] == [f"winner.tar.{n:02d}" for n in range(len(pieces))] and len(pieces) > 2
    assert all(p.stat().st_size <= 4096 for p in pieces) and not (out / "winner.tar").exists()
    (tmp_path / "joined.tar").write_bytes(b"".join(p.read_bytes() for p in pieces))
    with tarfile.open(tmp_path / "joined.tar") as tar:
        assert tar.extractfile("weights/adapter_model.safetensors").read() == bytes(range(256)) * 40
    for index in range(5):
        (out / f"extra-{index}.json").write_text("{}")
    (out / "a" / "b" / "c").mkdir(parents=True)
    (out / "a" / "b" / "c" / "deep:name").write_text("x")
    problems = bundle.check_limits(out)
    assert any("more than 8" in p for p in problems) and any("too deep" in p for p in problems)


def test_wilson_interval():
    assert judging.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert judging.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert judging.wilson(0, 0) == (0.0, 1.0)


def test_a_failed_or_stopped_job_brings_back_the_end_of_its_log(tmp_path):
    """The jobs' logs stay on the lent machine; what a failure printed last must come back in campaign.json."""
    from campaign.runner import Job, run_jobs

    def job(name: str, code: str) -> Job:
        return Job(name, [sys.executable, "-c", code], lambda: 0, tmp_path / f"{name}.log")

    crash = "import sys; print('x' * 5000); print('CUDA error: out of memory'); sys.exit(3)"
    hang = "import time; print('still warming up', flush=True); time.sleep(60)"
    results = run_jobs(
        [job("ok", "print('fine')"), job("crash", crash), job("hang", hang)], time.monotonic() + 8, False
    )
    assert results["ok"]["exit_code"] == 0 and "log_tail" not in results["ok"]
    assert results["crash"]["exit_code"] == 3 and results["crash"]["log_tail"].endswith("CUDA error: out of memory\n")
    assert len(results["crash"]["log_tail"]) == 3000
    assert results["hang"]["exit_code"] == "stopped" and "still warming up" in results["hang"]["log_tail"]

    def fails() -> int:
        raise ValueError("bad flag --xyz")

    (inline,) = run_jobs([Job("inline", [], fails, tmp_path / "inline.log")], time.monotonic() + 8, True).values()
    assert inline["exit_code"] == 1 and "ValueError: bad flag --xyz" in inline["log_tail"]


def test_magpie_sampling_skips_an_empty_batch_but_not_a_device_error(monkeypatch):
    from campaign import prompts

    settings = prompts.PromptSettings(num_prompts=4, judge_prompts=1, batch_size=2, packages=0)
    monkeypatch.setattr(prompts, "magpie_prompts", _raises(RuntimeError("kept 0 of 1 instructions after 1 batches")))
    assert prompts._sample_batch(None, None, settings, CollectingFilter(), 0) == []
    monkeypatch.setattr(prompts, "magpie_prompts", _raises(torch.cuda.OutOfMemoryError("CUDA out of memory")))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        prompts._sample_batch(None, None, settings, CollectingFilter(), 0)


def _raises(error: Exception):
    def call(*args, **kwargs):
        raise error

    return call


def test_without_a_judged_winner_the_most_trained_variant_comes_back_unjudged(tmp_path):
    """Every judge failed or ran out of time: the window's training still comes back, marked unjudged."""
    from campaign.budget import Manifest
    from campaign.stages import Campaign

    campaign = Campaign.__new__(Campaign)
    campaign.out, campaign.work, campaign.variants = tmp_path / "out", tmp_path / "work", ["lora-r16", "full"]
    campaign.out.mkdir()
    campaign.manifest = Manifest(campaign.out / "campaign.json")
    variants = {}
    for name, steps in (("lora-r16", 40), ("full", 25)):
        judged = tmp_path / "judged" / name
        judged.mkdir(parents=True)
        (judged / "adapter_model.safetensors").write_bytes(b"w" * 1000)
        (campaign.work / "runs" / name).mkdir(parents=True)
        variants[name] = {"steps": steps, "judged": {"folder": str(judged)}}
    campaign.manifest.update("stages", "training", value={"variants": variants})
    campaign.manifest.update("stages", "judging", value={"winner": None})
    campaign.stage_bundle(StageTimer(Budget(60.0), "bundle", time.monotonic() + 30))
    record = json.loads((campaign.out / "campaign.json").read_text())["stages"]["bundle"]
    assert record["winner"] == record["unjudged"] == "lora-r16" and record["winner_files"] == ["winner.tar"]
    with tarfile.open(campaign.out / "winner.tar") as tar:
        assert any(name.endswith("adapter_model.safetensors") for name in tar.getnames())


def test_variant_names_carry_the_anchor_weight_and_the_clean_data():
    from campaign.training import variant_flags

    assert variant_flags("lora-r16") == []
    assert variant_flags("lora-r16-kl30") == ["--base_kl_weight", "30"]
    assert variant_flags("lora-r64-kl2.5-clean")[-4:] == [
        "--base_kl_weight",
        "2.5",
        "--drop_looping_trajectories",
        "true",
    ]
    assert variant_flags("lora-r64-clean")[:2] == ["--lora_r", "64"]
    for bad in ("lora-r32", "lora-r16-kl", "lora-r16-clean-kl30"):
        with pytest.raises(ValueError, match=repr(bad)):
            variant_flags(bad)
