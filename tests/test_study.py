"""The study report: runs' held-out curves read back from trainer_state.json, tabulated and plotted."""

from __future__ import annotations

import json

import pytest

from lab.study import chain_runs, load_run, markdown_table, plot


def _write_run(folder, curve, in_checkpoint=False):
    history = [{"step": 1, "loss": 3.0}]
    for step, tokens, plain, both in curve:
        history.append(
            {
                "step": step,
                "num_input_tokens_seen": tokens,
                "heldout/plain_tokens_per_forward": plain,
                "heldout/both_tokens_per_forward": both,
                "heldout/distinct_3grams": 0.8,
                "heldout/reference_nll": 0.3 + step / 1000,
            }
        )
    target = folder / "checkpoint-40" if in_checkpoint else folder
    target.mkdir(parents=True)
    (target / "trainer_state.json").write_text(json.dumps({"log_history": history[::-1]}))


def test_runs_are_read_tabulated_and_plotted(tmp_path):
    _write_run(tmp_path / "full", [(0, 0, 1.07, 1.80), (20, 5000, 1.15, 1.95), (40, 10000, 1.25, 2.1)])
    _write_run(tmp_path / "lora", [(0, 0, 1.07, 1.80), (40, 10000, 1.10, 1.85)], in_checkpoint=True)
    runs = [load_run(tmp_path / "full"), load_run(tmp_path / "lora", name="LoRA r16")]
    assert [e["step"] for e in runs[0].entries] == [0, 20, 40]  # sorted, the loss entry left out
    assert runs[0].settings == ["plain", "both"]
    table = markdown_table(runs)
    assert "| full | 40 | 10,000 | 1.070 -> 1.250 | 1.800 -> 2.100 | 0.800 -> 0.800 | 0.300 -> 0.340 |" in table
    assert "| LoRA r16 | 40 |" in table
    png = plot(runs, tmp_path / "out" / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_held_out_figures_is_refused(tmp_path):
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 2.0}]}))
    with pytest.raises(ValueError, match="no held-out measurements: train with --heldout_prompts"):
        load_run(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"holds no trainer_state\.json"):
        load_run(tmp_path / "missing")


def test_the_study_command_writes_table_and_plot(tmp_path, capsys):
    from lab.__main__ import lab_main as main

    _write_run(tmp_path / "full", [(0, 0, 1.07, 1.80), (40, 10000, 1.25, 2.1)])
    assert main(["study", str(tmp_path / "full"), "--output-dir", str(tmp_path / "report")]) == 0
    assert "1.070 -> 1.250" in (tmp_path / "report" / "study.md").read_text()
    assert (tmp_path / "report" / "study.png").is_file()
    assert main(["study", str(tmp_path / "nothing-here")]) == 1
    assert "holds no trainer_state.json" in capsys.readouterr().err


def test_a_second_round_is_placed_after_the_round_it_continues(tmp_path, capsys):
    from lab.__main__ import lab_main as main

    _write_run(tmp_path / "round1", [(0, 0, 1.05, 1.8), (60, 1000, 1.15, 1.9)])
    _write_run(tmp_path / "round2", [(0, 0, 1.15, 1.9), (60, 1200, 1.26, 2.0)])
    _write_run(tmp_path / "round3", [(0, 0, 1.26, 2.0), (30, 500, 1.30, 2.1)])
    runs = [load_run(tmp_path / name) for name in ("round3", "round1", "round2")]
    third, first, second = chain_runs(runs, {"round2": "round1", "round3": "round2"})
    assert first.series("plain")[0] == [0, 1000]
    assert second.series("plain")[0] == [1000, 2200]
    assert third.series("plain")[0] == [2200, 2700]
    assert "| round3 | 30 | 2,200 + 500 |" in markdown_table([third])
    with pytest.raises(ValueError, match=r"--continues names 'round9', not a run of this study; runs: \['round1'"):
        chain_runs(runs, {"round9": "round1"})
    with pytest.raises(ValueError, match="--continues makes a cycle: round1 -> round2 -> round1"):
        chain_runs(runs, {"round1": "round2", "round2": "round1"})

    folders = [str(tmp_path / name) for name in ("round1", "round2")]
    out = ["--output-dir", str(tmp_path / "report")]
    assert main(["study", *folders, *out, "--continues", "round2=round1"]) == 0
    assert "| round2 | 60 | 1,000 + 1,200 |" in (tmp_path / "report" / "study.md").read_text()
    assert main(["study", *folders, *out, "--continues", "round2"]) == 1
    assert "--continues takes LATER=EARLIER (two run folder names), got 'round2'" in capsys.readouterr().err
