"""Every input a user can get wrong ends `hf-jacobi` with exit code 1 and one line naming the input and the fix; the
traceback appears only with `--debug` or HF_JACOBI_DEBUG=1. Outputs are checked before any model is loaded, and a
refused command leaves its folders as they were.

Each row runs the command in-process on a tiny checkpoint (or fails before a model is needed), so the table costs a
few seconds; the one row that needs the embedded model's GGUF only hashes it, it never loads the model. The table runs
offline, as the suite does: a Hub id is looked up in an empty cache (a download is tested in test_hub_download).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants
from safetensors.torch import save as safetensors_bytes
from transformers import Gemma2Config, T5Config

from hf_jacobi import atomic, cli
from hf_jacobi.adapters import JACOBI_FORCING_WEIGHTS
from hf_jacobi.gguf_cache import GGUF_PACKAGE, MODEL_SUBDIR
from tiny_models import TINY_CONFIG, tiny_model, tiny_tokenizer

# Checkpoints that transformers refuses when it builds the model, before any weight is read (so none is saved).
NO_SDPA = {  # Gemma2 runs eager attention only
    "gemma2/config.json": Gemma2Config(**TINY_CONFIG, head_dim=8).to_json_string().encode(),
    "gemma2/model.safetensors": safetensors_bytes({}),
}
SEQ2SEQ_CONFIG = T5Config(vocab_size=128, d_model=32, num_layers=1, num_heads=2).to_json_string().encode()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def trajectories(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Trajectories of the tiny checkpoint, so that `train` gets past its data to the model flags."""
    folder = tmp_path_factory.mktemp("trajectories")
    argv = ["collect", "--model_name_or_path", str(checkpoint), "--prompts", "stdlib", "--num_prompts", "1"]
    assert cli.main([*argv, "--max_new_tokens", "4", "--block_size", "2", "--output_dir", str(folder)]) == 0
    return folder


def unreachable_hub(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens there
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)


def empty_hub_cache(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline (as the table runs) with an empty Hugging Face cache at {tmp}/hf-cache, which is not created."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp / "hf-cache"))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp / "hf-cache"))


def read_only_corrupt_cache(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        pytest.skip("the embedded model's GGUF package is not installed")
    root = tmp / "cache"
    (root / MODEL_SUBDIR).mkdir(parents=True)
    (root / MODEL_SUBDIR / "config.json").write_text("{ truncated")
    root.chmod(0o555)
    monkeypatch.setenv("HF_JACOBI_CACHE", str(root))
    if os.geteuid() == 0:  # root writes through file modes: make the probe meet the read-only mount it stands for
        real = atomic.tempfile.mkstemp

        def mkstemp(*args, dir=None, **kwargs):
            if Path(dir) == root:
                raise PermissionError(13, "Read-only file system")
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)


def other_model_trajectories(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """{tmp}/other: one trajectory of a model whose token ids (200) overrun the tiny checkpoint's 128-token vocabulary."""
    import datasets

    from hf_jacobi.data.trajectory_schema import TRAJECTORY_FEATURES, TrajectoryRow

    (tmp / "other").mkdir()
    (tmp / "other" / "collection.json").write_text('{"model": "org/other"}')
    row = TrajectoryRow("p/0", [1, 200], [200, 2], 2, [[[5, 6], [200, 2]]], [[200, 2]], 1).to_dict()
    shard = tmp / "other" / "trajectories-r000-00000.parquet"
    datasets.Dataset.from_list([row], features=TRAJECTORY_FEATURES).to_parquet(shard)


def model_without_tokenizer(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """{tmp}/m: a model saved without its tokenizer."""
    tiny_model("llama", 0).save_pretrained(tmp / "m")


@dataclass
class Case:
    """One bad input: the command line ({ck} the tiny checkpoint, {tmp} a fresh folder), files to write first, an
    extra setup, and a piece of the expected one-line message."""

    argv: list[str]
    message: str
    files: dict[str, bytes] = field(default_factory=dict)
    setup: Callable[[Path, pytest.MonkeyPatch], None] | None = None


GSM8K = ["bench", "--task", "gsm8k", "--output-dir", "{tmp}/out", "--data"]
GSM8K_ROW = {"gsm8k.jsonl": b'{"question": "a", "answer": "#### 1"}\n'}
COMMANDS = {  # each command with a --model flag, on inputs it accepts
    "generate": ["generate", "hi"],
    "demo": ["demo", "--prompts", "1", "--prompt-source", "stdlib"],
    "bench": [*GSM8K, "{tmp}/gsm8k.jsonl"],
    "tune": ["tune", "--output-dir", "{tmp}/tuned", "--prompt-source", "stdlib", "--prompts", "1"],
    "quality": ["quality", "--output-dir", "{tmp}/q", "--num-prompts", "1"],
    "magpie": ["magpie", "--num-prompts", "1", "--output", "{tmp}/m.jsonl"],
}
STEPS = {  # each recipe step (--model_name_or_path), on inputs it accepts, and the attention it takes
    "collect": (["collect", "--prompts", "stdlib", "--num_prompts", "1", "--output_dir", "{tmp}/traj"], "sdpa, eager"),
    "evaluate": (["evaluate", "--prompts", "stdlib", "--num_prompts", "1"], "sdpa, eager"),
    "train": (
        ["train", "--trajectories", "{traj}", "--output_dir", "{tmp}/run", "--use_cpu", "true", "--bf16", "false"],
        "sdpa, eager, flex_attention",
    ),
}
GSM8K_ROW = {"gsm8k.jsonl": b'{"question": "a", "answer": "#### 1"}\n'}
# the tiny checkpoint and a short run, so that a command that wrongly accepts its prompts ends in seconds
TINY_STEP = ["--model_name_or_path", "{ck}", "--num_prompts", "1", "--block_size", "2"]
TINY_BENCH = ["--model", "{ck}", "--limit", "1", "--max-new-tokens", "2", "--block-sizes", "2", "--no-compile"]
TINY_DEMO = ["--model", "{ck}", "--prompts", "1", "--max-new-tokens", "2"]
TINY_QUALITY = ["--model", "{ck}", "--num-prompts", "1", "--num-speed-prompts", "1", "--max-new-tokens", "2"]
NOT_CACHED = "'org/tiny' is not a local folder, and HF_HUB_OFFLINE=1 allows only the Hugging Face cache, which has no "
NOT_CACHED += "copy of it (no config.json) (HF_HUB_CACHE={tmp}/hf-cache)"
NO_SUCH_FOLDER = (
    "'./no/such/model' does not exist (expected a local checkpoint folder or a Hub model id such as org/name)"
)
FLASH = "--attn_implementation 'flash_attention_2' cannot take the 4D attention masks this step builds; accepted: "
SDPA_REFUSED = "could not be loaded: Gemma2ForCausalLM does not support an attention implementation through"
FLAG = "--model_name_or_path"
MODEL_CASES = {
    **{
        f"{name} --model Hub id not in the offline cache": Case(
            [*argv, "--model", "org/tiny"], f"--model {NOT_CACHED}", GSM8K_ROW, empty_hub_cache
        )
        for name, argv in COMMANDS.items()
    },
    **{
        f"{name} {FLAG} Hub id not in the offline cache": Case(
            [*argv, FLAG, "org/tiny"], f"{FLAG} {NOT_CACHED}", setup=empty_hub_cache
        )
        for name, (argv, _) in STEPS.items()
    },
    **{
        f"{name} {FLAG} folder missing": Case([*argv, FLAG, "./no/such/model"], f"{FLAG} {NO_SUCH_FOLDER}")
        for name, (argv, _) in STEPS.items()
    },
    **{
        f"{name} --attn_implementation flash_attention_2": Case(
            [*argv, FLAG, "{ck}", "--attn_implementation", "flash_attention_2"], FLASH + accepted
        )
        for name, (argv, accepted) in STEPS.items()
    },
    "evaluate --trained_model folder missing": Case(
        [*STEPS["evaluate"][0], FLAG, "{ck}", "--trained_model", "./no/such/model"],
        f"--trained_model {NO_SUCH_FOLDER}",
    ),
    **{
        f"{name} --adapter folder missing": Case(
            [*STEPS[name][0], FLAG, "{ck}", "--adapter", "{tmp}/none"],
            "--adapter '{tmp}/none' is not a PEFT adapter folder (missing",
        )
        for name in ("collect", "evaluate")
    },
    "generate model without sdpa attention": Case(
        [*COMMANDS["generate"], "--model", "{tmp}/gemma2"], "--model '{tmp}/gemma2' " + SDPA_REFUSED, NO_SDPA
    ),
    "collect model without sdpa attention": Case(
        [*STEPS["collect"][0], FLAG, "{tmp}/gemma2"], f"{FLAG} '{{tmp}}/gemma2' " + SDPA_REFUSED, NO_SDPA
    ),
    "generate an encoder-decoder model": Case(
        ["generate", "hi", "--model", "{tmp}/t5"],
        "--model '{tmp}/t5' could not be loaded: Unrecognized configuration class",
        {"t5/config.json": SEQ2SEQ_CONFIG},
    ),
    "bench unreadable config.json": Case(
        [*COMMANDS["bench"], "--model", "{tmp}/bad"],
        "--model '{tmp}/bad' could not be loaded:",
        {"bad/config.json": b"{ truncated", **GSM8K_ROW},
    ),
    "push a checkpoint folder that is not there": Case(
        ["push", "{tmp}/none", "--repo-id", "me/model", "--dry-run", "--output-dir", "{tmp}/rendered"],
        "Checkpoint folder '{tmp}/none' does not exist",
    ),
    "export-weights a folder without an adapter": Case(
        ["export-weights", "{ck}", "--output-dir", "{tmp}/weights"], "{ck} is not a PEFT adapter folder (missing"
    ),
    "tune a Hub id without --output-dir": Case(
        ["tune", "--model", "org/tiny"],
        "--model 'org/tiny' is a Hub id, not a folder to write the tuned settings into",
    ),
}
CASES = {
    "push to an unreachable endpoint": Case(
        ["push", "{ck}", "--repo-id", "me/model", "--token", "hf_x", "--output-dir", "{tmp}/rendered"],
        "could not reach the Hub at http://127.0.0.1:9",
        setup=unreachable_hub,
    ),
    "empty GSM8K JSONL": Case([*GSM8K, "{tmp}/gsm8k.jsonl"], "gsm8k.jsonl' holds no rows", {"gsm8k.jsonl": b""}),
    "non-UTF-8 problem file": Case(
        [*GSM8K, "{tmp}/gsm8k.jsonl"],
        "gsm8k.jsonl', line 2: not UTF-8 text (byte 0xe9",
        {"gsm8k.jsonl": b'{"question": "a", "answer": "#### 1"}\n{"question": "caf\xe9", "answer": "#### 2"}\n'},
    ),
    "non-UTF-8 prompt file": Case(
        ["collect", "--model_name_or_path", "{ck}", "--prompts", "{tmp}/p.jsonl", "--output_dir", "{tmp}/traj"],
        "p.jsonl', line 1: not UTF-8 text",
        {"p.jsonl": b'{"prompt": "caf\xe9"}\n'},
    ),
    "malformed JSONL line": Case(
        [*GSM8K, "{tmp}/gsm8k.jsonl"],
        "gsm8k.jsonl', line 2: not valid JSON",
        {"gsm8k.jsonl": b'{"question": "a", "answer": "#### 1"}\n{"question": \n'},
    ),
    "empty prompt without chat template": Case(
        ["generate", "", "--no-chat-template", "--model", "{ck}"], "encodes to no tokens with --no-chat-template"
    ),
    "read-only corrupt model cache": Case(
        ["generate", "hello"], "needs a rebuild (manifest", setup=read_only_corrupt_cache
    ),
    "bench --output-dir is a file": Case(
        ["bench", "--output-dir", "{tmp}/taken"], "--output-dir '{tmp}/taken' is a file", {"taken": b"x"}
    ),
    "tune --output-dir under a file": Case(
        ["tune", "--output-dir", "{tmp}/taken/tuned"], "'{tmp}/taken' is a file, not a folder", {"taken": b"x"}
    ),
    "quality --adapters without a label": Case(
        ["quality", "--adapters", "runs/x", "--output-dir", "{tmp}/q"], "--adapters takes LABEL=FOLDER"
    ),
    "quality adapter folder missing": Case(
        ["quality", "--adapters", "mine={tmp}/none", "--output-dir", "{tmp}/q"], "mine={tmp}/none: no such folder"
    ),
    "quality unknown setting": Case(
        ["quality", "--settings", "fast", "--output-dir", "{tmp}/q"], "--settings ['fast'] are not Jacobi variants"
    ),
    "quality unknown prompt set": Case(
        ["quality", "--sets", "requests", "nosuchset", "--output-dir", "{tmp}/q"], "--sets 'nosuchset'"
    ),
    "collect negative --stop_after_seconds": Case(
        ["collect", "--model_name_or_path", "{ck}", "--stop_after_seconds", "-5", "--output_dir", "{tmp}/traj"],
        "stop_after_seconds must be a number of seconds >= 0 or None, got -5.0",
    ),
    "collect --output_dir is a file": Case(
        ["collect", "--model_name_or_path", "{ck}", "--output_dir", "{tmp}/taken"],
        "--output_dir '{tmp}/taken' is a file",
        {"taken": b"x"},
    ),
    "train --output_dir is a file": Case(
        [
            "train",
            "--model_name_or_path",
            "{ck}",
            "--trajectories",
            "{tmp}",
            "--output_dir",
            "{tmp}/taken",
            "--use_cpu",
            "true",
            "--bf16",
            "false",
        ],
        "--output_dir '{tmp}/taken' is a file",
        {"taken": b"x"},
    ),
    "evaluate --output_file is a folder": Case(
        ["evaluate", "--model_name_or_path", "{ck}", "--output_file", "{tmp}"], "--output_file '{tmp}' is a folder"
    ),
    "tune --skip-prompts past the source": Case(
        ["tune", "--output-dir", "{tmp}/tuned", "--prompt-source", "stdlib", "--skip-prompts", "100000"],
        "--prompts 4 after --skip-prompts 100000: 'stdlib' (train) has only",
    ),
    "bench prompts task without chat turns": Case(
        ["bench", "--task", "prompts", "--no-chat", "--output-dir", "{tmp}/out"], "--no-chat is not accepted"
    ),
    "collect from an evaluation set": Case(
        ["collect", "--prompts", "humaneval", "--output_dir", "{tmp}/traj"], "'humaneval' is an evaluation set"
    ),
    "quality --rename without --merge": Case(
        ["quality", "--rename", "a=b", "--output-dir", "{tmp}/q"],
        "--rename a=b relabels the adapters of --merge runs: add --merge",
    ),
    "push a --repo-id that is not one": Case(
        ["push", "{ck}", "--repo-id", "my model", "--dry-run", "--output-dir", "{tmp}/rendered"],
        "--repo-id 'my model' is not a Hub repository id",
    ),
    "push a --recipe that is not there": Case(
        ["push", "{ck}", "--repo-id", "me/m", "--dry-run", "--output-dir", "{tmp}/r", "--recipe", "{tmp}/none.yaml"],
        "--recipe '{tmp}/none.yaml' is not a file",
    ),
    "export-weights into the adapter folder itself": Case(
        ["export-weights", "{tmp}/ad", "--output-dir", "{tmp}/ad"],
        "--output-dir '{tmp}/ad' is the adapter folder being exported",
        {"ad/adapter_config.json": b"{}", "ad/adapter_model.safetensors": safetensors_bytes({})},
    ),
    "export-weights into a folder holding other files": Case(
        ["export-weights", "{tmp}/ad", "--output-dir", "{tmp}/out"],
        "--output-dir '{tmp}/out' holds files an export does not write (notes.txt)",
        {"ad/adapter_config.json": b"{}", "ad/adapter_model.safetensors": b"", "out/notes.txt": b"mine"},
    ),
    "collect --config that is not YAML": Case(
        ["collect", "--config", "{tmp}/r.yaml"], "--config '{tmp}/r.yaml' is not valid YAML", {"r.yaml": b"a: [b\n"}
    ),
    "collect --config with a misspelt key": Case(
        ["collect", "--config", "{tmp}/r.yaml"],
        "has unknown key(s) blocksize (did you mean block_size?)",
        {"r.yaml": b"blocksize: 2\n"},
    ),
    "collect --config not there": Case(["collect", "--config", "{tmp}/none.yaml"], "'{tmp}/none.yaml' is not a file"),
    "collect a misspelt flag": Case(
        ["collect", "--blocksize", "2", "--output_dir", "{tmp}/traj"],
        "unknown argument(s) --blocksize (did you mean --block_size?)",
    ),
    "evaluate --batch_size 0": Case(["evaluate", "--batch_size", "0"], "batch_size must be an integer >= 1, got 0"),
    "evaluate --adapter and --trained_model": Case(
        ["evaluate", "--adapter", "{tmp}/a", "--trained_model", "{ck}"], "both name the trained model"
    ),
    "evaluate --base_results without a trained model": Case(
        ["evaluate", "--base_results", "{tmp}/r.json"], "give --adapter or --trained_model too"
    ),
    "evaluate --base_results not a report": Case(
        [*STEPS["evaluate"][0], *TINY_STEP, "--trained_model", "{ck}", "--base_results", "{tmp}/r.json"],
        "--base_results {tmp}/r.json: not a report of hf-jacobi evaluate --output_file (KeyError: 'settings')",
        {"r.json": b'{"model": "x"}'},
    ),
    "train on trajectories of another model's vocabulary": Case(
        ["train", "--trajectories", "{tmp}/other", *STEPS["train"][0][3:], "--model_name_or_path", "{ck}"],
        "--trajectories {tmp}/other hold token id 200, past the 128-token vocabulary of --model_name_or_path '{ck}': "
        "they were collected with another model (org/other)",
        setup=other_model_trajectories,
    ),
    "generate with a model folder that has no tokenizer": Case(
        ["generate", "hi", "--model", "{tmp}/m"],
        "--model '{tmp}/m' holds a model but no tokenizer (no tokenizer.json or tokenizer_config.json)",
        setup=model_without_tokenizer,
    ),
    "generate with an adapter of another base model": Case(
        ["generate", "hi", "--model", "{ck}", "--adapter", str(JACOBI_FORCING_WEIGHTS)],
        "does not fit this model: it was trained for another base model (size mismatch",
    ),
    "evaluate a split the prompt source does not have": Case(
        ["evaluate", *TINY_STEP, "--prompts", "stdlib", "--prompt_split", "test", "--max_new_tokens", "2"],
        "the stdlib prompt set has one split, 'train' (one pool of training prompts, nothing held out",
    ),
    "collect a split a local prompt file does not have": Case(
        ["collect", *TINY_STEP, "--prompts", "{tmp}/p.jsonl", "--prompt_split", "test", "--output_dir", "{tmp}/t"],
        "'{tmp}/p.jsonl' has one split, 'train' (a file or folder is read whole), got split='test'",
        {"p.jsonl": b'{"prompt": "a"}\n'},
    ),
    "bench prompts task on a split the source does not have": Case(
        ["bench", *TINY_BENCH, "--task", "prompts", "--data", "stdlib", "--split", "test", "--output-dir", "{tmp}/o"],
        "the stdlib prompt set has one split, 'train'",
    ),
    "demo a split the prompt source does not have": Case(
        ["demo", *TINY_DEMO, "--prompt-source", "humaneval", "--split", "train"],
        "the humaneval prompt set has one split, 'test' (the whole set, held out), got split='train'",
    ),
    "quality a set without a test split": Case(
        ["quality", *TINY_QUALITY, "--sets", "stdlib", "--output-dir", "{tmp}/q"],
        "--sets 'stdlib': the stdlib prompt set has one split, 'train'",
    ),
    "collect a prompt file without a prompt column": Case(
        ["collect", *TINY_STEP, "--prompts", "{tmp}/p.jsonl", "--output_dir", "{tmp}/traj"],
        "columns found: ['text']; accepted prompt columns: ['messages', 'conversations', 'prompt', 'input', "
        "'instruction', 'question'] (or pass --prompt_column NAME)",
        {"p.jsonl": b'{"text": "a"}\n'},
    ),
    "train on held-out prompts from a file without a prompt column": Case(  # read before the (broken) model loads
        [*STEPS["train"][0], "--model_name_or_path", "{tmp}/bad", "--heldout_prompts", "{tmp}/p.jsonl"],
        "columns found: ['text']; accepted prompt columns: ['messages', 'conversations', 'prompt', 'input', "
        "'instruction', 'question']",  # no hint: train has no column flag, and `column=` is Python's
        {"p.jsonl": b'{"text": "a"}\n', "bad/config.json": b"{ truncated"},
    ),
    **MODEL_CASES,
}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under `folder` with its size and modification time (0, 0 for a folder)."""
    return {
        str(path.relative_to(folder)): (0, 0) if path.is_dir() else (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
    }


def run(case: Case, tmp: Path, ck: Path, monkeypatch: pytest.MonkeyPatch, capsys, debug: bool = False, traj=None):
    for name, content in case.files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(content)
    if case.setup is not None:
        case.setup(tmp, monkeypatch)
    argv = [arg.format(tmp=tmp, ck=ck, traj=traj) for arg in case.argv]
    before = snapshot(tmp)
    code = cli.main(["--debug", *argv] if debug else argv)
    assert snapshot(tmp) == before, "a refused command wrote or removed files"
    return code, capsys.readouterr().err


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1, whatever the environment running the tests says (huggingface_hub read it at import)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_naming_it(name, tmp_path, checkpoint, trajectories, monkeypatch, capsys):
    monkeypatch.delenv("HF_JACOBI_DEBUG", raising=False)
    offline(monkeypatch)
    case = CASES[name]
    code, err = run(case, tmp_path, checkpoint, monkeypatch, capsys, traj=trajectories)
    assert code == 1
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert case.message.format(tmp=tmp_path, ck=checkpoint) in lines[0]


def test_a_missing_prompt_column_names_no_python_keyword_on_a_command_without_a_column_flag(
    tmp_path, checkpoint, trajectories, monkeypatch, capsys
):
    offline(monkeypatch)
    case = CASES["train on held-out prompts from a file without a prompt column"]
    code, err = run(case, tmp_path, checkpoint, monkeypatch, capsys, traj=trajectories)
    assert code == 1 and err.rstrip().endswith("'instruction', 'question']"), err


def test_a_failed_push_leaves_no_rendered_folder(tmp_path, checkpoint, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run(CASES["push to an unreachable endpoint"], tmp_path, checkpoint, monkeypatch, capsys)[0] == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [], "no rendered folder, no temporary leftovers"


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback(how, tmp_path, checkpoint, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if how == "environment":
        monkeypatch.setenv("HF_JACOBI_DEBUG", "1")
    code, err = run(CASES["malformed JSONL line"], tmp_path, checkpoint, monkeypatch, capsys, debug=how == "flag")
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "DatasetGenerationError" in err  # the cause is kept in the chain
    assert err.rstrip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("argv", [["generate", "hi"], ["collect"]])
def test_ctrl_c_is_one_line_and_exit_code_130(argv, monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.delenv("HF_JACOBI_DEBUG", raising=False)
    monkeypatch.setattr(cli.generate, "run_generate", interrupted)
    monkeypatch.setattr("hf_jacobi.cli.collect.run_collect", interrupted)
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip() == "error: interrupted (Ctrl-C)"
