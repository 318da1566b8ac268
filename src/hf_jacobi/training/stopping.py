"""Stopping a run part-way through its schedule.

Why: a checkpoint is often judged, and shipped, at a step inside a longer schedule (e.g. step 250 of a 556-step cosine
epoch). `max_steps=250` would squeeze the whole schedule (warm-up and decay) into 250 steps and give other weights; the
run has to follow the long schedule and stop where the checkpoint was taken.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback, TrainerState
from transformers.trainer import TRAINER_STATE_NAME


class StopAfterSteps(TrainerCallback):
    """Ends training after optimizer step `steps`, saving a checkpoint there; the schedule stays the whole run's."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_begin(self, args, state, control, **kwargs):
        # Trainer checks for a stop only after a step: resumed at or past the stop, it would train one step more.
        if state.global_step >= self.steps:
            raise ValueError(
                f"resumed at step {state.global_step}, at or past stop_after_steps={self.steps}: nothing to train; "
                "raise stop_after_steps or resume from an earlier checkpoint."
            )

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control


def checkpoint_step(checkpoint: str | Path) -> int:
    """The optimizer step a checkpoint folder was saved at, from its trainer_state.json."""
    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME)).global_step
