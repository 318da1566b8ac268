"""The overhead benchmark's measurement and summary, on a tiny model (figures are checked for sense, not speed)."""

from __future__ import annotations

import argparse
import math

import pytest
from transformers import BatchEncoding

from hf_jacobi import enable_jacobi
from hf_jacobi.bench.common import VARIANTS
from hf_jacobi.data.humaneval import load_humaneval
from lab.commands import overhead as overhead_command
from lab.forward_cost import forward_cost_curve
from lab.overhead import (
    cost_curve_table,
    markdown_table,
    measure_variant,
    run_greedy,
    run_overhead,
    summarize,
)
from tiny_models import random_prompts, tiny_model


def fake_tokenizer(text, return_tensors="pt"):
    ids, mask = random_prompts(1, 10, seed=len(text))
    return BatchEncoding({"input_ids": ids, "attention_mask": mask})


def test_measure_and_summarize_on_a_tiny_model():
    model = enable_jacobi(tiny_model("gemma", 0))  # its output repeats, so recycling has something to find
    greedy = [run_greedy(model, fake_tokenizer, f"t/{i}", "x" * (i + 1), max_new_tokens=24) for i in range(2)]
    results = [
        measure_variant(model, reference, variant, block_size=4, max_new_tokens=24, repeats=2)
        for variant in VARIANTS
        for reference in greedy
    ]
    for r in results:
        assert r.identical
        assert 1 <= r.forwards <= r.new_tokens - 1
        assert r.tokens_per_forward >= 1.0
        # iteration_s subtracts the greedy call's prefill from the Jacobi call's time: on a tiny model both take
        # microseconds and the difference may come out below zero, so only the timed forward's sign is asserted
        assert math.isfinite(r.iteration_s) and r.bare_forward_s > 0
        assert r.mean_width > 1  # blocks near the end are capped by the remaining token budget
    rows = summarize(results)
    assert [(row["variant"], row["block_size"]) for row in rows] == [(v, 4) for v in VARIANTS]
    plain, recycling = rows[0], rows[1]
    assert plain["vs_plain"] == 1.0 and plain["recycled_tokens"] == 0
    assert recycling["recycled_tokens"] > 0 and recycling["vs_plain"] > 1.0
    for row in rows:
        assert row["new_tokens"] == sum(r.new_tokens for r in results if r.variant == row["variant"])
        assert row["tokens_per_forward"] == row["new_tokens"] / row["forwards"]
        assert row["all_identical"] is True
    table = markdown_table(rows)
    assert table.count("\n") == 1 + len(VARIANTS) and "| plain | 4 |" in table and "| yes |" in table


def test_humaneval_prompts_come_from_the_package():
    prompts = [(problem.task_id, problem.prompt) for problem in load_humaneval(3)]
    assert [task for task, _ in prompts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert all(prompt.lstrip().startswith(("from", "def", "import")) for _, prompt in prompts)


def test_forward_cost_curve_is_relative_to_one_token():
    model = tiny_model("llama", 0)
    context, _ = random_prompts(1, 12, seed=0)
    curve = forward_cost_curve(model, context, [1, 4, 20], repeats=2)
    assert [point["tokens"] for point in curve] == [1, 4, 20]
    assert curve[0]["vs_one_token"] == 1.0
    assert all(point["forward_ms"] > 0 for point in curve)


def test_run_overhead_measures_every_variant_and_the_cost_curve():
    model = enable_jacobi(tiny_model("gemma", 0))
    prompts = [("t/0", "x"), ("t/1", "xy")]
    run = run_overhead(model, fake_tokenizer, prompts, ["plain", "both"], [4], 16, 1, [4], progress=False)
    assert [(r.task_id, r.variant) for r in run.results] == [(t, v) for v in ("plain", "both") for t, _ in prompts]
    assert [row["variant"] for row in run.rows] == ["plain", "both"] and all(r["all_identical"] for r in run.rows)
    assert [point["tokens"] for point in run.curve] == [1, 4] and run.context_tokens == 10 + 8
    assert set(run.to_json()) == {"summary", "forward_costs", "prompts"} and len(run.to_json()["prompts"]) == 4
    assert cost_curve_table(run.curve).splitlines()[:2] == [
        "| tokens | forward ms | x one-token forward = break-even tokens/forward |",
        "|---|---|---|",
    ]


def test_overhead_command_line_refuses_bad_input():
    parser = argparse.ArgumentParser()
    overhead_command.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["overhead", "--block-sizes", "8", "16", "--variants", "plain", "both", "--json", "o.json"]
    )
    assert (args.block_sizes, args.variants, args.prompts, args.forward_costs) == ([8, 16], ["plain", "both"], 8, [])
    for argv in (["--prompts", "0"], ["--variants", "fast"], ["--forward-costs", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["overhead", *argv])
        assert exit_info.value.code == 2


def test_overhead_json_naming_a_folder_is_one_line(tmp_path, monkeypatch, capsys):
    # the case `hf-jacobi overhead` had in test_cli_errors.py, now that the command is the lab's (`python -m lab`)
    from lab.__main__ import lab_main

    monkeypatch.delenv("HF_JACOBI_DEBUG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert lab_main(["overhead", "--json", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert f"--json '{tmp_path}' is a folder" in lines[0]
