"""Every input a user can get wrong ends `hf-jacobi` with exit code 1 and one line naming the input and the fix; the
traceback appears only with `--debug` or HF_JACOBI_DEBUG=1. Outputs are checked before any model is loaded.

Each row runs the command in-process on a tiny checkpoint (or fails before a model is needed), so the table costs a
few seconds; the one row that needs the embedded model's GGUF only hashes it, it never loads the model.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants

from hf_jacobi import atomic, cli
from hf_jacobi.gguf_cache import GGUF_PACKAGE, MODEL_SUBDIR
from tiny_models import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def unreachable_hub(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens there
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)


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


@dataclass
class Case:
    """One bad input: the command line ({ck} the tiny checkpoint, {tmp} a fresh folder), files to write first, an
    extra setup, and a piece of the expected one-line message."""

    argv: list[str]
    message: str
    files: dict[str, bytes] = field(default_factory=dict)
    setup: Callable[[Path, pytest.MonkeyPatch], None] | None = None


GSM8K = ["bench", "--task", "gsm8k", "--output-dir", "{tmp}/out", "--data"]
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
}


def run(case: Case, tmp: Path, ck: Path, monkeypatch: pytest.MonkeyPatch, capsys, debug: bool = False):
    for name, content in case.files.items():
        (tmp / name).write_bytes(content)
    if case.setup is not None:
        case.setup(tmp, monkeypatch)
    argv = [arg.format(tmp=tmp, ck=ck) for arg in case.argv]
    code = cli.main(["--debug", *argv] if debug else argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_naming_it(name, tmp_path, checkpoint, monkeypatch, capsys):
    monkeypatch.delenv("HF_JACOBI_DEBUG", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # main() sets it when unset; keep that from leaking into other tests
    case = CASES[name]
    code, err = run(case, tmp_path, checkpoint, monkeypatch, capsys)
    assert code == 1
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert case.message.format(tmp=tmp_path) in lines[0]


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
