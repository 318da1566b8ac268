"""A Hub model id, as a user with internet and their own model gives it: downloaded by `hf-jacobi generate --model`,
`hf-jacobi collect --model_name_or_path` and the Python API from the in-process fake Hub (`fake_hub`) into an empty
cache, decoded exactly as greedy; refused in one line when the download fails or, under HF_HUB_OFFLINE=1, when the
cache lacks it. The user's environment decides: no command sets HF_HUB_OFFLINE or seeds torch's global generator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi
from huggingface_hub import constants as hub_constants

import hf_jacobi
from hf_jacobi import cli, enable_jacobi
from hf_jacobi.data.collection import load_trajectories
from hf_jacobi.loading import ModelLoadError
from tiny_models import tiny_model, tiny_tokenizer

REPO = "org/tiny"
PROMPT = "t5 t9 t5 t9 t5"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model a user would have pushed: random Llama weights, a word-level tokenizer with a chat template."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def hub(fake_hub, tiny_folder: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake Hub serving `REPO`, with huggingface_hub online and an empty cache (the fixture's own HF_HOME), in an
    environment that does not set HF_HUB_OFFLINE: a user's with internet."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    api = HfApi(endpoint=fake_hub.endpoint, token="hf_fake")
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=tiny_folder)
    fake_hub.requests.clear()  # from here on: what the commands ask for
    assert not any(Path(hub_constants.HF_HUB_CACHE).glob("models--*")), "the cache starts empty"
    return fake_hub


def go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 as the user sets it; huggingface_hub read it at import, so its constant follows."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


def downloaded(hub, filename: str) -> bool:
    """Whether `filename` of `REPO` was fetched (at whichever revision: transformers resolves main to a commit)."""
    return any(call.startswith(f"GET /{REPO}/resolve/") and call.endswith(f"/{filename}") for call in hub.calls())


def error_line(err: str) -> str:
    """The one `error:` line of a failed command, with no traceback around it."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def collect_argv(model: str, tmp_path: Path) -> list[str]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["t5 t6 t7", "t9 t8"]))
    out = ["--output_dir", str(tmp_path / "trajectories"), "--max_new_tokens", "8", "--block_size", "4"]
    return ["collect", "--model_name_or_path", model, "--prompts", str(prompts), *out]


def test_generate_downloads_a_hub_id_and_matches_greedy(hub, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["generate", PROMPT, "--model", REPO, "--compare", "--max-new-tokens", "12"])
    out = capsys.readouterr().out
    assert code == 0 and "identical: yes" in out, out
    assert downloaded(hub, "config.json") and downloaded(hub, "model.safetensors") and hub.unhandled == []
    assert list(Path(hub_constants.HF_HUB_CACHE).glob("models--org--tiny/snapshots/*/model.safetensors"))


def test_collect_downloads_a_hub_id(hub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(collect_argv(REPO, tmp_path))
    assert code == 0, capsys.readouterr().err
    assert len(load_trajectories(tmp_path / "trajectories")) == 2
    assert downloaded(hub, "model.safetensors")


def test_python_api_downloads_a_hub_id_and_decodes_as_greedy(hub, tiny_folder: Path) -> None:
    model, tokenizer = hf_jacobi.load_model(REPO)
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    greedy = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(model.generate(ids, max_new_tokens=12, decoding="jacobi"), greedy)
    local, _ = hf_jacobi.load_model(tiny_folder)
    assert torch.equal(local.generate(ids, max_new_tokens=12, do_sample=False), greedy)  # the same model arrived

    from transformers import AutoModelForCausalLM

    stock = enable_jacobi(AutoModelForCausalLM.from_pretrained(REPO).eval())  # the cache now has it
    assert torch.equal(stock.generate(ids, max_new_tokens=12, decoding="jacobi"), greedy)


def test_offline_reads_a_downloaded_model_from_the_cache(hub, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", PROMPT, "--model", REPO, "--compare", "--max-new-tokens", "6"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    hub.requests.clear()
    with pytest.MonkeyPatch.context() as monkeypatch:
        go_offline(monkeypatch)
        assert cli.main(argv) == 0
    assert "identical: yes" in capsys.readouterr().out
    assert hub.requests == []


@pytest.mark.parametrize("command", ["generate", "collect"])
def test_offline_with_an_empty_cache_says_what_is_missing(
    command: str, hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    go_offline(monkeypatch)
    argv = ["generate", PROMPT, "--model", REPO] if command == "generate" else collect_argv(REPO, tmp_path)
    assert cli.main(argv) == 1
    flag = "--model" if command == "generate" else "--model_name_or_path"
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {flag} '{REPO}' is not a local folder, and HF_HUB_OFFLINE=1 allows only"), line
    assert f"has no copy of it (no config.json) (HF_HUB_CACHE={hub_constants.HF_HUB_CACHE})" in line
    assert hub.requests == []  # offline means offline
    assert not (tmp_path / "trajectories").exists()


def test_offline_python_api_with_an_empty_cache(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    go_offline(monkeypatch)
    with pytest.raises(ModelLoadError, match=r"^'org/tiny' is not a local folder, and HF_HUB_OFFLINE=1"):
        hf_jacobi.load_model(REPO)


@pytest.mark.parametrize("command", ["generate", "collect"])
def test_a_failed_download_is_one_line_naming_the_flag_and_the_id(
    command: str, hub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "org/no-such-model"
    argv = ["generate", PROMPT, "--model", missing] if command == "generate" else collect_argv(missing, tmp_path)
    assert cli.main(argv) == 1
    flag = "--model" if command == "generate" else "--model_name_or_path"
    line = error_line(capsys.readouterr().err)
    assert line.startswith(
        f"error: {flag} '{missing}' is not a local folder and could not be downloaded from {hub.endpoint}: "
        "no such model repository"
    ), line
    assert line.endswith("check the id, your network, or set HF_HUB_OFFLINE=1 to use the cache only")
    assert not (tmp_path / "trajectories").exists()


@pytest.mark.parametrize("command", ["generate", "collect"])
def test_main_leaves_the_environment_and_torch_rng_alone(
    command: str, hub, tiny_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    environment = dict(os.environ)
    torch.manual_seed(1234)
    rng = torch.random.get_rng_state()
    if command == "generate":
        argv = ["generate", PROMPT, "--model", str(tiny_folder), "--compare", "--max-new-tokens", "6"]
    else:
        argv = collect_argv(str(tiny_folder), tmp_path)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert dict(os.environ) == environment and "HF_HUB_OFFLINE" not in os.environ
    assert hub_constants.HF_HUB_OFFLINE is False
    assert torch.equal(torch.random.get_rng_state(), rng), "the command moved torch's global generator"
    assert hub.requests == []  # a local folder needs no Hub
