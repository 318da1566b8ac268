"""`hf-jacobi collect`, `train` and `evaluate`: the recipe steps, whose flags come from dataclasses and YAML recipes.

Their flags are parsed by TRL's parser (`--config recipe.yaml` plus any field of the step's dataclasses), not by
argparse, so `main` hands them the raw arguments; they are registered here only so that `hf-jacobi --help` lists them.
Each flag is taken with dashes, as by the other commands (`--max-new-tokens`), or with underscores, the spelling of
a recipe's YAML keys (`max_new_tokens:`): TRL's parser registers both.
Each step's arguments and runner live in its own module (`collect`, `train`, `evaluate`; what they share in
`recipe_args`), imported only when the step runs.
"""

from __future__ import annotations

import sys

from .common import USER_ERRORS, report_error, report_interrupt, source_error

STEPS = {
    "collect": "record Jacobi trajectories over a prompt set (hf-jacobi collect --help)",
    "train": "Jacobi Forcing training from a YAML recipe (hf-jacobi train --help)",
    "evaluate": "tokens per forward before and after training (hf-jacobi evaluate --help)",
}

SETTING_ERRORS = (ValueError, FileNotFoundError)
"""What the steps' settings are refused with besides `USER_ERRORS`: TRL's and transformers' argument dataclasses
(`TrainingArguments`, `SFTConfig`) and the steps' own checks raise ValueError for a bad value, as the Hugging Face
libraries do, and a recipe or data file that is not there is a FileNotFoundError."""


def run_step(step: str, argv: list[str], debug: bool = False) -> int:
    """Runs one step on its own arguments; a setting it refuses or a model that does not load is reported in one line
    with exit code 1, as the argparse commands report theirs (with the traceback when `debug`)."""
    # trl, datasets, peft and accelerate are imported only when a step runs: a decoding-only install lacks them
    from .. import TRAINING_EXTRA

    try:
        if step == "collect":
            from .collect import run_collect as handler
        elif step == "train":
            from .train import run_train as handler
        else:
            from .evaluate import run_evaluate as handler
    except ModuleNotFoundError as error:
        if error.name not in TRAINING_EXTRA:
            raise
        print(f"error: hf-jacobi {step} needs {error.name}, which a decoding-only install leaves out: pip install "
              "'hf-jacobi[train]'", file=sys.stderr)  # fmt: skip
        return 1
    try:
        return handler(argv)
    except (*USER_ERRORS, *SETTING_ERRORS) as error:
        from ..data.prompt_rows import PromptColumnError

        if isinstance(error, PromptColumnError):  # train has no column flag: its hint names no Python keyword
            error, cause = source_error(error), error
            error.__cause__ = cause  # --debug prints where it came from
        return report_error(error, debug)
    except KeyboardInterrupt as error:
        return report_interrupt(error, debug)


def add_parser(commands) -> None:
    for step, summary in STEPS.items():
        commands.add_parser(step, help=summary)
