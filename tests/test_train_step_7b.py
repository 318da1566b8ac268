"""The 7B training-step grid (lab/benchmarks/train_step_7b.py) rehearsed with `--tiny`: the same code on a tiny
Qwen2 on the CPU, each setting in its own process, one JSON line each, a failure recorded and the grid going on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str = "train_step_7b"):
    return load_script(ROOT / "lab" / "benchmarks" / f"{name}.py")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the settings' processes inherit it


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "train_step_7b.jsonl").read_text().splitlines()]


def test_the_grid_starts_with_what_most_likely_fits_and_covers_every_setting() -> None:
    script = _script()
    names = [s.name for s in script.GRID]
    assert names[0] == "lora-gc-sdpa" and names[-1] == "full-gc-sdpa-zero3-offload"
    assert len(set(names)) == 9 and {s.attention for s in script.GRID} == {"sdpa", "flex_attention"}
    assert {(s.parameters, s.checkpointing) for s in script.GRID} == {
        (p, c) for p in ("lora", "full") for c in (True, False)
    }


def test_tiny_settings_write_a_row_each_and_a_failure_does_not_stop_the_grid(tmp_path: Path) -> None:
    """An out-of-memory error raised at a setting's first step is that setting's row, and the next setting still runs:
    its row has its timed steps, packed tokens per second and a finite loss per step (warm-up included)."""
    out = tmp_path / "step"
    argv = ["--tiny", "--output-dir", str(out), "--prompt-tokens", "64", "--budget-seconds", "120"]
    argv += ["--configs", "lora-gc-sdpa,full-gc-sdpa", "--inject-failure", "lora-gc-sdpa:oom"]
    assert _script().main(argv) == 0
    oom, ok = _rows(out)
    assert [oom["config"], ok["config"]] == ["lora-gc-sdpa", "full-gc-sdpa"]
    assert oom["status"] == "oom" and "injected" in oom["error"] and oom["losses"] == [] and oom["steps_done"] == 0
    assert ok["status"] == "ok" and ok["steps"] == 2 and len(ok["step_seconds"]) == 2
    assert ok["tokens_per_step"] == 64 + 2 * ok["new_tokens"]  # the prompt, and a noisy and a clean copy of each block
    assert ok["tokens_per_second"] > 0 and len(ok["losses"]) == 3 and all(math.isfinite(x) for x in ok["losses"])
    assert {"seconds", "setup_seconds", "peak_host_rss_gib", "optimizer", "dtype", "block_size"} <= ok.keys()
    assert 0 < oom["trainable_parameters"] < ok["trainable_parameters"]  # LoRA r16 beside every parameter
    assert "===== lora-gc-sdpa" in (out / "train_step_7b.log").read_text()


def test_a_setting_whose_process_dies_is_recorded_and_one_without_deepspeed_is_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that exits without its row (a host out-of-memory kill, say) leaves a `crashed` row with its exit code;
    without DeepSpeed the offload setting is a `not measured` row saying why, and costs no process."""
    script = _script()
    monkeypatch.setattr(script, "find_spec", lambda name: None if name == "deepspeed" else object())
    out = tmp_path / "step"
    argv = ["--tiny", "--output-dir", str(out), "--configs", "lora-gc-sdpa,full-gc-sdpa-zero3-offload"]
    assert script.main([*argv, "--inject-failure", "lora-gc-sdpa:crash"]) == 0
    crashed, offload = _rows(out)
    assert crashed["status"] == "crashed" and "exit code 3" in crashed["why"]
    assert offload["status"] == "not measured" and "deepspeed is not installed" in offload["why"]
    assert script.main([*argv, "--budget-seconds", "1"]) == 0  # no time left: every setting says so
    assert [r["why"] for r in _rows(out)] == ["budget spent", "budget spent"]


def test_the_gpu_kit_carries_deepspeed_without_the_gguf_in_one_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the 7B step needs on a lent GPU: the kit's wheels and DeepSpeed's, no GGUF, so one call stages it all.
    `make test` runs without the deepspeed extra (only `make test-sharded` installs it): a package this venv lacks is
    given a made-up version, so the kit's packing is checked either way."""
    from importlib import metadata

    kit = _script("gpu_kit")
    installed = metadata.version

    def version(package: str) -> str:
        try:
            return installed(package)
        except metadata.PackageNotFoundError:
            return "0.0.1"

    monkeypatch.setattr(kit.metadata, "version", version)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for package in kit.PACKAGES + kit.EXTRAS["deepspeed"]:  # fake wheels at these versions: nothing downloaded
        (wheels / f"{package}-{version(package)}-py3-none-any.whl").write_bytes(b"w" * 100)
    (part,) = kit.build(tmp_path / "kit", 1.0, wheels, "3.12", None, ("deepspeed",), with_gguf=False)
    kit.stage(part, tmp_path / "stage")
    assert kit.install(tmp_path / "stage", pip=False) == tmp_path / "stage" / "site"
    manifest = json.loads((tmp_path / "stage" / "kit.json").read_text())
    assert manifest["gguf"] is None and manifest["chunks"] == []
    assert {w.split("-")[0] for w in manifest["wheels"]} >= {"deepspeed", "pydantic", "hjson", "transformers"}
