"""A published card claims Jacobi Forcing training only for a checkpoint that carries the record of it: the output of a
real `hf-jacobi train` run is claimed; an untrained checkpoint is presented as its base model with Jacobi decoding
settings; a base model nobody named is warned about."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from transformers import TrainingArguments

from hf_jacobi.card import CardInfo, render_model_card
from hf_jacobi.checkpoint import read_training_record
from hf_jacobi.cli import main
from hf_jacobi.hub.export import jacobi_forcing_record
from hf_jacobi.hub.push import publish_checkpoint
from test_training import config
from tiny_models import tiny_model, tiny_tokenizer

REPO = "acme/tiny-jacobi"
CLAIM = "post-trained with **Jacobi Forcing**"
TRAIN = ["--max_steps", "1", "--per_device_train_batch_size", "2", "--learning_rate", "1e-3", "--use_cpu", "true",
         "--bf16", "false", "--gradient_checkpointing", "false", "--report_to", "none", "--save_strategy", "no",
         "--noise_window", "4", "--disable_tqdm", "true"]  # fmt: skip


def untrained(folder: Path) -> Path:
    """A checkpoint as `save_pretrained` writes it, with the leftovers of a training run of another kind."""
    tiny_model("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "checkpoint-3").mkdir()  # an intermediate checkpoint records its own weights, not these
    torch.save(config(folder / "checkpoint-3"), folder / "checkpoint-3" / "training_args.bin")
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of a real one-step `hf-jacobi train` run on the tiny Llama's own trajectories."""
    root = tmp_path_factory.mktemp("trained")
    untrained(root / "model")
    with open(root / "prompts.jsonl", "w") as f:
        for i in range(2):
            f.write(json.dumps({"id": f"p{i}", "prompt": " ".join(f"t{i * 7 + j * 3 + 3}" for j in range(5))}) + "\n")
    model = ["--model_name_or_path", str(root / "model")]
    collect = [
        "collect",
        *model,
        "--prompts",
        str(root / "prompts.jsonl"),
        "--block_size",
        "4",
        "--max_new_tokens",
        "8",
    ]
    assert main([*collect, "--output_dir", str(root / "trajectories")]) == 0
    train = ["train", *model, "--trajectories", str(root / "trajectories"), *TRAIN, "--output_dir", str(root / "out")]
    assert main(train) == 0
    return root / "out"


def push(source: Path, out: Path, *flags: str) -> str:
    """`hf-jacobi push --dry-run` of `source`; the rendered card."""
    assert main(["push", str(source), "--repo-id", REPO, "--dry-run", "--output-dir", str(out), *flags]) == 0
    return (out / "README.md").read_text()


def test_an_untrained_checkpoint_is_published_as_its_base_with_jacobi_decoding_settings(tmp_path):
    source = untrained(tmp_path / "ckpt")
    with pytest.warns(
        UserWarning, match=r"carries no record of Jacobi Forcing training .* leaves out the training data"
    ):
        card = push(source, tmp_path / "out", "--base-model", "org/base", "--training-data", "10k prompts",
                    "--dataset", "acme/prompts")  # fmt: skip
    assert jacobi_forcing_record(source) is None
    assert CLAIM not in card and "Jacobi Forcing" in card  # named as what this checkpoint is not
    assert "[org/base](https://huggingface.co/org/base) with **Jacobi decoding** settings" in card
    assert "## Base model" in card and "## Training" not in card
    assert "Training: none recorded" in card
    assert "10k prompts" not in card and "acme/prompts" not in card  # no training data, nor datasets metadata
    assert "| `jacobi_block_size` | 16 |" in card  # the decoding settings it is published for


def test_the_output_of_a_real_training_run_is_claimed(trained, tmp_path):
    assert jacobi_forcing_record(trained) == "jacobi_forcing_training.json, 1 optimizer steps"
    record = read_training_record(trained)
    assert (record["method"], record["global_step"], record["trained_block_size"]) == ("Jacobi Forcing", 1, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a named base and a record: nothing to warn about
        card = push(trained, tmp_path / "out", "--base-model", "org/base", "--training-data", "2 tiny trajectories")
    assert f"[org/base](https://huggingface.co/org/base) {CLAIM}" in card
    assert "## Training" in card and "- Training data: 2 tiny trajectories" in card
    assert "## Base model" not in card and "none recorded" not in card


def test_only_a_jacobi_forcing_run_that_took_a_step_is_a_record(trained, tmp_path):
    folder = tmp_path / "other"
    folder.mkdir()
    torch.save(TrainingArguments(output_dir=str(folder), use_cpu=True, report_to=[]), folder / "training_args.bin")
    assert jacobi_forcing_record(folder) is None  # another trainer's arguments
    torch.save(config(folder), folder / "training_args.bin")
    assert jacobi_forcing_record(folder) == "training_args.bin (JacobiForcingConfig)"
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 0}))
    assert jacobi_forcing_record(folder) is None  # the run trained nothing
    (folder / "training_args.bin").write_bytes(b"\x80\x04garbage")
    assert jacobi_forcing_record(folder) is None


def test_an_unknown_base_model_is_warned_about(tmp_path):
    source = untrained(tmp_path / "ckpt")
    with pytest.warns(UserWarning, match=r"the base model of '.*ckpt' is unknown .* name it with --base-model"):
        result = publish_checkpoint(source, REPO, output_dir=tmp_path / "out", dry_run=True)
    card = (result.folder / "README.md").read_text()
    assert "[an unknown base model](#base-model) with **Jacobi decoding** settings" in card
    assert CLAIM not in card


def test_the_trainers_own_card_still_claims_its_training():
    """JacobiForcingTrainer renders its card itself, having just trained: `trained` defaults to the claim."""
    card = str(render_model_card(CardInfo(repo_id=REPO, base_model="org/base", recipe="  - lr 1e-3")))
    assert f"[org/base](https://huggingface.co/org/base) {CLAIM}" in card and "lr 1e-3" in card
    untrained_card = str(render_model_card(CardInfo(repo_id=REPO, base_model="org/base", trained=False)))
    assert CLAIM not in untrained_card and "with **Jacobi decoding** settings" in untrained_card


def test_the_save_path_completes_the_folder_and_the_card_hook_only_renders_the_card(tmp_path):
    """JacobiForcingTrainer's saves write the generation config, custom_generate/ and the training record; its card
    hook writes README.md and changes nothing else; an adapter exported as package data keeps the record."""
    from hf_jacobi import JacobiForcingTrainer, load_trajectories
    from hf_jacobi.adapters import export_adapter
    from hf_jacobi.decoding.config import JacobiConfig

    root = tmp_path
    source = untrained(root / "model")
    with open(root / "prompts.jsonl", "w") as f:
        f.write(json.dumps({"id": "p0", "prompt": "t3 t6 t9 t12 t15"}) + "\n")
    collect = ["collect", "--model_name_or_path", str(source), "--prompts", str(root / "prompts.jsonl")]
    assert main([*collect, "--block_size", "4", "--max_new_tokens", "8", "--output_dir", str(root / "traj")]) == 0
    from peft import LoraConfig

    trainer = JacobiForcingTrainer(
        str(source),
        args=config(root / "run", max_steps=1, noise_window=4),
        train_dataset=load_trajectories(root / "traj"),
        peft_config=LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"),
    )
    trainer.train()
    trainer.save_model(str(root / "saved"))
    saved = root / "saved"
    assert json.loads((saved / "generation_config.json").read_text())["decoding"] == "jacobi"
    assert (saved / "custom_generate" / "generate.py").is_file()
    assert CLAIM not in (saved / "README.md").read_text()  # peft's own stub card; hf_jacobi's is the card hook's
    assert read_training_record(saved)["global_step"] == 1
    before = {path: path.read_bytes() for path in (root / "run").rglob("*") if path.is_file()}
    trainer.create_model_card(model_name="tiny")
    after = {path: path.read_bytes() for path in (root / "run").rglob("*") if path.is_file()}
    assert set(after) - set(before) == {root / "run" / "README.md"}
    assert all(after[path] == content for path, content in before.items())
    exported = export_adapter(saved, root / "exported", JacobiConfig(block_size=4), base_model="org/base")
    assert jacobi_forcing_record(exported) == "jacobi_forcing_training.json, 1 optimizer steps"
