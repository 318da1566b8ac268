"""DeepSpeed ZeRO-3 and FSDP2 training for real: two CPU processes through `accelerate launch` on the recipes' own
accelerate configs, against one process with the same global batch; and the 7B recipe's four YAMLs end to end on a
tiny Qwen2.

Each engine run (full fine-tune and LoRA, noise-aware packed batches, KL anchor on) trains 4 steps with checkpoints at
2 and 4, saves, and a second launch resumes from step 2 and saves again. Checked: the engine is the one asked for and
really shards (a rank holds half of the model and, for a full fine-tune, half of the anchor's frozen base), the losses
and saved weights are one process's with batch 2, the resumed steps and weights are the uninterrupted run's, and the
saved model (or adapter) loads with `from_pretrained` (peft) and decodes with Jacobi exactly as greedy.

Only what a CPU needs is overridden, on the command line: `--num_processes 2 --mixed_precision no` with CUDA hidden;
ZeRO-3 takes `--ddp_backend gloo` (without a backend accelerate's PartialState counts one process on a machine with no
accelerator; `--use_cpu` would turn DeepSpeed off), FSDP2 `--use_cpu true` (a gloo group) and the worker's
`--fsdp-on-cpu`, without which accelerate runs an FSDP config on CPU as plain DDP (shown below). The optimizer is SGD
with momentum: linear in the gradients, so the sharded runs agree with one process to float rounding (AdamW divides by
the root of squared gradients, which lifts the rounding of near-zero gradients to whole steps), and it still has state
that a resume must restore. They need both cores for their two processes: `make test-sharded` runs them (and installs
DeepSpeed), not the parallel suite of `make test`.
"""

from __future__ import annotations

import json
import os
import socket
import string
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_jacobi import enable_jacobi
from hf_jacobi.cli import main
from sharded_worker import FSDP_ON_CPU
from tiny_models import fresh_tiny_model, random_prompts, tiny_tokenizer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.distributed,
    pytest.mark.skipif(
        "PYTEST_XDIST_WORKER" in os.environ,
        reason="two-process runs that need both cores: `make test-sharded` runs them",
    ),
]

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "accelerate_configs"
QWEN_RECIPES = ROOT / "recipes" / "qwen2.5-coder-7b" / "jacobi_forcing"
WORKER = Path(__file__).resolve().parent / "sharded_worker.py"
ENGINES = {
    # config, the trainer's CPU flags, the worker's flags
    "zero3": (CONFIGS / "deepspeed_zero3.yaml", ["--ddp_backend", "gloo"], []),
    "fsdp2": (CONFIGS / "fsdp.yaml", ["--use_cpu", "true"], [FSDP_ON_CPU]),
}
# gradients are clipped to norm 1 (max_grad_norm), so an SGD step moves the weights by about lr at most: 0.3 moves them
# far enough for the anchor to read 0.01-0.1 by step 4
TRAIN = ["--max_steps", "4", "--learning_rate", "0.3", "--warmup_ratio", "0", "--bf16", "false", "--optim", "sgd",
         "--optim_args", "momentum=0.9", "--gradient_checkpointing", "false", "--logging_steps", "1", "--report_to",
         "none", "--save_strategy", "steps", "--save_steps", "2", "--seed", "0", "--noise_window", "4",
         "--disable_tqdm", "true", "--base_kl_weight", "5"]  # fmt: skip
LORA = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
        "--lora_dropout", "0"]  # fmt: skip
WEIGHTS = {"full": "model.safetensors", "lora": "adapter_model.safetensors"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The tiny Llama and its tokenizer (`model/`) and a single-process collection of 8 prompts (`trajectories/`)."""
    root = tmp_path_factory.mktemp("sharded")
    fresh_tiny_model("llama").save_pretrained(root / "model")
    tiny_tokenizer().save_pretrained(root / "model")
    with open(root / "prompts.jsonl", "w") as f:
        for i in range(8):
            words = " ".join(f"t{(i * 7 + j * 3) % 120 + 3}" for j in range(4 + i % 3))
            f.write(json.dumps({"id": f"p{i}", "prompt": words}) + "\n")
    collect = ["collect", "--model_name_or_path", str(root / "model"), "--prompts", str(root / "prompts.jsonl")]
    sizes = ["--block_size", "4", "--max_new_tokens", "12", "--batch_size", "2", "--shard_size", "4"]
    assert main([*collect, *sizes, "--output_dir", str(root / "trajectories")]) == 0
    return root


def _train_args(workspace: Path, variant: str) -> list[str]:
    model = [
        "train",
        "--model_name_or_path",
        str(workspace / "model"),
        "--trajectories",
        str(workspace / "trajectories"),
    ]
    return [*model, *TRAIN, *(LORA if variant == "lora" else [])]


@pytest.fixture(scope="module")
def reference(workspace):
    """variant -> the output folder of one process with batch 2 (the sharded runs' global batch), run once."""
    done: dict[str, Path] = {}

    def run(variant: str) -> Path:
        if variant not in done:
            output = workspace / f"one-{variant}"
            one = [*_train_args(workspace, variant), "--use_cpu", "true", "--per_device_train_batch_size", "2"]
            assert main([*one, "--output_dir", str(output)]) == 0
            done[variant] = output
        return done[variant]

    return run


def _launch(config: Path, argv: list[str], worker_flags: Sequence[str] = (), cwd: Path | None = None) -> None:
    """`accelerate launch --config_file config` of the worker (`hf-jacobi argv`) in two CPU processes; fails with their
    output if either fails."""
    with socket.socket() as probe:  # a free port, so that parallel runs do not meet on accelerate's default
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
              "--mixed_precision", "no", "--main_process_port", str(port)]  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [*launch, str(WORKER), *worker_flags, *argv]
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def _logged(output: Path, key: str) -> dict[int, float]:
    """step -> the value of `key` logged at that step, from the last checkpoint's trainer state."""
    state = json.loads((output / "checkpoint-4" / "trainer_state.json").read_text())
    return {entry["step"]: entry[key] for entry in state["log_history"] if key in entry}


def _engines(output: Path) -> list[dict]:
    """The worker's reports of both ranks (tests/sharded_worker.py)."""
    return [json.loads((output / f"engine-rank{rank}.json").read_text()) for rank in (0, 1)]


def _assert_sharded(report: dict, engine: str, frozen_base: bool) -> None:
    """The engine asked for, and a rank holding about half of the model (ZeRO-3 pads partitions to equal sizes, FSDP2
    splits each parameter's rows) and of the KL anchor's frozen base where there is one (a full fine-tune; a LoRA
    run's base is the sharded model itself, with its adapter switched off)."""
    if engine == "zero3":
        assert report["distributed_type"] == "DistributedType.DEEPSPEED"
    else:
        assert (report["distributed_type"], report["fsdp_version"]) == ("DistributedType.FSDP", 2)
    parts = [report["model"], report["trainable"]] + ([report["base"]] if frozen_base else [])
    for part in parts:
        assert abs(part["local"] - part["full"] / 2) <= 0.02 * part["full"], report
    if frozen_base:
        assert report["base_type"] == ("DeepSpeedEngine" if engine == "zero3" else "FSDPLlamaForCausalLM")
    else:
        assert report["base"] is None


def _assert_same_weights(output: Path, expected: Path, variant: str) -> None:
    weights = load_file(expected / WEIGHTS[variant])
    saved = load_file(output / WEIGHTS[variant])
    assert saved.keys() == weights.keys()
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor, weights[name], rtol=1e-5, atol=1e-6, msg=f"{output.name}: {name}")


def _assert_decodes_like_greedy(model) -> None:
    """Jacobi decoding of the loaded model gives greedy's tokens (greedy asked for by name: the saved generation
    config makes Jacobi the default)."""
    model = enable_jacobi(model.eval())
    ids, mask = random_prompts(3, 6, seed=1)
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, decoding="greedy")
    jacobi = model.generate(ids, attention_mask=mask, max_new_tokens=16, decoding="jacobi", jacobi_block_size=4)
    assert greedy.shape[1] > ids.shape[1]
    assert torch.equal(jacobi, greedy)


def _load_saved(output: Path, workspace: Path, variant: str):
    """The saved model as users load it: `from_pretrained`, and for LoRA the adapter on the base with peft."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if variant == "full":
        return AutoModelForCausalLM.from_pretrained(output)
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(workspace / "model"), output)


@pytest.mark.parametrize("variant", ["full", "lora"])
@pytest.mark.parametrize("engine", ["zero3", "fsdp2"])
def test_a_sharded_run_trains_as_one_process_resumes_and_decodes(workspace, reference, engine, variant):
    if engine == "zero3":
        pytest.importorskip("deepspeed", reason="DeepSpeed is an extra: `make test-sharded` installs it")
    config, cpu_flags, worker_flags = ENGINES[engine]
    run, resumed = workspace / f"{engine}-{variant}", workspace / f"{engine}-{variant}-resumed"
    args = [*_train_args(workspace, variant), *cpu_flags, "--per_device_train_batch_size", "1"]
    _launch(config, [*args, "--output_dir", str(run)], worker_flags)
    _launch(config, [*args, "--output_dir", str(resumed), "--resume_from_checkpoint", str(run / "checkpoint-2")],
            worker_flags)  # fmt: skip

    for report in _engines(run) + _engines(resumed):
        _assert_sharded(report, engine, frozen_base=variant == "full")
    one = reference(variant)
    losses, anchors = _logged(run, "loss"), _logged(run, "base_kl")
    assert list(losses) == [1, 2, 3, 4]
    assert losses == pytest.approx(_logged(one, "loss"), rel=1e-6)
    assert anchors == pytest.approx(_logged(one, "base_kl"), rel=1e-4, abs=1e-6)
    assert anchors[1] == pytest.approx(0, abs=1e-6) and anchors[4] > 1e-3  # the base is the model before training
    assert _logged(resumed, "loss") == pytest.approx(losses, rel=1e-6)  # steps 1-2 loaded, 3-4 trained again
    assert _logged(resumed, "base_kl") == pytest.approx(anchors, rel=1e-4, abs=1e-6)
    _assert_same_weights(run, one, variant)
    _assert_same_weights(resumed, run, variant)
    _assert_decodes_like_greedy(_load_saved(resumed, workspace, variant))


def test_without_the_patch_an_fsdp_config_runs_plain_ddp_on_cpu(workspace):
    """accelerate's own FSDP check leaves CPU processes out: the same launch without `--fsdp-on-cpu` wraps the model
    in DDP, every rank holding all of it, so the patch is what makes the FSDP2 runs above sharded."""
    config, cpu_flags, _ = ENGINES["fsdp2"]
    output = workspace / "fsdp2-unpatched"
    args = [*_train_args(workspace, "full"), *cpu_flags, "--per_device_train_batch_size", "1", "--max_steps", "1"]
    _launch(config, [*args, "--save_strategy", "no", "--output_dir", str(output)])
    for report in _engines(output):
        assert (report["distributed_type"], report["fsdp_version"]) == ("DistributedType.MULTI_CPU", None)
        for part in ("model", "base"):
            assert report[part]["local"] == report[part]["full"], report


def _tiny_qwen2_tokenizer():
    """A byte-level BPE tokenizer of transformers' Qwen2 class over 128 ids: AutoTokenizer loads a Qwen2 model's
    folder as `Qwen2Tokenizer` whatever the folder's tokenizer_config names, and that class rebuilds a byte-level
    pre-tokenizer around the saved vocabulary, which the word-level tiny tokenizer's vocabulary does not survive. With
    no merges every character is a token: the prompts' space, letters, digits and punctuation all have ids < 128."""
    from tokenizers import pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    first = ["Ġ", *string.ascii_lowercase, *string.digits]
    symbols = first + sorted(set(pre_tokenizers.ByteLevel.alphabet()) - set(first))
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{s: i + 3 for i, s in enumerate(symbols[:125])}}
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=[], unk_token=None, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = tiny_tokenizer().chat_template
    return tokenizer


def test_the_7b_recipe_runs_end_to_end_on_a_tiny_qwen2(tmp_path):
    """Both rounds of recipes/qwen2.5-coder-7b as its header says to launch them (collection on multi_gpu.yaml,
    training on deepspeed_zero3.yaml), from a folder where its relative `runs/...` paths land, overriding only the
    first model, the prompts (the paper's come from the Hub), the sizes and what a CPU needs. Round 2 reads the
    round-1 model and trajectories where the files put them."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is an extra: `make test-sharded` installs it")
    fresh_tiny_model("qwen2").save_pretrained(tmp_path / "tiny-qwen2")
    _tiny_qwen2_tokenizer().save_pretrained(tmp_path / "tiny-qwen2")
    with open(tmp_path / "prompts.jsonl", "w") as f:
        for i in range(8):
            f.write(json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x): return x + {i * 7 % 10}"}) + "\n")
    sizes = ["--prompts", str(tmp_path / "prompts.jsonl"), "--num_prompts", "8", "--max_new_tokens", "32",
             "--batch_size", "2", "--shard_size", "4", "--dtype", "float32"]  # fmt: skip
    cpu_training = ["--dtype", "float32", "--bf16", "false", "--ddp_backend", "gloo"]
    first_model = ["--model_name_or_path", str(tmp_path / "tiny-qwen2")]
    zero3, ddp = CONFIGS / "deepspeed_zero3.yaml", CONFIGS / "multi_gpu.yaml"
    for step, config, extra in (
        ("collect_round1", ddp, [*first_model, *sizes]),
        ("train_round1", zero3, [*first_model, *cpu_training]),
        ("collect_round2", ddp, sizes),
        ("train_round2", zero3, cpu_training),
    ):
        _launch(config, [step.split("_")[0], "--config", str(QWEN_RECIPES / f"{step}.yaml"), *extra], cwd=tmp_path)

    runs = tmp_path / "runs" / "qwen2.5-coder-7b-jf"
    for round_ in ("round1", "round2"):
        assert sorted(p.name[:17] for p in (runs / round_ / "trajectories").glob("*.parquet"))[-1] == (
            "trajectories-r001"
        )  # both processes collected
        for report in _engines(runs / round_ / "model"):
            _assert_sharded(report, "zero3", frozen_base=False)  # the recipe has no KL anchor
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny-qwen2").state_dict()
    after = AutoModelForCausalLM.from_pretrained(runs / "round2" / "model")
    assert any(not torch.equal(after.state_dict()[name], tensor) for name, tensor in before.items())
    _assert_decodes_like_greedy(after)
