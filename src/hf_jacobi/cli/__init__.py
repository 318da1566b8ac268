"""The `hf-jacobi` command line: try Jacobi decoding on one prompt, or measure it against greedy on HumanEval.

Every subcommand that decodes checks the claim the project rests on, that Jacobi decoding returns exactly greedy's
tokens, and exits with 1 when it does not, so a broken build cannot print a good-looking speedup. Forwards are counted
after the prefill on both sides: the prefill yields the first new token either way, so greedy needs new tokens - 1
decoding forwards and Jacobi reports its own count in `forward_passes`.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..models import ModelNotAvailableError
from . import bench, demo, generate, push, tune
from .common import CliError

COMMANDS = (generate, demo, bench, tune, push)
"""Command modules, each with `add_parser(commands)` that registers its flags and its runner as `handler`."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-jacobi", description="Lossless Jacobi decoding for Hugging Face LMs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    # Listed for --help; their flags are parsed by TRL's parser (see run_recipe_step).
    commands.add_parser("collect", help="record Jacobi trajectories over a prompt set (hf-jacobi collect --help)")
    commands.add_parser("train", help="Jacobi Forcing training from a YAML recipe (hf-jacobi train --help)")
    commands.add_parser("evaluate", help="tokens per forward before and after training (hf-jacobi evaluate --help)")
    return parser


def use_offline_hub() -> None:
    """Nothing can be downloaded here, so default to offline mode instead of waiting on network timeouts.

    huggingface_hub reads HF_HUB_OFFLINE once, when imported, and `import hf_jacobi` has already imported it, so its
    constant is updated too.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if os.environ["HF_HUB_OFFLINE"].strip().upper() in {"1", "ON", "YES", "TRUE"}:
        from huggingface_hub import constants as hub_constants

        hub_constants.HF_HUB_OFFLINE = True


RECIPE_STEPS = ("collect", "train", "evaluate")
"""Subcommands whose flags come from dataclasses and YAML recipes (`--config`), parsed by TRL's parser."""


def run_recipe_step(step: str, argv: list[str]) -> int:
    from hf_jacobi.training import scripts

    handler = {"collect": scripts.run_collect, "train": scripts.run_train, "evaluate": scripts.run_evaluate}[step]
    try:
        return handler(argv)
    except (ValueError, FileNotFoundError, ModelNotAvailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand and returns its exit code: 0 ok, 1 Jacobi differed from greedy or setup failed, 2 usage."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in RECIPE_STEPS:
        use_offline_hub()
        return run_recipe_step(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command != "push":  # the only subcommand that talks to the Hub
        use_offline_hub()
    import torch

    torch.manual_seed(0)
    try:
        with torch.inference_mode():
            return args.handler(args)
    except (CliError, ModelNotAvailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
