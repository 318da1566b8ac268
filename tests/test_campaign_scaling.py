"""The CPU campaign's judged rows and scaling curve (lab/campaigns/campaign/judging.py and scaling.py), from
hand-made judge outputs: the HumanEval evaluation joins its run's row, and the curve marks what meets its target."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).resolve().parents[1] / "lab" / "campaigns"
sys.path.insert(0, str(RECIPE))

from campaign import judging, scaling  # noqa: E402


def _quality(name: str, plain: float, both: float, collapsed: int) -> dict:
    judged = {"answers": 400, "collapsed": collapsed, "distinct_3grams": 0.7, "base_nll": 0.6}
    return {
        "name": name,
        "quality": {"judge.parquet": judged, "requests": {**judged, "answers": 48, "collapsed": 1}},
        "speed": [
            {"name": "plain", "tokens_per_forward": plain, "identical_to_greedy": True},
            {"name": "both", "tokens_per_forward": both, "identical_to_greedy": True},
        ],
    }


def _evaluation(base_plain: float, plain: float, second: tuple[str, float], identical: bool = True) -> dict:
    """An `hf-jacobi evaluate` report: plain and a `second` (name, multiple of plain) setting on each side."""

    def side(tpf: float) -> dict:
        name, times = second
        return {
            "settings": [
                {"name": "plain", "tokens_per_forward": tpf, "identical_to_greedy": identical},
                {"name": name, "tokens_per_forward": tpf * times, "identical_to_greedy": True},
            ]
        }

    return {"base": side(base_plain), "trained": side(plain)}


def _humaneval(base_plain: float, plain: float, identical: bool = True) -> dict:
    report = _evaluation(base_plain, plain, ("recycling", 2), identical)
    report["trained"]["humaneval_canonical_nll_vs_base"] = 0.99
    return report


def _judge_speed(base_plain: float, plain: float, identical: bool = True) -> dict:
    return _evaluation(base_plain, plain, ("both", 3), identical)


def _judged(tmp_path: Path) -> list[dict]:
    """A base judge and two runs: n2000 meets every bar, n5000 misses one; only n2000 has its HumanEval file, only
    n5000 its evaluation on the judging requests."""
    folders = {name: tmp_path / name for name in ("base", "lora-r16-n2000", "lora-r16-n5000")}
    for folder in folders.values():
        folder.mkdir()
    (folders["base"] / "quality.json").write_text(json.dumps({"models": [_quality("base", 1.07, 3.2, 40)]}))
    for name, plain, met in (("lora-r16-n2000", 1.7, True), ("lora-r16-n5000", 2.1, False)):
        results = {
            "models": [_quality("base", 1.07, 3.2, 40), _quality(name, plain, 4.0, 42)],
            "targets_met": {name: {"requests/collapse": True, "/runs/judge.parquet/distinct_3grams": met}},
        }
        (folders[name] / "quality.json").write_text(json.dumps(results))
    (folders["lora-r16-n2000"] / judging.HUMANEVAL_FILE).write_text(json.dumps(_humaneval(1.07, 1.2)))
    (folders["lora-r16-n5000"] / judging.JUDGE_SPEED_FILE).write_text(json.dumps(_judge_speed(1.05, 1.25)))
    return judging.read_judged(list(folders.values()), ["lora-r16-n2000", "lora-r16-n5000"])


def test_humaneval_evaluation_joins_its_runs_row_and_gives_the_base_its_side(tmp_path):
    base, first, second = _judged(tmp_path)
    assert base["tokens_per_forward"] == {"plain": 1.07, "both": 3.2, "humaneval-b8-plain": 1.07,
                                          "humaneval-b8-recycling": 2.14, "judge-b16-plain": 1.05,
                                          "judge-b16-both": pytest.approx(3.15)}  # fmt: skip
    assert base["canonical_nll_vs_base"] == 1.0
    assert first["tokens_per_forward"]["humaneval-b8-plain"] == 1.2 and first["canonical_nll_vs_base"] == 0.99
    assert "humaneval-b8-plain" not in second["tokens_per_forward"] and second["canonical_nll_vs_base"] is None
    assert "0.990x" in judging.markdown([base, first, second], {})


def test_judging_requests_speed_joins_its_runs_row_beside_the_packages_prompts(tmp_path):
    _, first, second = _judged(tmp_path)
    assert second["tokens_per_forward"]["judge-b16-plain"] == 1.25
    assert second["tokens_per_forward"]["judge-b16-both"] == pytest.approx(3.75)
    assert second["tokens_per_forward"]["plain"] == 2.1  # quality's own packages figure stays beside it
    assert "judge-b16-plain" not in first["tokens_per_forward"]


def test_judge_speed_runs_hf_jacobi_evaluate_on_the_judging_file_into_the_runs_folder(tmp_path):
    arguments = judging.JudgeSettings().judge_speed_arguments(None, Path("ad"), Path("judge.parquet"), tmp_path)
    assert arguments[:3] == ["evaluate", "--prompts", "judge.parquet"]
    assert arguments[arguments.index("--settings") + 1 : arguments.index("--block_size")] == ["plain", "both"]
    assert arguments[arguments.index("--adapter") + 1] == "ad" and "--model_name_or_path" not in arguments
    assert arguments[arguments.index("--output_file") + 1] == str(tmp_path / judging.JUDGE_SPEED_FILE)
    tiny = judging.JudgeSettings(tiny=True).judge_speed_arguments("tiny", Path("ad"), Path("j.parquet"), tmp_path)
    assert tiny[-6:] == judging.TINY_JUDGE_SPEED and tiny[tiny.index("--model_name_or_path") + 1] == "tiny"
    assert "--base_results" not in arguments
    reusing = judging.JudgeSettings().judge_speed_arguments(None, Path("ad"), Path("j.parquet"), tmp_path, Path("e"))
    assert reusing[reusing.index("--base_results") + 1] == "e"


def test_the_base_report_is_the_first_earlier_run_in_the_campaigns_dtype(tmp_path):
    """Reports of the evaluate before it recorded its dtype, of another dtype, or unreadable, are passed over."""
    settings, file = judging.JudgeSettings(), judging.JUDGE_SPEED_FILE
    assert settings.base_report(tmp_path, file) is None
    for name, text in {
        "a-old": json.dumps({"base": {}}),
        "b-broken": "{",
        "c-bf16": json.dumps({"dtype": "bfloat16"}),
        "d-run": json.dumps({"dtype": "float32"}),
        "e-run": json.dumps({"dtype": "float32"}),
    }.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / file).write_text(text)
    assert settings.base_report(tmp_path, file) == tmp_path / "d-run" / file
    assert settings.base_report(tmp_path, judging.HUMANEVAL_FILE) is None


@pytest.mark.parametrize("part", [judging.HUMANEVAL_FILE, judging.JUDGE_SPEED_FILE])
def test_an_evaluation_that_differs_from_greedy_makes_the_row_lossy(tmp_path, part):
    rows = _judged(tmp_path)
    assert rows[1]["lossless"] and rows[2]["lossless"]
    report = _humaneval(1.07, 1.2, False) if part == judging.HUMANEVAL_FILE else _judge_speed(1.05, 1.2, False)
    (tmp_path / "lora-r16-n2000" / part).write_text(json.dumps(report))
    assert not judging.read_judged([tmp_path / "lora-r16-n2000"], ["lora-r16-n2000"])[1]["lossless"]


def test_scaling_curve_orders_runs_by_prompts_and_bolds_only_targets_met(tmp_path):
    training = {"lora-r16-n2000": {"steps": 125, "rows_per_step": 32, "packages_prompts": 658, "epoch": 1.0}}
    curve = scaling.write_curve(_judged(tmp_path), tmp_path / "results", training)
    points = {p["name"]: p for p in curve["points"]}
    assert [(p["variant"], p["prompts"]) for p in curve["points"]] == [
        ("base", 0),
        ("lora-r16", 2000),
        ("lora-r16", 5000),
    ]
    assert points["lora-r16-n2000"]["judge_loops"] == [42, 400]
    assert points["lora-r16-n2000"]["steps"] == 125 and points["lora-r16-n2000"]["packages_prompts"] == 658
    assert points["lora-r16-n5000"]["steps"] is None  # no training record: unknown, not guessed
    assert points["lora-r16-n5000"]["tokens_per_forward"]["humaneval-b8-plain"] is None
    table = (tmp_path / "results" / "scaling.md").read_text()
    assert (
        "| lora-r16-n2000 | 2,000 | 658 | 125 x 32 | 2/2 | 42/400 | **1.700** | 4.000 | 1.200 | - | - | 0.990x | True |"
        in table
    )
    assert (
        "| lora-r16-n5000 | 5,000 | - | - | 1/2 (not: judge/distinct_3grams) | 42/400 | **2.100** | 4.000 | - | 1.250 | "
        "3.750 | - |" in table
    )  # no target on the judging requests: never bold
    assert "| base | 0 | - | - | - | 40/400 | 1.070 | 3.200 | 1.070 | 1.050 | 3.150 | 1.000x | True |" in table
    assert json.loads((tmp_path / "results" / "scaling.json").read_text()) == curve
    assert (tmp_path / "results" / "scaling.png").stat().st_size > 0


def test_a_variants_trend_is_its_gain_per_doubling_and_the_data_that_would_meet_the_target(tmp_path):
    def points(gain: float, sizes=(1000, 2000, 4000)) -> list[dict]:
        return [{"prompts": n, "tokens_per_forward": {"plain": 1.0 + gain * math.log2(n / 1000)}} for n in sizes]

    rising = scaling.trend(points(0.1), "plain", 1.6)
    assert rising["sizes"] == [1000, 2000, 4000]
    assert rising["per_doubling"] == pytest.approx(0.1)
    assert rising["prompts_for_target"] == pytest.approx(64_000)  # six doublings past 1,000 at 0.1 each
    noisy = [*points(0.1), {"prompts": 2000, "tokens_per_forward": {"plain": 1.1}}]  # a size counts once
    assert scaling.trend(noisy, "plain", 1.6)["sizes"] == [1000, 2000, 4000]
    assert scaling.trend(points(-0.1), "plain", 1.6)["prompts_for_target"] is None  # falling: never
    assert scaling.trend(points(0.1, sizes=(2000,)), "plain", 1.6) is None  # one size: no line
    curve = scaling.write_curve(_judged(tmp_path), tmp_path / "results")
    lines = curve["trends"]["lora-r16"]
    assert lines["plain"]["per_doubling"] == pytest.approx(0.4 / math.log2(2.5))
    assert lines["both"]["prompts_for_target"] is None and lines["humaneval-b8-plain"] is None
    assert lines["judge-b16-plain"] is None  # measured at one size only
    no_target = scaling.trend(points(0.1), "plain", None)
    assert no_target["per_doubling"] == pytest.approx(0.1) and no_target["prompts_for_target"] is None
    assert "Trend of lora-r16 over its 2 sizes (2,000, 5,000;" in scaling.markdown(curve).splitlines()[-1]
    assert "2 blocks + recycling, block 16 +0.000 per doubling (never at that rate)" in scaling.markdown(curve)


def test_run_names_must_carry_their_prompt_count():
    assert scaling.run_size("lora-r64-n9999") == ("lora-r64", 9999)
    with pytest.raises(ValueError, match="'lora-r16' is not <variant>-n<prompts>"):
        scaling.run_size("lora-r16")


def test_a_shipped_adapter_judged_by_the_campaign_is_the_reference_with_its_judging_requests(tmp_path):
    rows = _judged(tmp_path)
    shipped = {**rows[1], "name": "shipped", "bars": {"met": 10, "of": 10, "failed": []}}
    curve = scaling.scaling_points([*rows, shipped])
    assert [p["name"] for p in curve["points"]] == ["base", "lora-r16-n2000", "lora-r16-n5000"]
    reference = curve["reference"]
    assert reference["prompts"] == 2024 and reference["judge_loops"] == [42, 400]
    table = scaling.markdown(curve)
    assert "| shipped | 2,024 | 1,800 | 250 x 4 | 10/10 | 42/400 |" in table  # its training, from its model card
    assert "shipped: the adapter the package shipped while the campaign ran" in table
    unjudged = scaling.scaling_points(rows)
    assert unjudged["reference"] is None and "shipped" not in scaling.markdown(unjudged)


def test_the_humaneval_gate_is_read_from_the_recipes_makefile(tmp_path):
    assert judging.HUMANEVAL_GATE[:2] == ["--prompts", "humaneval"]
    assert judging.HUMANEVAL_GATE[judging.HUMANEVAL_GATE.index("--block_size") + 1] == "8"
    makefile = tmp_path / "Makefile"
    makefile.write_text("GATE += --more\nOTHER := 1\nGATE ?= --name 'two words'\nall:\n\trun --GATE=x\n")
    assert judging.make_variable("GATE", makefile) == ["--name", "two words"]
    with pytest.raises(LookupError, match="defines no ABSENT"):
        judging.make_variable("ABSENT", makefile)
