"""A training run killed by SIGKILL resumes from its last checkpoint, and its loss curve matches an uninterrupted
run's (in-process interruption is covered by test_training.py; this one kills a real process)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from hf_jacobi import JacobiForcingTrainer
from test_training import config, trajectory_folder
from tiny_models import fresh_tiny_model, tiny_tokenizer

KILL_TARGET = Path(__file__).parent / "kill_targets" / "train_until_killed.py"
# 4 rows, batch 2: 2 steps an epoch, each epoch with fresh noisy views; checkpoints at steps 3 and 6, so the kill
# after step 5 leaves checkpoint-3, mid-epoch, and loses steps 4 and 5
SETTINGS = dict(max_steps=6, save_strategy="steps", save_steps=3, noise_schedule="random")
KILL_AT_STEP = 5


class StepsRun(TrainerCallback):
    """Records the steps a run actually trains (a resumed run starts after its checkpoint's step)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def losses(output_dir: Path) -> list[float]:
    """The loss curve of a run, as its final checkpoint's trainer_state.json records it (steps 1 to max_steps)."""
    state = json.loads((output_dir / f"checkpoint-{SETTINGS['max_steps']}" / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_a_killed_training_run_resumes_from_its_last_checkpoint_on_the_same_curve(tmp_path, trajectories):
    data = trajectory_folder(trajectories, tmp_path / "trajectories")
    killed = tmp_path / "killed"
    spec = {"trajectories": str(data), "output_dir": str(killed), "kill_at_step": KILL_AT_STEP, "config": SETTINGS}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(KILL_TARGET), str(tmp_path / "spec.json")], capture_output=True, text=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-3"]

    def run(output_dir: Path, resume: bool) -> tuple[JacobiForcingTrainer, list[int]]:
        steps = StepsRun()
        trainer = JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(output_dir, **SETTINGS),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
            callbacks=[steps],
        )
        trainer.train(resume_from_checkpoint=resume)  # True: the last checkpoint in output_dir
        return trainer, steps.steps

    resumed, resumed_steps = run(killed, resume=True)
    whole, _ = run(tmp_path / "whole", resume=False)
    assert resumed_steps == [4, 5, 6]  # resumed from checkpoint-3, not started over
    assert len(losses(killed)) == SETTINGS["max_steps"]  # steps 1-3 from the killed run, 4-6 from the resumed one
    assert losses(killed) == pytest.approx(losses(tmp_path / "whole"), rel=1e-5)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
