"""Stopping a run part-way through its schedule, at a step or at a time, and saving by the clock.

Why: a checkpoint is often judged, and shipped, at a step inside a longer schedule (e.g. step 250 of a 556-step cosine
epoch). `max_steps=250` would squeeze the whole schedule (warm-up and decay) into 250 steps and give other weights; the
run has to follow the long schedule and stop where the checkpoint was taken. A job with a time limit (a queue's
wall-clock limit, a preemptible machine, a lease) needs the same by the clock: stop in time with a checkpoint saved,
and resume from it in the next job, the schedule unchanged.
"""

from __future__ import annotations

import time
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


class StopAfterSeconds(TrainerCallback):
    """Ends training after the optimizer step during which `seconds` of this `train()` call had passed, saving a
    checkpoint there (a step is never cut short, so a run overstays by at most one step)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= self.seconds:
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control


class SaveEverySeconds(TrainerCallback):
    """Saves a checkpoint after the first step that ends `seconds` or more after the last save (or the start): a run
    that is killed loses at most that much work, whatever its step time, where `save_steps` bounds it in steps only."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.last >= self.seconds:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):
        self.last = time.monotonic()
        return control


def checkpoint_step(checkpoint: str | Path) -> int:
    """The optimizer step a checkpoint folder was saved at, from its trainer_state.json."""
    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME)).global_step


def clock_callbacks(args) -> list[TrainerCallback]:
    """The stopping and saving callbacks a `JacobiForcingConfig` asks for."""
    callbacks: list[TrainerCallback] = []
    if args.stop_after_steps is not None:
        callbacks.append(StopAfterSteps(args.stop_after_steps))
    if args.stop_after_seconds is not None:
        callbacks.append(StopAfterSeconds(args.stop_after_seconds))
    if args.save_every_seconds is not None:
        callbacks.append(SaveEverySeconds(args.save_every_seconds))
    return callbacks
