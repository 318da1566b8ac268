"""Two real processes under `accelerate launch` (gloo on CPU): collection splits the prompts and DDP training takes the
same steps as one process with the same global batch.

The other multi-process tests fake accelerate's state; these start the processes users start, through the
`hf-jacobi` command line, on a tiny random model saved to a folder. `accelerate launch --cpu` starts one process
unless an MPI launcher is configured, so the launch uses torchrun's launcher (`--multi_gpu`) with CUDA hidden: each
process then finds no accelerator and joins a gloo group, as on a CPU-only machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_jacobi.cli import main
from hf_jacobi.data.collection import load_trajectories
from tiny_models import fresh_tiny_model, tiny_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.distributed]

PROMPTS = 6
COLLECT = ["--block_size", "4", "--max_new_tokens", "12", "--batch_size", "2", "--shard_size", "2"]
TRAIN = ["--max_steps", "3", "--learning_rate", "1e-2", "--warmup_ratio", "0", "--use_cpu", "true", "--bf16", "false",
         "--gradient_checkpointing", "false", "--logging_steps", "1", "--report_to", "none", "--save_strategy", "steps",
         "--save_steps", "3", "--seed", "0", "--noise_window", "4", "--disable_tqdm", "true"]  # fmt: skip


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder with the tiny Llama and its tokenizer (`model/`), a JSONL of prompts, and a single-process collection
    of them (`single/`), the reference both tests compare with."""
    root = tmp_path_factory.mktemp("distributed")
    fresh_tiny_model("llama").save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    with open(root / "prompts.jsonl", "w") as f:
        for i in range(PROMPTS):
            words = " ".join(f"t{(i * 7 + j * 3) % 120 + 3}" for j in range(4 + i % 3))
            f.write(json.dumps({"id": f"p{i}", "prompt": words}) + "\n")
    assert main(["collect", *_collect_args(root, "single")]) == 0
    return root


def _collect_args(root: Path, output: str) -> list[str]:
    inputs = ["--model_name_or_path", str(root / "model"), "--prompts", str(root / "prompts.jsonl")]
    return [*inputs, *COLLECT, "--output_dir", str(root / output)]


def _launch_two(argv: list[str]) -> None:
    """`accelerate launch` of `hf-jacobi argv` in two processes; fails with their output if either fails."""
    with socket.socket() as probe:  # a free port, so that parallel runs do not meet on accelerate's default
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(port)]  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*launch, "-m", "hf_jacobi.cli", *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_two_processes_split_the_prompts_and_collect_what_one_process_does(workspace):
    _launch_two(["collect", *_collect_args(workspace, "two")])
    shards = sorted(p.name for p in (workspace / "two").glob("*.parquet"))
    assert {name[: len("trajectories-r000")] for name in shards} == {"trajectories-r000", "trajectories-r001"}
    merged, single = load_trajectories(workspace / "two"), load_trajectories(workspace / "single")
    assert merged["prompt_id"] == [f"p{i}" for i in range(PROMPTS)]  # every prompt once
    assert merged.to_list() == single.to_list()  # same states, same completions, same forward counts


def _losses(output: Path) -> list[float]:
    state = json.loads((output / "checkpoint-3" / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_ddp_over_two_processes_matches_one_process_with_the_same_global_batch(workspace):
    """2 processes x batch 1, 1 process x batch 2, and 1 process x batch 1 x 2 accumulation steps: the same global
    batches, so the same losses (normalized over the whole accumulated batch) and the same weights."""
    common = ["train", "--model_name_or_path", str(workspace / "model"), "--trajectories", str(workspace / "single")]
    _launch_two([*common, *TRAIN, "--per_device_train_batch_size", "1", "--output_dir", str(workspace / "ddp")])
    assert main([*common, *TRAIN, "--per_device_train_batch_size", "2", "--output_dir", str(workspace / "one")]) == 0
    accumulated = ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "2"]
    assert main([*common, *TRAIN, *accumulated, "--output_dir", str(workspace / "accumulated")]) == 0

    reference = _losses(workspace / "one")
    assert len(reference) == 3
    weights = load_file(workspace / "one" / "model.safetensors")
    for run in ("ddp", "accumulated"):
        assert _losses(workspace / run) == pytest.approx(reference, rel=1e-5), run
        for name, tensor in load_file(workspace / run / "model.safetensors").items():
            torch.testing.assert_close(tensor, weights[name], msg=f"{run}: {name}")


def test_the_base_kl_anchor_of_a_lora_run_is_the_same_over_two_processes(workspace):
    """With DDP the trainer reads the base through the wrapped model (adapter switched off on the unwrapped one): the
    anchor and the adapter come out as in one process with the same global batch."""
    common = ["train", "--model_name_or_path", str(workspace / "model"), "--trajectories", str(workspace / "single")]
    lora = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
            "--lora_dropout", "0", "--base_kl_weight", "5"]  # fmt: skip
    _launch_two([*common, *TRAIN, *lora, "--per_device_train_batch_size", "1", "--output_dir", str(workspace / "kl2")])
    assert (
        main([*common, *TRAIN, *lora, "--per_device_train_batch_size", "2", "--output_dir", str(workspace / "kl1")])
        == 0
    )

    def anchors(output: Path) -> list[float]:
        state = json.loads((output / "checkpoint-3" / "trainer_state.json").read_text())
        return [entry["base_kl"] for entry in state["log_history"] if "base_kl" in entry]

    reference = anchors(workspace / "kl1")
    assert len(reference) == 3 and reference[0] == pytest.approx(0, abs=1e-7) and reference[-1] > 0
    assert anchors(workspace / "kl2") == pytest.approx(reference, rel=1e-4)
    assert _losses(workspace / "kl2") == pytest.approx(_losses(workspace / "kl1"), rel=1e-5)
    adapter = load_file(workspace / "kl1" / "adapter_model.safetensors")
    for name, tensor in load_file(workspace / "kl2" / "adapter_model.safetensors").items():
        torch.testing.assert_close(tensor, adapter[name], msg=name)
