"""Stage 3: the training variants, side by side on the one GPU, each stopped at the stage's deadline.

Each variant is `hf-jacobi train` on the campaign's trajectories with `jacobi_forcing/train_campaign.yaml` and its own
flags, run in a process of its own (as gpu_sweep.py does: a 135M model leaves a GPU mostly idle, so three runs share
it). The deadline is `hf-jacobi train --stop_after_seconds`, which ends training after the step in which it passes
and saves there, so every run is judged on weights of its last step; a run that overstays its deadline by `grace`
seconds is killed and judged on its newest checkpoint.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "smollm2-135m" / "jacobi_forcing" / "train_campaign.yaml"

VARIANTS: dict[str, list[str]] = {
    # the shipped adapter's settings: LoRA r16 on the seven projections, lr 2e-4, KL anchor x10
    "lora-r16": [],
    # a higher rank on every linear layer of the blocks (the LM head is tied to the embedding and stays)
    "lora-r64": ["--lora_r", "64", "--lora_alpha", "128", "--learning_rate", "1e-4"],
    # every parameter, the KL anchor against a frozen copy of the base; the paper's lr range scaled to a 135M model
    "full": ["--use_peft", "false", "--learning_rate", "2e-5"],
}
TINY_FLAGS = [
    "--per_device_train_batch_size",
    "4",
    "--num_anchor_texts",
    "4",
    "--use_cpu",
    "true",
    "--bf16",
    "false",
    "--dataloader_num_workers",
    "0",
    "--logging_steps",
    "1",
    "--save_steps",
    "2",
    "--max_length",
    "512",
]
"""Over every variant in a `--tiny` rehearsal: a CPU run of seconds."""
GPU_FLAGS: list[str] = []
"""Over every variant on the GPU: none. TensorFloat-32 would gain nothing under bf16 autocast (every matmul already
runs in bfloat16) and has never run there."""


def run_variant(argv: list[str], deadline: float, save_every: float | None = None) -> int:
    """`hf-jacobi train ARGV` stopped at `deadline` (epoch seconds), saving every `save_every` seconds when given:
    what a worker process runs. The trainer's clock (`--stop_after_seconds`) starts when training does, so loading
    the model and data runs past the deadline by that long; the stage's grace covers it."""
    from hf_jacobi.cli import main

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    clock = ["--stop_after_seconds", f"{max(0.0, deadline - time.time()):.0f}"]
    if save_every:
        clock += ["--save_every_seconds", f"{save_every:g}"]
    return main(["train", *argv, *clock])


CLEAN = "-clean"
CLEAN_FLAGS = ["--drop_looping_trajectories", "true"]
"""A variant named `<variant>-clean` trains as `<variant>` on the trajectories whose answer does not end in a loop:
trained on every trajectory, the CPU campaign's first point looped on far more judging requests than the base."""
KL_SUFFIX = re.compile(r"-kl(\d+(?:\.\d+)?)$")
"""A variant named `<variant>-kl<W>` trains as `<variant>` with the KL anchor to the base at weight W instead of the
recipe's 10: the anchor is the one lever measured to trade chat loops against speed (docs/results/quality-gpu-sweep:
x3 looped more than x10)."""


def variant_flags(name: str) -> list[str]:
    """The flags of a variant of VARIANTS, optionally suffixed `-kl<W>` (the anchor's weight), then `-clean`."""
    base = name.removesuffix(CLEAN)
    flags = CLEAN_FLAGS if name.endswith(CLEAN) else []
    weight = KL_SUFFIX.search(base)
    if weight:
        base, flags = base[: weight.start()], ["--base_kl_weight", weight.group(1), *flags]
    if base not in VARIANTS:
        raise ValueError(
            f"unknown training variant {name!r}; known: {sorted(VARIANTS)}, each optionally followed by "
            f"'-kl<weight>' (e.g. '-kl30') and then {CLEAN!r}"
        )
    return VARIANTS[base] + flags


def train_arguments(name: str, trajectories: Sequence[Path], run: Path, model: str, tiny: bool) -> list[str]:
    """The `hf-jacobi train` arguments of one variant, on its trajectory folders (read as one set)."""
    arguments = ["--config", str(RECIPE), "--trajectories", *map(str, trajectories), "--output_dir", str(run)]
    arguments += ["--model_name_or_path", model, *variant_flags(name)]
    return arguments + (TINY_FLAGS if tiny else GPU_FLAGS)


def _steps(folder: Path) -> int | None:
    state = folder / "trainer_state.json"
    return json.loads(state.read_text())["global_step"] if state.is_file() else None


def newest_weights(run: Path) -> tuple[Path | None, int | None]:
    """The run's final weights if it saved them (a LoRA adapter or a full model), else its newest complete
    checkpoint, with the optimizer steps behind them; (None, None) when there is neither."""
    for name in ("adapter_model.safetensors", "model.safetensors"):
        if (run / name).is_file():
            return run, _steps(run)
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda folder: int(folder.name.split("-")[1]), reverse=True)
    for folder in checkpoints:
        if (folder / "trainer_state.json").is_file():
            return folder, _steps(folder)
    return None, None


def is_adapter(folder: Path) -> bool:
    return (folder / "adapter_model.safetensors").is_file()


def train_log(run: Path) -> dict[str, Any]:
    """The run's log history (losses, learning rate, tokens seen per logging step) from its newest state file."""
    weights, steps = newest_weights(run)
    state = (weights or run) / "trainer_state.json"
    history = json.loads(state.read_text()).get("log_history", []) if state.is_file() else []
    return {"steps": steps, "weights": str(weights) if weights else None, "log_history": history}
