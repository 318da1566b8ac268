"""Stage 3: the training variants, side by side on the one GPU, each stopped at the stage's deadline.

Each variant is `hf-jacobi train` on the campaign's trajectories with `jacobi_forcing/train_campaign.yaml` and its own
flags, run in a process of its own (as gpu_sweep.py does: a 135M model leaves a GPU mostly idle, so three runs share
it). The deadline is a trainer callback (`DeadlineStop`) that ends training after the step in which the deadline
passes and saves there, so every run is judged on weights of its last step; a run that overstays its deadline by
`grace` seconds is killed and judged on its newest checkpoint. `hf-jacobi train` has no such option, so the worker
runs its `run_train` with the trainer class wrapped (`deadline_trainer`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

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


class DeadlineStop(TrainerCallback):
    """Ends training after the optimizer step during which wall-clock time `deadline` (epoch seconds) passed, and
    saves a checkpoint there; records where it stopped in `stopped_at`."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if time.time() >= self.deadline:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
            self.stopped_at = state.global_step
        return control


class PeriodicSave(TrainerCallback):
    """Saves a checkpoint after the first step that ends `every` seconds or more after the last save (or the start):
    a run that spans sittings loses at most that much when it is killed, whatever its step time."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.last = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.last >= self.every:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        self.last = time.monotonic()
        return control


@contextlib.contextmanager
def deadline_trainer(deadline: float, save_every: float | None = None) -> Iterator[None]:
    """While open, `hf-jacobi train` (`hf_jacobi.cli.train.run_train`) builds its trainer with a `DeadlineStop` (and a
    `PeriodicSave` every `save_every` seconds, when given)."""
    from hf_jacobi.cli import train as train_cli

    original = train_cli.JacobiForcingTrainer
    extra = [DeadlineStop(deadline)] + ([PeriodicSave(save_every)] if save_every else [])

    class DeadlineTrainer(original):
        def __init__(self, *args: Any, callbacks=None, **kwargs: Any) -> None:
            super().__init__(*args, callbacks=[*(callbacks or []), *extra], **kwargs)

    train_cli.JacobiForcingTrainer = DeadlineTrainer
    try:
        yield
    finally:
        train_cli.JacobiForcingTrainer = original


def run_variant(argv: list[str], deadline: float, save_every: float | None = None) -> int:
    """`hf-jacobi train ARGV` stopped at `deadline` (epoch seconds), saving every `save_every` seconds when given:
    what a worker process runs."""
    from hf_jacobi.cli.train import run_train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with deadline_trainer(deadline, save_every):
        return run_train(argv)


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
