"""Trains a tiny random model on trajectories and SIGKILLs itself at the end of a chosen step, as a killed job dies:
no exception, no callback, no final save; only the checkpoints already written remain.

Run as `python train_until_killed.py SPEC.json`; the spec gives the trajectory folder, the output folder, the step to
die after, and overrides of the test config (`test_training.config`), so the run is the one the test compares against.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_models and test_training

from hf_jacobi import JacobiForcingTrainer, load_trajectories
from test_training import config
from tiny_models import fresh_tiny_model, tiny_tokenizer


class KillAt(TrainerCallback):
    """Dies at the end of `step` (before the Trainer saves or logs anything of that step)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(Path(spec["output_dir"]), **spec["config"]),
        train_dataset=load_trajectories(spec["trajectories"]),
        processing_class=tiny_tokenizer(),
        callbacks=[KillAt(spec["kill_at_step"])],
    )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1])
