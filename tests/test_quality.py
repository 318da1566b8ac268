"""The quality evaluation: loops are caught, agreement with the base is counted, code runs against its tests, and the
whole protocol runs on a tiny model with every Jacobi output still checked against greedy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_jacobi.data.quality_sets import load_code_tasks
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.measurement import COLLAPSE_WINDOW, collapsed, common_prefix
from hf_jacobi.quality import protocol as quality_eval
from hf_jacobi.quality.answers import answer_quality, passed_code_tasks
from hf_jacobi.quality.protocol import (
    ModelQuality,
    QualityProtocol,
    RequestSet,
    measure_jacobi_answers,
    measure_model,
    targets_met,
)
from hf_jacobi.quality.report import markdown_table, plot_front
from tiny_models import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def varied(length: int, start: int = 0) -> list[int]:
    return list(range(start, start + length))


def test_a_loop_that_fills_the_window_collapses_and_varied_or_short_answers_do_not():
    loop = varied(40) + [7, 8, 9, 10] * (COLLAPSE_WINDOW // 4)
    assert collapsed(loop)
    assert not collapsed(varied(128))
    # an answer that ended by itself before the window never counts, however repetitive
    assert not collapsed([5, 6] * (COLLAPSE_WINDOW // 2 - 1))
    # the bar: a period of 25 tokens leaves 25 of the tail's 61 4-grams distinct (41%), a period of 24 leaves 39%
    assert not collapsed((varied(25) * 3)[:COLLAPSE_WINDOW])
    assert collapsed((varied(24) * 3)[:COLLAPSE_WINDOW])


def test_common_prefix_and_agreement_with_the_base():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1], [2]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2
    base = [varied(10), varied(10, 100)]
    model = [varied(10), [*varied(5, 100), 0]]
    quality = answer_quality(model, base_nll=0.5, base_answers=base)
    assert quality.identical_to_base == 1
    assert quality.mean_common_prefix == (10 + 5) / 2
    assert quality.tokens == 16 and quality.collapsed == 0 and quality.code_passed is None
    own = answer_quality(base, base_nll=0.4)
    assert own.identical_to_base is None and own.mean_common_prefix is None
    with pytest.raises(ValueError, match="2 answers against 1 base answers"):
        answer_quality(model, base_nll=0.5, base_answers=base[:1])


def test_code_answers_pass_only_when_their_code_passes_the_tests():
    tasks = load_code_tasks(3)
    right = [f"Here you go:\n```python\n{task.canonical_solution}```\nIt works." for task in tasks]
    wrong = [f"```python\ndef {task.entry_point}(*args, **kwargs):\n    return None\n```" for task in tasks]
    assert passed_code_tasks(tasks, right, workers=2) == [True, True, True]
    assert passed_code_tasks(tasks, wrong, workers=2) == [False, False, False]
    # prose without code fails rather than raising
    assert passed_code_tasks(tasks[:1], ["I cannot write that."]) == [False]
    with pytest.raises(ValueError, match="one answer per code task"):
        passed_code_tasks(tasks, right[:2])


def test_targets_compare_each_figure_with_the_base():
    base, model = ModelQuality("base"), ModelQuality("adapter")
    base.quality["requests"] = answer_quality([varied(64, s) for s in range(0, 1000, 100)], base_nll=0.5)
    loops = [[7, 8, 9, 10] * 16 for _ in range(2)] + [varied(64, s) for s in range(0, 800, 100)]
    model.quality["requests"] = answer_quality(loops, base_nll=0.55, base_answers=[[1]] * 10)
    checks = targets_met(model, base)
    assert checks["requests/collapse"] is False  # 2 of 10 collapsed against none
    assert checks["requests/base_nll"] is True  # 1.1x is within 1.2x
    assert checks["requests/distinct_3grams"] is False  # (8 x 62 + 4) / 620 = 0.81x of the base's 1.0


def test_humaneval_answers_run_after_the_prompt_and_its_bars_are_loops_and_pass_at_1():
    """HumanEval in the judge: a chat answer's code runs after the problem's stub (the whole function or only the
    body), and the set's bars are a user's: loops at most 3 points above the base's, pass@1 at most one below."""
    from hf_jacobi.data.humaneval import load_humaneval
    from hf_jacobi.quality.answers import DEFAULT_SETS, HUMANEVAL

    assert HUMANEVAL in DEFAULT_SETS
    problems = load_humaneval(3)
    whole = [f"```python\n{p.prompt}{p.canonical_solution}```" for p in problems]
    body = [p.canonical_solution for p in problems]
    wrong = [f"```python\ndef {p.entry_point}(*args):\n    return None\n```" for p in problems]
    assert passed_code_tasks(problems, whole, workers=2) == [True, True, True]
    assert passed_code_tasks(problems, body, workers=2) == [True, True, True]
    assert passed_code_tasks(problems, wrong, workers=2) == [False, False, False]

    def row(name: str, passed: int, loops: int) -> ModelQuality:
        model = ModelQuality(name)
        answers = [[7, 8, 9, 10] * 16] * loops + [varied(64, s) for s in range(0, 100 * (100 - loops), 100)]
        model.quality[HUMANEVAL] = answer_quality(
            answers, base_nll=9.0, passed=[True] * passed + [False] * (100 - passed)
        )
        return model

    base = row("base", passed=20, loops=1)
    assert targets_met(row("a", passed=19, loops=4), base) == {"humaneval/collapse": True, "humaneval/pass@1": True}
    assert targets_met(row("b", passed=18, loops=1), base)["humaneval/pass@1"] is False  # two problems fewer
    assert targets_met(row("c", passed=25, loops=5), base)["humaneval/collapse"] is False  # 5% against 1% + 3 points


def tiny_protocol() -> QualityProtocol:
    prompts = [[5, 9, 14, 3], [8, 40, 41], [100, 101, 102]]
    return QualityProtocol(
        sets=[RequestSet("requests", prompts)],
        speed_prompts=prompts[:2],
        settings={"plain": JacobiConfig(block_size=4), "both": JacobiConfig(block_size=4, num_blocks=2)},
        max_new_tokens=12,
        batch_size=2,
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The whole protocol on a tiny random model: the 'adapter' is another seed of the same family."""
    tokenizer = tiny_tokenizer()
    base_model, other = tiny_model("llama", 0), tiny_model("llama", 1)
    protocol = tiny_protocol()
    base = measure_model("base", base_model, base_model, tokenizer, protocol)
    model = measure_model("other", other, base_model, tokenizer, protocol, base)
    return base, model


def test_the_protocol_scores_the_base_against_itself_and_a_model_against_the_base(measured):
    base, model = measured
    assert base.quality["requests"].identical_to_base is None
    assert model.quality["requests"].identical_to_base is not None
    assert base.quality["requests"].answers == model.quality["requests"].answers == 3
    # the base scores its own greedy answers no worse than another model's
    assert base.quality["requests"].base_nll <= model.quality["requests"].base_nll
    assert [s.name for s in model.speed] == ["plain", "both"]
    assert base.identical_to_greedy and model.identical_to_greedy
    assert json.loads(json.dumps(model.to_dict()))["speed"][0]["tokens_per_forward"] > 0


def test_the_table_and_the_front_plot(measured, tmp_path):
    base, model = measured
    table = markdown_table([base, model], base)
    lines = table.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| model | plain tokens/forward | both tokens/forward | set")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert lines[3].startswith("| other |")
    path = plot_front([base, model], tmp_path / "front.png", "requests")
    assert path.stat().st_size > 1000


def _tiny_quality_command(tmp_path: Path) -> list[str]:
    """`hf-jacobi quality` on a tiny checkpoint saved under tmp_path, at toy sizes."""
    folder = tmp_path / "tiny"
    tiny_model("llama", 0).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    common = ["quality", "--model", str(folder), "--num-prompts", "2", "--num-speed-prompts", "1"]
    return [*common, "--max-new-tokens", "6", "--block-size", "4", "--settings", "plain"]


def test_the_command_writes_its_files_and_reuses_an_earlier_base_of_the_same_protocol(tmp_path, capsys):
    from hf_jacobi.cli import main

    common = _tiny_quality_command(tmp_path)
    assert main([*common, "--output-dir", str(tmp_path / "first")]) == 0
    first = json.loads((tmp_path / "first" / "quality.json").read_text())
    assert [m["name"] for m in first["models"]] == ["base"] and first["protocol"]["prompts"] == {
        "requests": 2,
        "code-tasks": 2,
        "humaneval": 2,
    }
    answers = json.loads((tmp_path / "first" / "answers.json").read_text())
    assert len(answers["base"]["code-tasks"]["tokens"]) == len(answers["base"]["code-tasks"]["texts"]) == 2
    assert (tmp_path / "first" / "quality.png").is_file() and (tmp_path / "first" / "quality.md").is_file()
    base_line = next(
        line for line in (tmp_path / "first" / "quality.md").read_text().splitlines() if "| base |" in line
    )

    reused = [*common, "--output-dir", str(tmp_path / "second"), "--base-results", str(tmp_path / "first")]
    assert main(reused) == 0
    second = json.loads((tmp_path / "second" / "quality.json").read_text())
    assert second["models"] == first["models"] and second["base_results"] == str(tmp_path / "first")
    assert base_line in (tmp_path / "second" / "quality.md").read_text()

    capsys.readouterr()
    other = [arg if arg != "6" else "8" for arg in reused]
    assert main(other) == 1
    assert "was measured with another protocol (differs in ['max_new_tokens'])" in capsys.readouterr().err

    answers_file = tmp_path / "first" / "answers.json"
    answers_file.write_text(json.dumps({"base": {"requests": ["text only"]}}))
    capsys.readouterr()
    assert main(reused) == 1
    assert "answers.json holds no token ids" in capsys.readouterr().err

    # --merge: runs of one protocol read as one study, nothing decoded
    (answers_file).write_text(json.dumps(answers))
    adapter_run = tmp_path / "adapter-run"
    adapter_run.mkdir()
    with_adapter = {**first, "models": [*first["models"], {**first["models"][0], "name": "mine"}]}
    (adapter_run / "quality.json").write_text(json.dumps(with_adapter))
    (adapter_run / "answers.json").write_text(json.dumps({**answers, "mine": {"requests": ["old text-only format"]}}))
    merged_dir = tmp_path / "merged"
    merge_args = ["quality", "--merge", str(tmp_path / "first"), str(adapter_run)]
    assert main([*merge_args, "--output-dir", str(merged_dir)]) == 0
    merged = json.loads((merged_dir / "quality.json").read_text())
    assert [m["name"] for m in merged["models"]] == ["base", "mine"]
    renamed = [*merge_args, "--rename", "mine=round9", "--output-dir", str(tmp_path / "renamed")]
    assert main(renamed) == 0
    assert "| round9 |" in (tmp_path / "renamed" / "quality.md").read_text()
    assert "round9" in json.loads((tmp_path / "renamed" / "answers.json").read_text())
    assert merged["targets_met"]["mine"]["requests/collapse"] is True
    merged_answers = json.loads((merged_dir / "answers.json").read_text())
    assert merged_answers["mine"]["requests"] == {"texts": ["old text-only format"]}
    assert (merged_dir / "quality.png").is_file() and "| mine |" in (merged_dir / "quality.md").read_text()
    # the same answers scored on another device (a GPU's float32 against a CPU's): figures a few parts per million apart
    # still merge; a real difference in a figure is refused
    for folder_results in (first, with_adapter):
        folder_results["models"][0]["quality"]["requests"]["distinct_3grams"] = 0.5
    (tmp_path / "first" / "quality.json").write_text(json.dumps(first))
    for factor, exit_code in ((1 + 3e-6, 0), (1.01, 1)):
        nudged = json.loads(json.dumps(with_adapter))
        nudged["models"][0]["quality"]["requests"]["distinct_3grams"] *= factor
        (adapter_run / "quality.json").write_text(json.dumps(nudged))
        assert main([*merge_args, "--output-dir", str(tmp_path / "nudged")]) == exit_code
    assert "'base' has other figures" in capsys.readouterr().err
    capsys.readouterr()
    other_protocol = json.loads((tmp_path / "first" / "quality.json").read_text())
    other_protocol["protocol"]["max_new_tokens"] = 99
    (adapter_run / "quality.json").write_text(json.dumps(other_protocol))
    assert (
        main(["quality", "--merge", str(tmp_path / "first"), str(adapter_run), "--output-dir", str(merged_dir)]) == 1
    )
    assert "was measured with another model or protocol" in capsys.readouterr().err


def jacobi_models():
    """The tiny base, and the 'adapter' with Jacobi settings of its own in its generation config (as a trained
    adapter's has), so that each row decodes with its own model's defaults."""
    base_model, other = tiny_model("llama", 0), tiny_model("llama", 1)
    JacobiConfig(block_size=4, ngram_pool_size=2).write_to(other.generation_config)
    return base_model, other


@pytest.fixture(scope="module")
def jacobi_rows(measured):
    """Each model's answers decoded by Jacobi with its own default settings, in float32."""
    base, other = measured
    base_model, other_model = jacobi_models()
    protocol, tokenizer = tiny_protocol(), tiny_tokenizer()
    return (
        measure_jacobi_answers(base, base_model, base_model, tokenizer, protocol),
        measure_jacobi_answers(other, other_model, base_model, tokenizer, protocol, base),
    )


def without(figures: dict, *keys: str) -> dict:
    return {k: v for k, v in figures.items() if k not in keys}


def test_in_float32_jacobi_answers_are_the_greedy_answers_and_judged_the_same(measured, jacobi_rows):
    base, other = measured
    base_jacobi, other_jacobi = jacobi_rows
    # the base sets no Jacobi settings, so JacobiConfig's defaults decode it; the adapter decodes with its own
    assert base_jacobi.name == "base · Jacobi (block 16, JacobiConfig defaults)"
    assert other_jacobi.name == "other · Jacobi (block 4, pool 2)"
    assert other_jacobi.jacobi_of == "other" and other_jacobi.jacobi_settings["greedy_devices"] == ()
    for greedy, jacobi in ((base, base_jacobi), (other, other_jacobi)):
        quality = jacobi.quality["requests"]
        assert quality.identical_to_own_greedy == quality.answers == 3
        assert jacobi.answers == greedy.answers
    # judged against the base's greedy answers: the base's Jacobi row agrees with them everywhere
    assert base_jacobi.quality["requests"].identical_to_base == 3
    base_figures = base.quality["requests"].to_dict()
    assert without(base_jacobi.quality["requests"].to_dict(), "identical_to_own_greedy", "identical_to_base") == (
        without(base_figures, "identical_to_base") | {"mean_common_prefix": base_figures["tokens"] / 3}
    )
    assert without(other_jacobi.quality["requests"].to_dict(), "identical_to_own_greedy") == (
        other.quality["requests"].to_dict()
    )
    assert targets_met(other_jacobi, base) == targets_met(other, base)
    # greedy rows keep the keys runs wrote before Jacobi rows existed; Jacobi rows read back whole from JSON
    assert (
        "jacobi_of" not in other.to_dict() and "identical_to_own_greedy" not in other.to_dict()["quality"]["requests"]
    )
    read = ModelQuality.from_dict(json.loads(json.dumps(other_jacobi.to_dict())), other_jacobi.answers)
    assert read.to_dict() == json.loads(json.dumps(other_jacobi.to_dict()))


def test_the_table_and_the_front_show_the_jacobi_rows(measured, jacobi_rows, tmp_path):
    base, other = measured
    models = [base, jacobi_rows[0], other, jacobi_rows[1]]
    lines = markdown_table(models, base).splitlines()
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    column = head.index("identical to its own greedy")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[0] for row in rows] == [m.name for m in models]
    assert [row[column] for row in rows] == ["-", "3 of 3", "-", "3 of 3"]
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    # without Jacobi rows the table keeps its columns (`hf-jacobi demo`, committed runs)
    assert "identical to its own greedy" not in markdown_table([base, other], base)
    assert plot_front(models, tmp_path / "front.png", "requests").stat().st_size > 1000


def test_jacobi_answers_that_differ_are_counted_and_judged_as_they_are(measured, monkeypatch):
    """Where Jacobi's answers are not greedy's (bfloat16), the row judges Jacobi's: a loop in one of them shows."""
    base, other = measured
    loop = [7, 8, 9, 10] * 16
    calls = []

    def jacobi_answers(model, prompts, max_new_tokens, batch_size, config):
        calls.append(config)
        greedy = other.answers["requests"]
        return [loop, *greedy[1:]]

    monkeypatch.setattr(quality_eval, "batched_answers", jacobi_answers)
    _, other_model = jacobi_models()
    row = measure_jacobi_answers(other, other_model, tiny_model("llama", 0), tiny_tokenizer(), tiny_protocol(), base)
    assert calls == [JacobiConfig(block_size=4, ngram_pool_size=2, greedy_devices=())]
    quality = row.quality["requests"]
    assert quality.identical_to_own_greedy == 2 < quality.answers == 3
    assert quality.collapsed == 1 and quality.tokens == len(loop) + sum(map(len, other.answers["requests"][1:]))
    assert targets_met(other, base)["requests/collapse"] is True
    assert targets_met(row, base)["requests/collapse"] is False  # 1 of 3 collapsed against the base's none
    assert "| 2 of 3 |" in markdown_table([base, other, row], base)


def test_the_command_decodes_jacobi_answers_reuses_them_and_merges_them(tmp_path, monkeypatch, capsys):
    from hf_jacobi.cli import main

    common = _tiny_quality_command(tmp_path)
    assert main([*common, "--output-dir", str(tmp_path / "greedy")]) == 0
    # an earlier run without --jacobi-answers lends its base, and the base's Jacobi row is measured
    earlier = ["--base-results", str(tmp_path / "greedy")]
    assert main([*common, "--jacobi-answers", *earlier, "--output-dir", str(tmp_path / "jacobi")]) == 0
    results = json.loads((tmp_path / "jacobi" / "quality.json").read_text())
    label = "base · Jacobi (block 16, JacobiConfig defaults)"
    assert [m["name"] for m in results["models"]] == ["base", label]
    jacobi = results["models"][1]
    assert jacobi["jacobi_of"] == "base" and set(jacobi["quality"]) == {"requests", "code-tasks", "humaneval"}
    for figures in jacobi["quality"].values():
        assert figures["identical_to_own_greedy"] == figures["answers"] == 2
    assert all(results["targets_met"][label].values())
    answers = json.loads((tmp_path / "jacobi" / "answers.json").read_text())
    assert answers[label] == answers["base"]
    assert "identical to its own greedy" in (tmp_path / "jacobi" / "quality.md").read_text()

    # a run with --jacobi-answers lends its base's Jacobi row too: nothing is decoded for it again
    def refuse(*args, **kwargs):
        raise AssertionError("the base's Jacobi answers were decoded again")

    monkeypatch.setattr(quality_eval, "measure_jacobi_answers", refuse)
    reused = [*common, "--jacobi-answers", "--base-results", str(tmp_path / "jacobi")]
    assert main([*reused, "--output-dir", str(tmp_path / "reused")]) == 0
    assert json.loads((tmp_path / "reused" / "quality.json").read_text())["models"] == results["models"]

    # --merge keeps Jacobi rows, and --rename relabels an adapter's together with it
    adapter_run = tmp_path / "adapter-run"
    adapter_run.mkdir()
    mine, mine_jacobi = {**results["models"][0], "name": "mine"}, {**jacobi, "name": "mine · Jacobi (block 4)"}
    mine_jacobi["jacobi_of"] = "mine"
    with_adapter = {**results, "models": [*results["models"], mine, mine_jacobi]}
    (adapter_run / "quality.json").write_text(json.dumps(with_adapter))
    extra = {"mine": answers["base"], "mine · Jacobi (block 4)": answers["base"]}
    (adapter_run / "answers.json").write_text(json.dumps({**answers, **extra}))
    merge = ["quality", "--merge", str(tmp_path / "jacobi"), str(adapter_run), "--rename", "mine=round9"]
    assert main([*merge, "--output-dir", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "quality.json").read_text())
    assert [m["name"] for m in merged["models"]] == ["base", label, "round9", "round9 · Jacobi (block 4)"]
    assert merged["models"][3]["jacobi_of"] == "round9"
    assert "round9 · Jacobi (block 4)" in json.loads((tmp_path / "merged" / "answers.json").read_text())
    assert "| round9 · Jacobi (block 4) |" in (tmp_path / "merged" / "quality.md").read_text()
    capsys.readouterr()
    assert main([*merge, "--jacobi-answers", "--output-dir", str(tmp_path / "merged")]) == 1
    assert "it takes no --adapters, --base-results or --jacobi-answers" in capsys.readouterr().err


def test_committed_runs_without_jacobi_rows_still_merge(tmp_path):
    """Runs written before --jacobi-answers existed read as they are, and a merge of them writes what it did."""
    from hf_jacobi.cli import main

    runs = [ROOT / "docs" / "results" / "quality-cpu" / name for name in ("repair-step100", "repair-step171")]
    assert main(["quality", "--merge", *map(str, runs), "--output-dir", str(tmp_path)]) == 0
    written = (tmp_path / "quality.json").read_text()
    assert "jacobi" not in written and "identical_to_own_greedy" not in written
    assert "identical to its own greedy" not in (tmp_path / "quality.md").read_text()


def test_the_flag_is_offered(capsys):
    from hf_jacobi.cli import main

    with pytest.raises(SystemExit):
        main(["quality", "--help"])
    assert "--jacobi-answers" in capsys.readouterr().out
