"""Held-out speed during training: tokens per forward on prompts the trainer never sees, logged as training goes.

Training loss says little about what Jacobi Forcing is for. This callback decodes a fixed set of held-out prompts
with the model being trained every `every_steps` optimizer steps (and at the start and the end), with each Jacobi
setting, and logs tokens per forward next to the quality measures of `evaluation.py` into the trainer's log history
(so trainer_state.json and every reporting integration carry the curve against `num_input_tokens_seen`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..decoding.config import JacobiConfig
from .evaluation import evaluate_model

logger = logging.getLogger(__name__)

PREFIX = "heldout"
# The reference answers live in the run folder: a resumed run must score the starting model's answers, which the
# model it resumes from can no longer give.
REFERENCE_FILE = "heldout_reference.json"


class HeldOutSpeedCallback(TrainerCallback):
    """Measures held-out tokens per forward every `every_steps` steps on the main process.

    Args:
        prompts: token ids of the held-out prompts (chat-encoded as for collection).
        settings: name -> Jacobi setting to measure (e.g. plain and multi-block + recycling).
        reference_answers: the base model's greedy answers to those prompts, for the NLL quality measure.
    """

    def __init__(
        self,
        prompts: list[list[int]],
        settings: dict[str, JacobiConfig],
        *,
        every_steps: int,
        max_new_tokens: int,
        batch_size: int = 8,
        reference_answers: list[list[int]] | None = None,
    ) -> None:
        if every_steps < 1:
            raise ValueError(f"every_steps must be an integer >= 1, got {every_steps!r}")
        if not prompts or not settings:
            raise ValueError("HeldOutSpeedCallback needs at least one prompt and one Jacobi setting")
        self.prompts = prompts
        self.settings = settings
        self.every_steps = every_steps
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.reference_answers = reference_answers
        self.last_measured: int | None = None

    def _measure(self, args: TrainingArguments, state: TrainerState, model) -> None:
        if not state.is_world_process_zero or model is None or self.last_measured == state.global_step:
            return
        self.last_measured = state.global_step
        if any(entry["step"] == state.global_step for entry in heldout_curve(state.log_history)):
            return  # resumed from a checkpoint saved right after this step's measurement: once is its figure
        if self.reference_answers is None and state.global_step > 0:  # resumed: the answers taken at step 0
            self.reference_answers = self._saved_reference(Path(args.output_dir), state.global_step)
        was_training = model.training
        figures, answers = evaluate_model(
            model,
            self.prompts,
            self.settings,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            reference_answers=self.reference_answers,
        )
        if self.reference_answers is None:  # the first measurement (step 0) is the base model: its answers are the
            self.reference_answers = answers  # reference for every later one
            if state.global_step == 0:  # a resumed model's answers are no starting point for a later resume
                self._save_reference(Path(args.output_dir), answers)
        model.train(was_training)
        entry = {
            "step": state.global_step,
            "num_input_tokens_seen": state.num_input_tokens_seen,
            f"{PREFIX}/distinct_3grams": figures.distinct_3grams,
            f"{PREFIX}/reference_nll": figures.reference_nll,
        }
        for setting in figures.settings:
            entry[f"{PREFIX}/{setting.name}_tokens_per_forward"] = setting.tokens_per_forward
            if not setting.identical_to_greedy:
                logger.warning("held-out %s decoding differed from greedy at step %d", setting.name, state.global_step)
        state.log_history.append(entry)
        logger.info("held-out at step %d: %s", state.global_step, entry)

    def _save_reference(self, folder: Path, answers: list[list[int]]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        payload = {"prompts": self.prompts, "answers": answers}
        (folder / REFERENCE_FILE).write_text(json.dumps(payload), encoding="utf-8")

    def _saved_reference(self, folder: Path, step: int) -> list[list[int]] | None:
        path = folder / REFERENCE_FILE
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if saved is not None and saved.get("prompts") == self.prompts:
            return saved["answers"]
        why = "holds other held-out prompts" if saved is not None else "is missing"
        logger.warning(
            "resumed at step %d but %s %s: the held-out NLL from here on scores this model's own answers, not the "
            "starting model's, and is not comparable with the steps before",
            step,
            path,
            why,
        )
        return None

    def on_train_begin(self, args, state: TrainerState, control: TrainerControl, model=None, **kwargs):
        self._measure(args, state, model)

    def on_step_end(self, args, state: TrainerState, control: TrainerControl, model=None, **kwargs):
        if state.global_step % self.every_steps == 0:
            self._measure(args, state, model)

    def on_train_end(self, args, state: TrainerState, control: TrainerControl, model=None, **kwargs):
        measured = heldout_curve(state.log_history)
        if not measured or measured[-1]["step"] != state.global_step:  # a run ending on a multiple of every_steps
            self._measure(args, state, model)  # was measured at its last step already


def heldout_curve(log_history: list[dict]) -> list[dict]:
    """The held-out entries of a trainer's log history (trainer_state.json's `log_history`), in step order."""
    entries = [e for e in log_history if any(k.startswith(f"{PREFIX}/") for k in e)]
    return sorted(entries, key=lambda e: e["step"])
