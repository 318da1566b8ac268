"""The bench (tasks, runner, summary, table, plot, JSON) on tiny models."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from hf_jacobi import JacobiConfig, enable_jacobi, measurement
from hf_jacobi.bench import report, runner
from hf_jacobi.bench.runner import run_bench
from hf_jacobi.bench.settings import AR_COMPILED, AR_STATIC, JACOBI, Setting, bench_settings, path_variants
from hf_jacobi.bench.tasks import BenchItem, BenchTask, Score, load_task
from hf_jacobi.cli import main
from tiny_models import fresh_tiny_model, tiny_model, tiny_tokenizer

DATA = Path(__file__).parent / "data"


def word_task(count: int, scored: list | None = None) -> BenchTask:
    """Prompts in the tiny vocabulary; an item is "correct" when its completion has an even number of words, which
    only the completion decides, so every lossless setting must score alike."""

    def score(items, completions):
        if scored is not None:
            scored.extend(completions)
        return [Score(len(c.split()) % 2 == 0, "scored") for c in completions]

    items = [
        BenchItem(f"w/{i}", " ".join(f"t{3 + (i * 5 + j * 7) % 120}" for j in range(3 + i)), None)
        for i in range(count)
    ]
    return BenchTask("words", "accuracy", items, chat=False, stop_strings=(), score=score)


@pytest.fixture(scope="module")
def gemma():
    return enable_jacobi(tiny_model("gemma", 0))  # its text repeats, so recycling has something to find


def test_run_bench_times_scores_and_checks_every_setting(gemma):
    scored: list[str] = []
    task = word_task(3, scored)
    jacobi = bench_settings([4, 8], ["plain", "both"], compiled_baseline=False)[1:]
    settings = [Setting("AR (generate)", "ar"), Setting("AR (static cache)", AR_STATIC), *jacobi]
    run = run_bench(gemma, tiny_tokenizer(), task, settings, max_new_tokens=20, batch_size=2, progress=False)
    assert [s.name for s in run.settings] == [s.name for s in settings]
    assert len(run.samples) == 3 * len(settings) and len(run.timings) == 2 * len(settings)
    assert all(s.identical for s in run.samples)
    assert len(scored) == len({(s.item_id, s.completion) for s in run.samples})  # each distinct text scored once
    rows = report.summarize(run)
    ar, static, *jacobi = rows
    assert ar["speedup_vs_ar"] == pytest.approx(1.0) and ar["forwards"] == ar["new_tokens"] - 3  # n - 1 per row
    assert all(r["score"] == ar["score"] and r["identical"] == 3 for r in rows)
    assert all(r["tokens_per_forward"] > ar["tokens_per_forward"] for r in jacobi)
    both = [r for r in jacobi if r["variant"] == "both"]
    assert all(r["tokens_per_forward"] >= 1.0 for r in both)
    assert all(r["decode_tokens_per_s"] > r["tokens_per_s"] for r in rows)  # excluding the prefill can only help
    best_ar = max(ar["tokens_per_s"], static["tokens_per_s"])
    assert all(r["speedup_vs_best_ar"] == pytest.approx(r["tokens_per_s"] / best_ar) for r in rows)


def test_a_setting_that_changes_the_text_is_caught(gemma, monkeypatch):
    original = runner.decode

    def corrupt(model, inputs, max_new_tokens, settings=None, **kwargs):
        decoded = original(model, inputs, max_new_tokens, settings, **kwargs)
        if settings.get("decoding") == "jacobi":  # one Jacobi answer changed; greedy's untouched
            decoded.answers[0] = [*decoded.answers[0][:-1], decoded.answers[0][-1] + 1]
        return decoded

    monkeypatch.setattr(runner, "decode", corrupt)
    settings = bench_settings([4], ["plain"], compiled_baseline=False)
    run = run_bench(gemma, tiny_tokenizer(), word_task(1), settings, max_new_tokens=8, progress=False)
    assert [s.identical for s in run.samples] == [True, False]


def test_compiled_baseline_falls_back_to_static_cache_when_compilation_fails(gemma, monkeypatch):
    decode = runner._Decoder.decode

    def failing(self, setting, inputs, max_new_tokens=None):
        if setting.kind == AR_COMPILED:
            raise RuntimeError("no C++ compiler")
        return decode(self, setting, inputs, max_new_tokens)

    monkeypatch.setattr(runner._Decoder, "decode", failing)
    run = run_bench(gemma, tiny_tokenizer(), word_task(1), bench_settings([4], ["plain"]), 8, progress=False)
    assert [s.kind for s in run.settings] == ["ar", AR_STATIC, "jacobi"]
    assert "torch.compile failed here (RuntimeError: no C++ compiler)" in run.notes[0]
    assert "Note: torch.compile failed" in report.notes(run, report.summarize(run), 1, 8)
    # the fallback ran no compiled baseline, so the notes claim no compile mode
    assert "torch.compile mode" not in report.notes(run, report.summarize(run), 1, 8)


def test_the_compiled_baseline_keeps_one_static_cache_across_its_calls(monkeypatch):
    """generate makes a new static cache every call, and new tensors under a recorded CUDA graph make torch capture it
    again: the compiled baseline gets one cache, sized for the longest prompt, reset before each of its calls (warm-up
    and timed alike), and stays identical to plain greedy. Compiled here with dynamo's eager backend, to stay short."""
    from transformers import CompileConfig, StaticCache

    from hf_jacobi.bench import settings as bench_settings_module

    monkeypatch.setattr(
        bench_settings_module, "CompileConfig", lambda **kwargs: CompileConfig(backend="eager", mode=None)
    )
    model = enable_jacobi(tiny_model("llama", 0))
    caches = []
    generate = model.generate

    def spying(*args, **kwargs):
        if kwargs.get("compile_config") is not None:
            caches.append(next(v for k, v in kwargs.items() if isinstance(v, StaticCache)))
            assert "cache_implementation" not in kwargs
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spying)
    torch._dynamo.reset()
    settings = [s for s in bench_settings([4], ["plain"]) if s.kind != JACOBI]
    run = run_bench(model, tiny_tokenizer(), word_task(3), settings, max_new_tokens=8, progress=False, rounds=2)
    assert len(caches) == 2 + 3 * 2 and len({id(cache) for cache in caches}) == 1  # warm-up, then 3 prompts twice
    assert all(s.identical for s in run.samples)
    torch._dynamo.reset()


def test_the_compiled_baseline_is_transformers_default_reduce_overhead_and_says_so():
    (setting,) = [s for s in bench_settings([4], ["plain"]) if s.kind == AR_COMPILED]
    kwargs = setting.generate_kwargs(torch.device("cpu"))
    assert kwargs["cache_implementation"] == "static" and kwargs["compile_config"].mode == "reduce-overhead"
    run = runner.BenchRun("words", "accuracy", [setting])
    assert "torch.compile mode 'reduce-overhead'" in report.notes(run, report.summarize(run), 1, 8)


def test_settings_and_tasks_refuse_bad_input():
    with pytest.raises(ValueError, match=r"unknown Jacobi variants \['fast'\]"):
        bench_settings([4], ["fast"])
    with pytest.raises(ValueError, match="the first setting must be plain AR"):
        run_bench(None, None, word_task(1), bench_settings([4], ["plain"])[2:])
    with pytest.raises(ValueError, match="task must be one of"):
        load_task("mmlu")
    with pytest.raises(ValueError, match="needs --data"):
        load_task("gsm8k")
    with pytest.raises(ValueError, match="takes no data file"):
        load_task("humaneval", data="x.jsonl")


def test_math_tasks_build_prompts_and_score_answers():
    task = load_task("gsm8k", data=str(DATA / "gsm8k_sample.jsonl"), limit=2)
    assert task.metric == "accuracy" and task.uses_chat(tiny_tokenizer()) and len(task.items) == 2
    assert task.items[0].text.endswith("within \\boxed{}.")
    right = f"So the total is \\boxed{{{task.items[0].reference}}}."
    assert [s.correct for s in task.score(task.items, [right, "I think 123456789."])] == [True, False]
    raw = load_task("math", data=str(DATA / "math_sample.jsonl"), limit=1)
    tokenizer = tiny_tokenizer()
    seen = []

    def recording(text, **kwargs):
        seen.append(text)
        return tokenizer(text, **kwargs)

    recording.chat_template = None
    recording.pad_token_id = (
        tokenizer.pad_token_id
    )  # no template: the math task falls back to a raw "Question: ... Answer:" prompt
    encoded = raw.encode(recording, raw.items)
    assert encoded["input_ids"].shape == encoded["attention_mask"].shape
    assert seen == [f"Question: {raw.items[0].text}\nAnswer:"]


def test_humaneval_task_scores_by_running_the_tests():
    task = load_task("humaneval", limit=1, timeout_s=5)
    body = (
        "    for i, a in enumerate(numbers):\n        for b in numbers[i + 1:]:\n"
        "            if abs(a - b) < threshold:\n                return True\n    return False\n"
    )
    scores = task.score(task.items * 2, [body + "\ndef extra():\n    pass\n", "    return True\n"])
    assert [s.correct for s in scores] == [True, False]


def test_humaneval_as_a_chat_turn_scores_the_answers_code_block():
    task = load_task("humaneval", limit=1, chat=True, timeout_s=5)
    assert task.chat and task.stop_strings == () and "```python\nfrom typing import List" in task.items[0].text
    answer = (
        "Here it is:\n```python\nfrom typing import List\n\n\ndef has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```\n"
        "It compares every pair."
    )
    scores = task.score(task.items * 2, [answer, "It compares every pair of numbers."])
    assert [s.correct for s in scores] == [True, False]


def test_rounds_time_the_whole_set_again_and_report_medians_with_their_range(gemma, monkeypatch):
    task = word_task(2)
    settings = bench_settings([4], ["both"], compiled_baseline=False)
    clock = iter(range(1000))  # every timed call takes one more second than the one before
    monkeypatch.setattr(measurement, "timed", lambda fn: (fn(), float(next(clock) + 1)))
    monkeypatch.setattr(runner, "_warm_up", lambda *args: None)  # untimed runs would take ticks of the clock
    run = run_bench(gemma, tiny_tokenizer(), task, settings, 8, batch_size=2, progress=False, rounds=3)
    assert len(run.samples) == 2 * 2 and len(run.timings) == 3 * 2  # outputs once, timings every round
    ar, jacobi = report.summarize(run)
    assert ar["rounds"] == 3 and ar["seconds"] == 3.0  # rounds took 1, 3 and 5 s for AR: the median
    tokens = ar["new_tokens"]
    assert ar["tokens_per_s"] == pytest.approx(tokens / 3) and ar["tokens_per_s_range"] == pytest.approx(
        [tokens / 5, tokens]
    )
    assert jacobi["speedup_vs_ar"] == pytest.approx(statistics.median([1 / 2, 3 / 4, 5 / 6]))
    assert jacobi["speedup_vs_best_ar_range"] == pytest.approx([1 / 2, 5 / 6])
    table = report.markdown_table([ar, jacobi], "accuracy")
    assert "tok/s (median of 3 rounds, range)" in table and "| 0.75x (0.50-0.83) |" in table
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        run_bench(gemma, tiny_tokenizer(), task, settings, rounds=0)


def test_prompts_task_times_held_out_prompts_without_scoring(gemma, tmp_path):
    task = load_task("prompts", limit=2)  # default: the packages test split, never collected from
    assert task.name == "prompts:packages/test" and task.chat is True and len(task.items) == 2
    assert all(item.item_id.startswith("pkg/") and item.text for item in task.items)
    run = run_bench(gemma, tiny_tokenizer(), task, bench_settings([4], ["both"], False), 6, progress=False)
    rows = report.summarize(run)
    assert [r["score"] for r in rows] == [None, None] and all(r["identical"] == 2 for r in rows)
    assert "| - |" in report.markdown_table(rows, task.metric)
    two_turns = tmp_path / "chat.jsonl"
    two_turns.write_text(
        json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]}) + "\n"
    )
    with pytest.raises(ValueError, match="has 2 turns \\(system, user\\); the prompts task takes one user turn"):
        load_task("prompts", data=str(two_turns))


def test_skip_takes_a_later_slice_of_the_problems():
    """A setting chosen on one slice of a prompt set is reported on another: --skip N --limit M reads problems
    N+1..N+M, with their own ids."""
    first = load_task("prompts", limit=6)
    later = load_task("prompts", skip=4, limit=2)
    assert [item.item_id for item in later.items] == [item.item_id for item in first.items[4:6]]
    assert [item.item_id for item in load_task("gsm8k", data=str(DATA / "gsm8k_sample.jsonl"), skip=1).items] == [
        item.item_id for item in load_task("gsm8k", data=str(DATA / "gsm8k_sample.jsonl")).items[1:]
    ]
    with pytest.raises(ValueError, match="skip must be an integer >= 0, got -1"):
        load_task("prompts", skip=-1)
    with pytest.raises(ValueError, match=r"skip=\d+ leaves none of the \d+ problems of gsm8k"):
        load_task("gsm8k", data=str(DATA / "gsm8k_sample.jsonl"), skip=1000)


def test_batch_forwards_count_each_batchs_slowest_row():
    """A batch decodes until its last row is done, so at batch > 1 the bench reports the forwards the batches ran
    (their slowest rows') beside the rows' tokens per forward, which alone would overstate the speedup."""
    setting = Setting("Jacobi plain n=4", JACOBI, block_size=4, variant="plain")

    def sample(item: str, batch: int, forwards: int) -> runner.SampleResult:
        return runner.SampleResult(setting.name, item, batch, 5, 12, forwards, False, True, "x")

    run = runner.BenchRun("words", "accuracy", [setting])
    run.samples = [sample("a", 0, 3), sample("b", 0, 9), sample("c", 1, 4), sample("d", 1, 2)]
    (row,) = report.summarize(run)
    assert row["forwards"] == 18 and row["tokens_per_forward"] == pytest.approx(48 / 18)
    assert row["batch_forwards"] == 9 + 4
    table = report.markdown_table([row], "accuracy")
    assert "| tokens/forward | batch forwards |" in table and "| 2.67 | 13 |" in table
    assert "batch forwards = the forwards each batch ran" in report.notes(run, [row], 2, 12)
    # batch 1: every batch is one row, the column would repeat the forwards, so it is left out
    run.samples = [sample(item, i, 3) for i, item in enumerate("abcd")]
    (row,) = report.summarize(run)
    assert row["batch_forwards"] == row["forwards"] == 12
    assert "batch forwards" not in report.markdown_table([row], "accuracy")
    assert "batch forwards" not in report.notes(run, [row], 1, 12)


def test_collapsed_answers_are_counted_and_said_beside_the_speed():
    setting = Setting("Jacobi plain n=4", JACOBI, block_size=4, variant="plain")
    loop, varied = [7, 8, 9, 10] * 20, list(range(80))
    run = runner.BenchRun("words", "accuracy", [setting])
    for item, tokens in (("a", loop), ("b", varied), ("c", loop)):
        run.samples.append(
            runner.SampleResult(
                setting.name, item, 0, 5, len(tokens), 9, False, True, "x", collapsed=measurement.collapsed(tokens)
            )
        )
    (row,) = report.summarize(run)
    assert row["collapsed"] == 2
    assert "2 of 3 answers of the first setting collapsed into a loop" in report.notes(run, [row], 1, 80)


def test_table_json_and_plot_are_written(gemma, tmp_path):
    run = run_bench(gemma, tiny_tokenizer(), word_task(2), bench_settings([2, 4], ["plain"], False), 8, progress=False)
    rows = report.summarize(run)
    table = report.markdown_table(rows, "accuracy")
    assert table.splitlines()[0].startswith("| setting | accuracy | tokens/forward |")
    assert len(table.splitlines()) == 2 + len(rows) and "| Jacobi plain n=4 |" in table and "| 2/2 |" in table
    report.write_json(tmp_path / "bench.json", run, rows, {"task": "words"})
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["summary"] == rows and len(saved["samples"]) == 6 and saved["meta"]["task"] == "words"
    report.plot(tmp_path / "bench.png", rows, "tiny")
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_tune_and_bench_commands_refuse_bad_input(capsys):
    assert main(["tune"]) == 1
    assert "must not be edited: give --output-dir" in capsys.readouterr().err
    for argv in (["bench", "--limit", "0"], ["bench", "--variants", "fast"], ["bench", "--task", "mmlu"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2


def test_the_compiled_path_twins_each_jacobi_setting_on_a_static_compiled_cache(gemma):
    """`--jacobi-paths eager compiled`: every Jacobi setting twice, the twin on the static cache with its forward
    compiled; both exact, the twin with the same forwards, and the first divergence recorded where answers differ."""
    settings = bench_settings([4], ["both"], compiled_baseline=False, paths=["eager", "compiled"])
    settings.append(Setting.model_defaults(gemma.generation_config, "compiled"))
    eager, twin, default = settings[1:]
    assert twin.name == "Jacobi both n=4 (compiled static cache)" and twin.compiled and not eager.compiled
    assert (twin.config.cache_implementation, twin.config.compile) == ("static", "always")
    assert twin.config.block_size == eager.config.block_size and twin.config.num_blocks == 2
    assert default.compiled and "compiled static cache" in default.name
    assert twin.generate_kwargs(gemma.device)["jacobi_cache_implementation"] == "static"
    with pytest.raises(ValueError, match="unknown Jacobi path 'graph'"):
        bench_settings([4], ["both"], paths=["graph"])
    run = run_bench(gemma, tiny_tokenizer(), word_task(2), settings[:3], max_new_tokens=12, progress=False)
    rows = report.summarize(run)
    assert [r["path"] for r in rows] == ["eager", "eager", "compiled"]
    assert rows[1]["forwards"] == rows[2]["forwards"] and all(r["identical"] == 2 for r in rows)
    assert all(r["differing_common_prefix"] is None for r in rows)
    assert all(s.common_prefix == s.new_tokens for s in run.samples)
    # each setting's warm-up is timed apart; the notes say what compiling cost before the first token
    assert set(run.warmup_seconds) == {s.name for s in settings[:3]}
    assert all(seconds > 0 for seconds in run.warmup_seconds.values())
    said = report.notes(run, rows, 1, 12).split("timing uses): ")[1].splitlines()[0].rstrip(".").split("; ")
    assert [entry.rsplit(" ", 2)[0] for entry in said] == [twin.name]  # the eager twin compiles nothing


def test_static_widths_time_the_static_paths_once_per_width_count(gemma):
    """`--jacobi-paths eager static compiled --static-widths 1 3`: the eager path once, the static cache (forward not
    compiled) and the compiled path once per count, each named by it; all exact, with the eager path's forwards."""
    settings = bench_settings(
        [4], ["both"], compiled_baseline=False, paths=["eager", "static", "compiled"], static_widths=[1, 3]
    )
    assert [(s.name, s.path) for s in settings[1:]] == [
        ("Jacobi both n=4", "eager"),
        ("Jacobi both n=4 (eager static cache in 1 width)", "static"),
        ("Jacobi both n=4 (eager static cache in 3 widths)", "static"),
        ("Jacobi both n=4 (compiled static cache in 1 width)", "compiled"),
        ("Jacobi both n=4 (compiled static cache in 3 widths)", "compiled"),
    ]
    assert [s.config.static_widths for s in settings[1:]] == [None, 1, 3, 1, 3]
    assert [s.compiled for s in settings[1:]] == [False, False, False, True, True]
    assert settings[3].generate_kwargs(torch.device("cpu"))["jacobi_static_widths"] == 3
    assert path_variants(["eager", "compiled"], [1, 3]) == [("eager", None), ("compiled", 1), ("compiled", 3)]
    run = run_bench(gemma, tiny_tokenizer(), word_task(2), settings[:4], max_new_tokens=12, progress=False)
    rows = report.summarize(run)
    assert [r["path"] for r in rows] == ["eager", "eager", "static", "static"]
    assert len({r["forwards"] for r in rows[1:]}) == 1 and all(r["identical"] == 2 for r in rows)
    assert "(eager static cache) = " in report.notes(run, rows, 1, 12)


def test_the_machine_line_names_the_cpu_model(tmp_path, monkeypatch):
    """Two CPU machines of one kind can differ in their processor, and CPU speeds compare only within one machine, so
    the machine line of every table names the model where Linux tells it, and is the plain architecture elsewhere."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\n")
    assert report._cpu_model_name(str(cpuinfo)) == "AMD EPYC 7B13"
    assert report._cpu_model_name(str(tmp_path / "missing")) is None
    monkeypatch.setattr(report, "_cpu_model_name", lambda: "AMD EPYC 7B13")
    assert report.machine_description("cpu").startswith("CPU AMD EPYC 7B13 (")
    monkeypatch.setattr(report, "_cpu_model_name", lambda: None)
    assert "EPYC" not in report.machine_description("cpu")


def test_explicit_jacobi_rows_run_jacobi_where_the_model_falls_back_and_the_default_row_says_it_does(tmp_path):
    """A checkpoint whose generation config decodes greedily on this device (jacobi_greedy_devices) must not turn the
    bench's explicit Jacobi rows into greedy under a Jacobi label; only the model-defaults row follows the fallback,
    and its label names it."""
    model = enable_jacobi(fresh_tiny_model("gemma", 0))  # its generation config is changed: not the cached one
    JacobiConfig(block_size=4, ngram_pool_size=2, greedy_devices=("cpu",)).write_to(model.generation_config)
    explicit = bench_settings([4], ["plain", "both"], compiled_baseline=False)[1:]
    default = Setting.model_defaults(model.generation_config)
    run = run_bench(
        model, tiny_tokenizer(), word_task(2), [Setting("AR", "ar"), *explicit, default], 16, 2, progress=False
    )
    rows = {row["setting"]: row for row in report.summarize(run)}
    ar = rows["AR"]
    for setting in explicit:
        assert rows[setting.name]["tokens_per_forward"] > ar["tokens_per_forward"]  # Jacobi ran: fewer forwards
    assert "greedy where the model falls back: cpu" in default.name
    with pytest.warns(UserWarning, match="decodes greedily on cpu"):
        kwargs = default.generate_kwargs(model.device)
        model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2, **kwargs)
    assert rows[default.name]["tokens_per_forward"] == pytest.approx(ar["tokens_per_forward"])
