"""The 7B recipe's training step on a random Qwen2.5-Coder-7B: packed tokens per second and peak memory per setting.

Why: how recipes/qwen2.5-coder-7b trains on one GPU (FlexAttention or sdpa, gradient checkpointing or not, LoRA or all
parameters, DeepSpeed ZeRO-3 with the optimizer on the CPU) follows from what a step costs, which depends on shapes and
dtype, not on weights: the released configuration with random weights (lab/architectures.py), in
bfloat16 on the GPU, trains with train_round1.yaml's settings on synthetic trajectories of the recipe's lengths.

    python3 lab/benchmarks/train_step_7b.py --output-dir $OUT --budget-seconds 540   # a lent GPU: the recipe's README
    python lab/benchmarks/train_step_7b.py --tiny --output-dir /tmp/step              # any machine, seconds

Each setting runs in its own process (a fresh CUDA context: one out-of-memory does not poison the next) under a
deadline cut from the budget, and appends one JSON line to train_step_7b.jsonl as it ends, errors included, so a call
cut short keeps what it measured; train_step_7b.log holds the processes' output.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script, from any folder: `lab` importable
RECIPE = ROOT / "recipes" / "qwen2.5-coder-7b" / "jacobi_forcing"
NOT_TRAINING = ("model_name_or_path", "dtype", "attn_implementation", "trajectories")
"""train_round1.yaml's keys that load the model and data, which this script sets; the rest are training settings."""

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip
"""What `--tiny` changes in the 7B configuration: the sizes, so the model is still a Qwen2."""

ZERO3_OFFLOAD = {
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False}},
    "bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
}  # fmt: skip
"""ZeRO-3, the optimizer on the CPU (DeepSpeed's CPU Adam, compiled at first use): float32 weights, moments and grads
take 16 bytes a parameter of host memory (113 GiB for this model, near the whole host memory of a one-GPU machine), so
the parameters stay on the GPU."""

OUTPUT = "train_step_7b"
SHOWN = ("config", "status", "tokens_per_second", "peak_allocated_gib", "losses", "why", "error")  # printed per row


@dataclass(frozen=True)
class Setting:
    """One measured configuration: which parameters train ("lora": r16 on every linear layer, or "full"), gradient
    checkpointing, the attention backend ("sdpa" or "flex_attention"), and DeepSpeed ZeRO-3 with CPU offload."""

    parameters: str
    checkpointing: bool
    attention: str
    offload: bool = False

    @property
    def name(self) -> str:
        attention, offload = self.attention.replace("_attention", ""), "-zero3-offload" if self.offload else ""
        return f"{self.parameters}-{'gc' if self.checkpointing else 'nogc'}-{attention}{offload}"


GRID = [Setting(params, checkpointing, attention) for checkpointing in (True, False)
        for attention in ("sdpa", "flex_attention") for params in ("lora", "full")]  # fmt: skip
GRID.append(Setting("full", True, "sdpa", offload=True))
"""Most likely to fit one GPU first (LoRA, checkpointing, sdpa); each full fine-tune right after its LoRA twin, so a
budget spent early still compares the two; DeepSpeed's offload last: the slowest, needed where a full step runs out."""


def shape(tiny: bool, prompt_tokens: int) -> dict[str, Any]:
    """The model configuration, dtype, device and trajectory lengths one run measures (`--tiny`: CPU, float32)."""
    import yaml

    from lab.architectures import ARCHITECTURES

    collect = yaml.safe_load((RECIPE / "collect_round1.yaml").read_text())
    n, spec = collect["block_size"], {**ARCHITECTURES["qwen2.5-coder-7b"], **(TINY if tiny else {})}
    run = {"spec": spec, "prompt_tokens": prompt_tokens, "block_size": n, "dtype": "float32" if tiny else "bfloat16"}
    return {**run, "device": "cpu" if tiny else "cuda", "new_tokens": 4 * n if tiny else collect["max_new_tokens"]}


def trajectories(run: dict[str, Any], rows: int, seed: int = 0) -> Any:
    """`rows` trajectory rows in the project's format (`TrajectoryRow`): a random prompt and answer and, per block,
    five states whose first wrong token moves from 0 (the random draft) by a quarter block up to the fixed point."""
    import datasets
    import torch

    from hf_jacobi.data.trajectory_schema import TRAJECTORY_FEATURES, TrajectoryRow

    generator, vocab, n = torch.Generator().manual_seed(seed), run["spec"]["vocab_size"], run["block_size"]
    out = []
    for row in range(rows):
        prompt = torch.randint(vocab, (run["prompt_tokens"],), generator=generator).tolist()
        answer = torch.randint(vocab, (run["new_tokens"],), generator=generator).tolist()
        blocks, states = [answer[j : j + n] for j in range(0, len(answer) - n + 1, n)], []
        for fixed in blocks:  # a token moved by 1 to vocab - 1 ids is a wrong one
            moves = torch.randint(1, vocab, (n,), generator=generator).tolist()
            wrong = [(token + move) % vocab for token, move in zip(fixed, moves, strict=True)]
            states.append([fixed[:right] + wrong[right:] for right in range(0, n, n // 4)] + [fixed])
        out.append(TrajectoryRow(f"synthetic-{row}", prompt, answer, n, states, blocks, 5 * len(blocks)).to_dict())
    return datasets.Dataset.from_list(out, features=TRAJECTORY_FEATURES)


def build_model(run: dict[str, Any], attention: str) -> tuple[Any, Any]:
    """The architecture with random weights, allocated and initialized on its device in its dtype (a 7B in float32 on
    the host would take 30 GB and minutes; under ZeRO-3 transformers builds it through DeepSpeed's `zero.Init`), and a
    tokenizer that only names the pad id (0): the trainer reads nothing else from it, and nothing is downloaded."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    spec, dtype, _ = dict(run["spec"]), getattr(torch, run["dtype"]), torch.manual_seed(0)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    with torch.device(run["device"]):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    backend = Tokenizer(models.WordLevel({"<pad>": 0}, unk_token="<pad>"))
    return model, PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<pad>")


def training_args(setting: Setting, run: dict[str, Any], output_dir: str, max_steps: int) -> Any:
    """train_round1.yaml's training settings with this setting's checkpointing and engine, for `max_steps`; on a
    CPU DeepSpeed needs use_cpu off (it would turn DeepSpeed off) and gloo, as in tests/test_sharded_training.py."""
    import yaml

    from hf_jacobi import JacobiForcingConfig

    recipe, cuda = yaml.safe_load((RECIPE / "train_round1.yaml").read_text()), run["device"] == "cuda"
    values = {key: value for key, value in recipe.items() if key not in NOT_TRAINING}
    values.update(output_dir=output_dir, max_steps=max_steps, logging_steps=1, save_strategy="no", report_to="none")
    values.update(gradient_checkpointing=setting.checkpointing, bf16=cuda, use_cpu=not (cuda or setting.offload))
    if setting.offload:
        values.update(deepspeed=ZERO3_OFFLOAD, ddp_backend=None if cuda else "gloo")
    return JacobiForcingConfig(**values)


def step_clock(cuda: bool, inject: str | None) -> tuple[Any, list[float]]:
    """A callback, and the list it appends the time to when each optimizer step ends (the device synchronized); with
    `inject="oom"` the first step raises the out-of-memory error a GPU would."""
    import torch
    from transformers import TrainerCallback

    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if inject == "oom":
                raise torch.cuda.OutOfMemoryError("injected by --inject-failure")

        def on_step_end(self, args, state, control, **kwargs):
            torch.cuda.synchronize() if cuda else None
            ends.append(time.perf_counter())

    return StepClock(), ends


def measure(setting: Setting, run: dict[str, Any], steps: int, inject: str | None) -> dict[str, Any]:
    """One setting's row: a warm-up step, then `steps` timed ones (each from the end of the one before, as a run sees
    it), with each step's loss and the packed tokens (both logged every step); an error (out of memory or other) is
    recorded instead, and the memory freed."""
    import gc
    import resource

    import torch
    from peft import LoraConfig

    from hf_jacobi import JacobiForcingTrainer

    cuda, started, trainer, model = run["device"] == "cuda", time.time(), None, None
    clock, ends = step_clock(cuda, inject)
    row = {"config": setting.name, **asdict(setting), "steps": steps, **{k: v for k, v in run.items() if k != "spec"}}
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    peft = lora if setting.parameters == "lora" else None
    try:
        with tempfile.TemporaryDirectory() as folder:
            args = training_args(setting, run, folder, steps + 1)
            data = trajectories(run, (steps + 1) * args.per_device_train_batch_size * args.gradient_accumulation_steps)
            model, tokenizer = build_model(run, setting.attention)
            trainer = JacobiForcingTrainer(
                model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=peft, callbacks=[clock]
            )
            row["setup_seconds"] = time.time() - started
            row["optimizer"] = "deepspeed cpu adam" if setting.offload else getattr(args.optim, "value", args.optim)
            trained = [p for p in trainer.model.parameters() if p.requires_grad]
            row["trainable_parameters"] = sum(getattr(p, "ds_numel", p.numel()) for p in trained)
            trainer.train()
        timed = [ends[i] - ends[i - 1] for i in range(1, len(ends))]
        tokens = [float(h["num_tokens"]) for h in trainer.state.log_history if "num_tokens" in h]
        row.update(status="ok", step_seconds=timed, tokens_per_step=(tokens[-1] - tokens[0]) / max(len(timed), 1))
        row["tokens_per_second"] = (tokens[-1] - tokens[0]) / sum(timed) if timed else None
    except Exception as error:
        oom = isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()
        row.update(status="oom" if oom else "error", error=f"{type(error).__name__}: {str(error)[:600]}")
        row["steps_done"] = len(ends)
    history = trainer.state.log_history if trainer is not None else []
    row.update(losses=[h["loss"] for h in history if "loss" in h], seconds=time.time() - started)
    row.update(torch=torch.__version__, peak_host_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    if cuda:  # the most torch allocated, and the most its caching allocator held
        row.update(device=torch.cuda.get_device_name(), peak_allocated_gib=torch.cuda.max_memory_allocated() / 2**30)
        row.update(peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30)
    trainer = model = None
    gc.collect()
    torch.cuda.empty_cache() if cuda else None
    return row


def worker(args: argparse.Namespace) -> int:
    """The child process of one setting: measures it and writes its row to `--result`. `--inject-failure NAME:KIND`
    makes setting NAME fail: `oom` at its first step, `crash` by exiting before it measures anything."""
    setting = next(s for s in GRID if s.name == args.worker)
    target, _, kind = (args.inject_failure or "").partition(":")
    inject = (kind or "oom") if target == setting.name else None
    if inject == "crash":
        os._exit(3)
    if setting.offload:  # DeepSpeed needs a world, of one process here (else it looks for MPI)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    row = measure(setting, shape(args.tiny, args.prompt_tokens), args.steps, inject)
    Path(args.result).write_text(json.dumps(row))
    return 0


def run_one(setting: Setting, args: argparse.Namespace, deadline: float, log: Any) -> dict[str, Any]:
    """Runs one setting in a child process killed at `deadline` seconds: its row, or what became of it."""
    row: dict[str, Any] = {"config": setting.name, **asdict(setting)}
    if setting.offload and find_spec("deepspeed") is None:
        why = "deepspeed is not installed (hf-jacobi[deepspeed]; on a lent GPU: gpu_kit.py build --with deepspeed)"
        return {**row, "status": "not measured", "why": why}
    flags = ["--steps", str(args.steps), "--prompt-tokens", str(args.prompt_tokens)] + ["--tiny"] * args.tiny
    flags += ["--inject-failure", args.inject_failure] if args.inject_failure else []
    log.write(f"\n===== {setting.name} (deadline {deadline:.0f} s)\n".encode())
    log.flush()
    start = log.tell()
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "row.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", setting.name, "--result", str(result)]
        child = subprocess.Popen(command + flags, stdout=log, stderr=log, process_group=0)
        try:
            code = child.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # its own process group: the child and whatever it started
            child.wait()
            return {**row, "status": "deadline", "why": f"killed at its deadline of {deadline:.0f} s"}
        if result.is_file():
            return json.loads(result.read_text())
    tail = Path(log.name).read_bytes()[start:][-600:].decode(errors="replace")
    return {**row, "status": "crashed", "why": f"exit code {code} without a row; its output ended: {tail}"}


def run_grid(args: argparse.Namespace, settings: list[Setting]) -> None:
    """Each setting in turn under min(`--config-seconds` x its weight, what is left of the budget), its row appended
    to the JSON lines as soon as it ends; FlexAttention's settings weigh 2 (it compiles its kernels), DeepSpeed's 3."""
    args.output_dir.mkdir(parents=True, exist_ok=True)
    lines, end = args.output_dir / f"{OUTPUT}.jsonl", time.monotonic() + args.budget_seconds
    lines.write_text("")
    with (args.output_dir / f"{OUTPUT}.log").open("wb") as log:
        for setting in settings:
            weight = 3 if setting.offload else 2 if setting.attention == "flex_attention" else 1
            deadline = min(args.config_seconds * weight, end - time.monotonic() - 5)
            if deadline < 10:
                row = {"config": setting.name, **asdict(setting), "status": "not measured", "why": "budget spent"}
            else:
                row = run_one(setting, args, deadline, log)
            with lines.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps({k: row[k] for k in SHOWN if k in row}), flush=True)


def main(argv: list[str] | None = None) -> int:
    names = [s.name for s in GRID]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path("runs/train-step-7b"))
    parser.add_argument("--tiny", action="store_true", help="a tiny Qwen2 on the CPU in float32: the rehearsal")
    parser.add_argument("--configs", help=f"comma-separated settings, run in the grid's order: {', '.join(names)}")
    parser.add_argument("--steps", type=int, help="timed steps after the warm-up (default: 3 on a GPU, 2 with --tiny)")
    parser.add_argument("--prompt-tokens", type=int, default=400, help="each synthetic prompt's length")
    parser.add_argument("--budget-seconds", type=float, default=540.0, help="the whole grid's wall time")
    parser.add_argument("--config-seconds", type=float, default=90.0, help="one setting's deadline, times its weight")
    parser.add_argument("--inject-failure", metavar="NAME:KIND", help="make one setting fail (KIND: oom or crash)")
    parser.add_argument("--worker", choices=names, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.steps = args.steps or (2 if args.tiny else 3)
    if args.worker:
        return worker(args)
    chosen = args.configs.split(",") if args.configs else names
    if unknown := sorted(set(chosen) - set(names)):
        parser.error(f"unknown settings {unknown}; the grid: {names}")
    run_grid(args, [s for s in GRID if s.name in chosen])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
