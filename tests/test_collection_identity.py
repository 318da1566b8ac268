"""A collection knows the model it came from: a resume with another model behind the same path (weights replaced in
the folder, another dtype, another adapter) is refused in one line naming what changed, and leaves the shards as they
were; the same model resumes as if never stopped, reading its weight files once per output folder; a folder from
before identities were recorded still resumes, with a warning."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from hf_jacobi import collect_trajectories, load_trajectories
from hf_jacobi.cli import main
from hf_jacobi.data import collection, model_identity
from hf_jacobi.data.model_identity import HASH_CACHE
from hf_jacobi.data.shards import IDENTITY_FILE, SETTINGS_FILE, CollectionMismatchError, check_or_record
from test_training import FakeProcess, tiny_prompts
from tiny_models import fresh_tiny_model, tiny_model, tiny_tokenizer

COLLECT = ["--block_size", "4", "--max_new_tokens", "8", "--batch_size", "2"]
RECIPE_DATA = Path(__file__).parents[1] / "recipes" / "smollm2-135m" / "data"


def save_model(folder: Path, family: str = "llama", seed: int = 0) -> Path:
    """A tiny checkpoint in `folder`, written over whatever model it held (as a user replacing weights would)."""
    tiny_model(family, seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    save_model(tmp_path / "model")
    with open(tmp_path / "prompts.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"id": f"p{i}", "prompt": " ".join(f"t{(i * 7 + j * 3) % 120 + 3}" for j in range(5))}))
            f.write("\n")
    return tmp_path


def collect(workspace: Path, output: str = "out", prompts: int = 4, *extra: str) -> int:
    return main(
        ["collect", "--model_name_or_path", str(workspace / "model"), "--prompts", str(workspace / "prompts.jsonl"),
         "--num_prompts", str(prompts), *COLLECT, *extra, "--output_dir", str(workspace / output)]
    )  # fmt: skip


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def refusal(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command printed on stderr (failing if there are more)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_qwen2_saved_over_the_llama_that_collected_the_folder_is_refused_in_one_line(workspace, capsys):
    assert collect(workspace, prompts=2) == 0
    before = snapshot(workspace / "out")
    save_model(workspace / "model", "qwen2")  # the same path now holds another model
    assert collect(workspace, prompts=4) == 1
    line = refusal(capsys)
    assert line.startswith(f"error: output_dir '{workspace / 'out'}' was collected with model '{workspace / 'model'}'")
    assert "(config sha " in line and ", weights sha " in line
    assert "this run loads a different model: its config differs (model_type llama -> qwen2)" in line
    assert "its weights differ (model.safetensors sha " in line
    assert line.endswith("Use a new output_dir or the same model.")
    assert snapshot(workspace / "out") == before  # not one shard written, the record untouched


def test_retrained_weights_with_the_same_config_are_refused_by_their_hash(workspace, capsys):
    assert collect(workspace, prompts=2) == 0
    before = snapshot(workspace / "out")
    save_model(workspace / "model", "llama", seed=1)  # same architecture, sizes and names: only the values differ
    assert collect(workspace, prompts=4) == 1
    line = refusal(capsys)
    assert "this run loads a different model: its weights differ (model.safetensors sha " in line
    assert "config differs" not in line
    assert snapshot(workspace / "out") == before


def test_changed_settings_are_refused_with_the_values(workspace, capsys):
    assert collect(workspace, prompts=2) == 0
    before = snapshot(workspace / "out")
    assert collect(workspace, "out", 4, "--max_new_tokens", "12") == 1
    assert "other settings (max_new_tokens: 8 on disk, 12 now); use a new folder" in refusal(capsys)
    assert snapshot(workspace / "out") == before


def test_the_same_model_resumes_as_if_never_stopped_and_reads_its_weights_once(workspace, monkeypatch):
    hashed: list[str] = []
    real = model_identity.sha256_file
    monkeypatch.setattr(model_identity, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    assert collect(workspace, prompts=2) == 0
    assert hashed == ["model.safetensors"]
    assert collect(workspace, prompts=4) == 0
    assert hashed == ["model.safetensors"]  # the resume found the hash in the output folder's cache
    assert collect(workspace, "uninterrupted", 4) == 0
    assert load_trajectories(workspace / "out").to_list() == load_trajectories(workspace / "uninterrupted").to_list()
    recorded = json.loads((workspace / "out" / IDENTITY_FILE).read_text())
    assert recorded["config"]["model_type"] == "llama" and recorded["config"]["architectures"] == ["LlamaForCausalLM"]
    assert (
        recorded["weights"]["files"]["model.safetensors"]["size"]
        == (workspace / "model/model.safetensors").stat().st_size
    )


def test_a_weight_file_rewritten_in_place_is_hashed_again_even_with_its_old_size_and_mtime(tmp_path):
    folder = save_model(tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(folder)
    cache = model_identity.WeightHashCache(tmp_path / HASH_CACHE)
    first = model_identity.model_identity(model, cache=cache)
    cache.save()
    weights = folder / "model.safetensors"
    stat, data = weights.stat(), bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor: the same header, names, shapes and size
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `cp -p` or `rsync -t` would leave it
    second = model_identity.model_identity(model, cache=model_identity.WeightHashCache(tmp_path / HASH_CACHE))
    before, after = (identity["weights"]["files"]["model.safetensors"]["sha256"] for identity in (first, second))
    assert before != after
    assert model_identity.identity_changes(first, second) == [
        f"its weights differ (model.safetensors sha {before[:12]}… -> {after[:12]}…)"
    ]


def test_saving_a_model_built_in_memory_does_not_change_its_identity(tmp_path):
    """save_pretrained writes `architectures` into the live config: a resume after it is still the same model."""
    model = fresh_tiny_model("llama")
    before = model_identity.model_identity(model)
    model.save_pretrained(tmp_path)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert model_identity.identity_changes(before, model_identity.model_identity(model)) == []
    assert before["config"]["architectures"] == ["LlamaForCausalLM"] and before["weights"]["source"] == "parameters"


def test_a_folder_from_before_identities_resumes_with_a_warning(workspace, caplog):
    assert collect(workspace, prompts=2) == 0
    (workspace / "out" / IDENTITY_FILE).unlink()  # as every folder collected before this record existed
    settings = (workspace / "out" / SETTINGS_FILE).read_bytes()
    with caplog.at_level(logging.WARNING, logger="hf_jacobi"):
        assert collect(workspace, prompts=4) == 0
    assert "records no model identity" in caplog.text and "could not be checked" in caplog.text
    assert len(load_trajectories(workspace / "out")) == 4
    assert (workspace / "out" / SETTINGS_FILE).read_bytes() == settings  # left as it was: nothing is assumed
    assert not (workspace / "out" / IDENTITY_FILE).exists()


@pytest.mark.parametrize("committed", sorted(RECIPE_DATA.glob("*/" + SETTINGS_FILE)), ids=lambda p: p.parent.name)
def test_the_committed_collections_still_resume(committed, tmp_path, caplog):
    folder = tmp_path / committed.parent.name
    folder.mkdir()
    shutil.copyfile(committed, folder / SETTINGS_FILE)
    settings = json.loads(committed.read_text())

    def identity() -> dict:
        raise AssertionError("a folder with no identity to compare with has no weights hashed for it")

    with caplog.at_level(logging.WARNING, logger="hf_jacobi"):
        check_or_record(folder, settings, identity, write=True)
    assert "could not be checked" in caplog.text
    assert (folder / SETTINGS_FILE).read_bytes() == committed.read_bytes()


def _adapter(folder: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft = get_peft_model(
        fresh_tiny_model("llama"), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)
    )
    peft.save_pretrained(folder)
    return folder


def test_another_adapter_or_none_is_refused(tmp_path):
    model, prompts = tiny_model("llama"), tiny_prompts(2)
    one, other = _adapter(tmp_path / "round1", 0), _adapter(tmp_path / "round2", 1)
    settings = dict(block_size=4, max_new_tokens=8, progress=False)
    collect_trajectories(model, tiny_tokenizer(), prompts.select([0]), tmp_path / "out", **settings, adapter=one)
    with pytest.raises(
        CollectionMismatchError, match=r"its adapter differs \('.*round1' sha \w{12}… -> '.*round2' sha"
    ):
        collect_trajectories(model, tiny_tokenizer(), prompts, tmp_path / "out", **settings, adapter=other)
    with pytest.raises(CollectionMismatchError, match=r"its adapter differs \('.*round1' sha \w{12}… -> none\)"):
        collect_trajectories(model, tiny_tokenizer(), prompts, tmp_path / "out", **settings)
    collect_trajectories(model, tiny_tokenizer(), prompts, tmp_path / "out", **settings, adapter=one)
    assert len(load_trajectories(tmp_path / "out")) == 2


def test_every_process_checks_the_identity_and_only_the_main_one_writes(tmp_path, monkeypatch):
    folder = save_model(tmp_path / "model")
    settings = dict(block_size=4, max_new_tokens=8, progress=False)
    prompts, output = tiny_prompts(4), tmp_path / "out"
    monkeypatch.setattr(collection, "process_state", lambda: FakeProcess(0, 2))
    collect_trajectories(AutoModelForCausalLM.from_pretrained(folder), tiny_tokenizer(), prompts, output, **settings)
    record = snapshot(output)
    monkeypatch.setattr(collection, "process_state", lambda: FakeProcess(1, 2))
    bfloat16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    with pytest.raises(CollectionMismatchError, match=r"its dtype differs \(float32 -> bfloat16\)\. Use a new"):
        collect_trajectories(bfloat16, tiny_tokenizer(), prompts, output, **settings)
    assert snapshot(output) == record
    collect_trajectories(AutoModelForCausalLM.from_pretrained(folder), tiny_tokenizer(), prompts, output, **settings)
    written = {"shards-r001.json"}  # the second process's shards and its ledger of them: all it writes
    assert {n: data for n, data in snapshot(output).items() if not n.endswith(".parquet") and n not in written} == {
        name: data for name, data in record.items() if not name.endswith(".parquet")
    }  # the main process's record and hash cache, as it wrote them
    assert load_trajectories(output)["prompt_id"] == [f"p{i:02d}" for i in range(4)]


def train(workspace: Path, model: str, *extra: str) -> int:
    return main(
        ["train", "--model_name_or_path", str(workspace / model), "--trajectories", str(workspace / "out"),
         "--output_dir", str(workspace / "run"), "--max_steps", "1", "--per_device_train_batch_size", "2",
         "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--save_strategy", "no", *extra]
    )  # fmt: skip


def test_training_another_model_on_a_collection_is_refused_unless_asked_for(workspace, capsys):
    """Trajectories are the collecting model's fixed points: a model of the same vocabulary but other weights (or
    another config) would train on the wrong targets without a sign, so train names the difference before step 1."""
    assert collect(workspace, prompts=4) == 0
    save_model(workspace / "sibling", "llama", seed=1)  # same tokenizer and config, other weights
    save_model(workspace / "qwen", "qwen2")
    assert train(workspace, "sibling") == 1
    line = refusal(capsys)
    assert line.startswith(f"error: --trajectories {workspace / 'out'} were collected with model ")
    assert (
        f"--model_name_or_path '{workspace / 'sibling'}' is another model: its weights differ (model.safetensors"
        in line
    )
    assert "config differs" not in line and line.endswith(
        "--trajectories_of_another_model true to train on these anyway"
    )
    assert train(workspace, "qwen") == 1
    assert "its config differs (model_type llama -> qwen2)" in refusal(capsys)
    assert (
        not (workspace / "run" / "adapter_config.json").exists()
        and not (workspace / "run" / "model.safetensors").exists()
    )
    assert train(workspace, "sibling", "--trajectories_of_another_model", "true") == 0, capsys.readouterr().err
    assert train(workspace, "model", "--dtype", "bfloat16") == 0, capsys.readouterr().err  # its own, another dtype
