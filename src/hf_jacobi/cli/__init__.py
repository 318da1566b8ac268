"""The `hf-jacobi` command line: try Jacobi decoding on one prompt, or measure it against greedy on HumanEval.

Every subcommand that decodes checks the claim the project rests on, that Jacobi decoding returns exactly greedy's
tokens, and exits with 1 when it does not, so a broken build cannot print a good-looking speedup. Forwards are counted
after the prefill on both sides: the prefill yields the first new token either way, so greedy needs new tokens - 1
decoding forwards and Jacobi reports its own count in `forward_passes`.

Each command lives in its own module (parser and runner together); `common` holds what they share. A problem the
user can fix ends the command with exit code 1 and one line on stderr naming the input and the fix; `--debug` (before
the command) or `HF_JACOBI_DEBUG=1` adds the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import (
    bench,
    compare,
    demo,
    export,
    forward_cost,
    generate,
    magpie,
    overhead,
    push,
    quality,
    recipe,
    study,
    tune,
)
from .common import USER_ERRORS, debug_requested, report_error

COMMANDS = (generate, demo, bench, quality, overhead, forward_cost, tune, push, recipe, study, export, magpie, compare)
"""Command modules, each with `add_parser(commands)` that registers its flags and its runner as `handler` (the recipe
steps only register their names: `main` hands their arguments to TRL's parser)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-jacobi", description="Lossless Jacobi decoding for Hugging Face LMs.")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (also: HF_JACOBI_DEBUG=1)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
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


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand and returns its exit code: 0 ok, 1 Jacobi differed from greedy or setup failed, 2 usage."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = debug_requested(argv)
    if argv[:1] == ["--debug"]:  # the global flag, taken here so that the recipe steps see it too
        argv = argv[1:]
    if argv and argv[0] in recipe.STEPS:  # parsed by TRL's parser, not argparse
        use_offline_hub()
        return recipe.run_step(argv[0], argv[1:], debug=debug)
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command != "push":  # the only subcommand that talks to the Hub
        use_offline_hub()
    import torch

    torch.manual_seed(0)
    try:
        with torch.inference_mode():
            return args.handler(args)
    except USER_ERRORS as error:
        return report_error(error, debug)
