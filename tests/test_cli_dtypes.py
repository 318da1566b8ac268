"""The dtype at the command line: where a departure from greedy is an error (float32) and where it is counted and
explained (a reduced precision), and `tune`'s search over dtypes. Tiny random Llama, seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_jacobi import cli
from hf_jacobi.bench import tune
from hf_jacobi.bench.tune import Candidate, DtypeSearch, TuneResult
from hf_jacobi.cli import common, generate
from hf_jacobi.cli.exactness import greedy_verdict, is_exact
from test_cli import tiny_checkpoint  # noqa: F401  (a fixture)


def test_a_departure_from_greedy_is_an_error_only_in_an_exact_dtype() -> None:
    assert is_exact("float32") and is_exact("torch.float32") and not is_exact("bfloat16")
    assert greedy_verdict("float32", 4, 4) == ("all 4 outputs identical to float32 greedy: yes", 0)
    line, code = greedy_verdict("float32", 3, 4)
    assert code == 1 and "1 of 4 outputs differ from greedy in float32" in line
    line, code = greedy_verdict("torch.bfloat16", 3, 4, "answers")
    assert code == 0 and line.startswith("3 of 4 answers identical to bfloat16 greedy") and "near-tie" in line


@pytest.mark.parametrize(("dtype", "code"), [("float32", 1), ("bfloat16", 0)])
def test_generate_compare_fails_on_a_difference_only_in_float32(
    tiny_checkpoint: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dtype: str,
    code: int,
) -> None:
    """The exit code exposes a Jacobi answer that departs from greedy (simulated by changing its last token) in float32,
    where it is a defect, and counts and explains it in bfloat16."""
    load_model = common.load_model

    def load_corrupted(path, dtype, jacobi_forcing=False, adapter=None):
        loaded = load_model(path, dtype, jacobi_forcing, adapter)
        original = loaded.model.generate

        def corrupted(*args, **kwargs):
            out = original(*args, **kwargs)
            if kwargs.get("decoding") == "jacobi" and kwargs.get("max_new_tokens", 0) > 2:
                out.sequences[:, -1] = (out.sequences[:, -1] + 1) % loaded.model.config.vocab_size
            return out

        loaded.model.generate = corrupted
        return loaded

    monkeypatch.setattr(generate, "load_model", load_corrupted)
    argv = ["generate", "hello", "--model", str(tiny_checkpoint), "--max-new-tokens", "8", "--compare"]
    assert cli.main([*argv, "--dtype", dtype]) == code
    out = capsys.readouterr()
    assert "identical: no" in out.out
    if code == 0:
        assert "0 of 1 answer identical to bfloat16 greedy (in a reduced precision" in out.out


def _result(dtype: str, chosen: float, greedy: float) -> TuneResult:
    return TuneResult("cpu", {1: 0.01}, 1, 0.0, [], [], choice=Candidate(8), dtype=dtype,
                      greedy_tokens_per_s=greedy, chosen_tokens_per_s=chosen)  # fmt: skip


def test_the_dtype_search_keeps_float32_unless_a_reduced_dtype_is_measurably_faster() -> None:
    close = DtypeSearch.choose({"bfloat16": _result("bfloat16", 20.5, 15), "float32": _result("float32", 20, 18)})
    assert close.dtype == "float32"  # 2.5% faster is within the margin: the exact dtype stays
    faster = DtypeSearch.choose({"bfloat16": _result("bfloat16", 40, 25), "float32": _result("float32", 20, 18)})
    assert faster.dtype == "bfloat16" and faster.chosen.dtype == "bfloat16"
    report = faster.report()
    assert report["dtype"] == "bfloat16" and set(report["dtype_search"]) == {"bfloat16", "float32"}
    assert report["dtype_search"]["float32"]["measured_tokens_per_s"] == 20


def test_tune_searches_the_dtype_and_writes_the_choice_with_the_settings(
    tiny_checkpoint: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With no --dtype, tune measures each dtype's own choice and keeps the fastest; acceptance is measured once (in
    the first dtype), forward costs and timings in each; --dtype tunes in that one alone."""
    monkeypatch.setattr(tune, "searched_dtypes", lambda device: ["bfloat16", "float32"])
    measured = []
    real = tune.measure_acceptance
    monkeypatch.setattr(
        tune, "measure_acceptance", lambda model, *a, **k: measured.append(model.dtype) or real(model, *a, **k)
    )
    argv = ["tune", "--model", str(tiny_checkpoint), "--prompts", "2", "--max-new-tokens", "6", "--block-sizes", "2"]
    argv += ["--num-blocks", "1", "--pool-sizes", "0", "--repeats", "1", "--rounds", "1"]
    out_dir = tmp_path / "searched"
    assert cli.main([*argv, "--output-dir", str(out_dir)]) == 0
    out = capsys.readouterr().out
    report = json.loads((out_dir / "jacobi_tune.json").read_text())
    assert [str(dtype) for dtype in measured] == ["torch.bfloat16"]
    assert list(report["dtype_search"]) == ["bfloat16", "float32"] and report["dtype"] in report["dtype_search"]
    assert all(entry["measured_tokens_per_s"] > 0 for entry in report["dtype_search"].values())
    assert "## bfloat16" in out and "## float32" in out and f"chosen dtype: {report['dtype']}" in out
    if report["dtype"] == "bfloat16":
        assert "from_pretrained(..., dtype=torch.bfloat16)" in out
    fixed = tmp_path / "fixed"
    assert cli.main([*argv, "--dtype", "float32", "--output-dir", str(fixed)]) == 0
    report = json.loads((fixed / "jacobi_tune.json").read_text())
    assert report["dtype"] == "float32" and "dtype_search" not in report
    assert report["measured_tokens_per_s"]["greedy"] > 0


def test_the_demo_says_whether_its_timings_were_steady() -> None:
    """Two models of one architecture decode greedily at one rate on a steady machine; the demo says when they did not."""
    from hf_jacobi.cli.demo import ModelRun, Row, steadiness

    rows = [Row("p", 100, 99, 40, True)]
    steady = steadiness(
        [ModelRun("a", rows, greedy_s=4.0, jacobi_s=2.0), ModelRun("b", rows, greedy_s=4.2, jacobi_s=2.0)]
    )
    assert steady.startswith("timings steady: greedy 25.0 vs 23.8 tokens/s") and "(5% apart)" in steady
    unsteady = steadiness(
        [ModelRun("a", rows, greedy_s=8.0, jacobi_s=2.0), ModelRun("b", rows, greedy_s=4.0, jacobi_s=2.0)]
    )
    assert unsteady.startswith("timings UNSTEADY: greedy 12.5 vs 25.0") and "run the demo again" in unsteady
