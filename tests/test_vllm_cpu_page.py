"""The vLLM CPU benchmark's results page (lab/benchmarks/vllm_cpu.py) is rendered from its JSON: the committed page of the
shipped adapter must be what `--render` writes from the committed JSON, its medians must be the rounds' medians, and
every round must be on the page (a lead smaller than the spread of the rounds is noise). Needs no vLLM: the script
imports it only to run an engine."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "vllm-cpu" / "base-scale"


def _script():
    return load_script(ROOT / "lab" / "benchmarks" / "vllm_cpu.py")


def test_the_committed_page_is_rendered_from_its_json(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "vllm-cpu.json", tmp_path / "vllm-cpu.json")
    assert _script().main(["--render", str(tmp_path / "vllm-cpu.json")]) == 0
    assert (tmp_path / "vllm-cpu.md").read_text() == (RESULTS / "vllm-cpu.md").read_text()


def test_medians_are_the_rounds_medians_and_every_round_is_shown() -> None:
    report = json.loads((RESULTS / "vllm-cpu.json").read_text())
    rounds = report["rounds"]
    assert len(rounds) == report["settings"]["rounds"] > 1
    page = _script().markdown(report)
    for setting, methods in report["median"].items():
        for method, row in methods.items():
            figures = [r[setting][method]["tokens_per_second"] for r in rounds]
            assert row["tokens_per_second"] == statistics.median(figures)
            assert f"| {setting} | {method} | {', '.join(f'{x:.2f}' for x in figures)} |" in page
            assert row["identical"] == row["requests"]  # every vLLM output equal to transformers' greedy


def test_one_round_has_no_per_round_table() -> None:
    report = json.loads((RESULTS / "vllm-cpu.json").read_text())
    report["rounds"] = report["rounds"][:1]
    assert "per round" not in _script().markdown(report)
