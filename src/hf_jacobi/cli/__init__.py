"""The `hf-jacobi` command line: try Jacobi decoding on one prompt, or measure it against greedy on HumanEval.

Every subcommand that decodes checks the claim the project rests on, that Jacobi decoding returns exactly greedy's
tokens, and in float32, where it must, exits with 1 when it does not, so a broken build cannot print a good-looking
speedup (in a reduced precision it counts the answers that differ and says why, `exactness`). Forwards are counted
after the prefill on both sides: the prefill yields the first new token either way, so greedy needs new tokens - 1
decoding forwards and Jacobi reports its own count in `forward_passes`.

Each command lives in its own module (parser and runner together); `common` holds what they share. A problem the
user can fix ends the command with exit code 1 and one line on stderr naming the input and the fix; `--debug` (before
the command) or `HF_JACOBI_DEBUG=1` adds the traceback.

The user's environment decides how the Hub is used, as for transformers itself: a `--model` Hub id is downloaded into
the Hugging Face cache (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT), or read from the cache alone under HF_HUB_OFFLINE=1; no
command changes those settings, nor seeds torch's global generator except with the `--seed` of a command that samples.
The embedded model never needs the Hub.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from . import bench, demo, export, generate, magpie, push, quality, recipe, tune
from .common import USER_ERRORS, debug_requested, report_error, report_interrupt

COMMANDS = (generate, demo, bench, quality, tune, push, recipe, export, magpie)
"""Command modules, each with `add_parser(commands)` that registers its flags and its runner as `handler` (the recipe
steps only register their names: `main` hands their arguments to TRL's parser). The project's own study commands live
outside the package (`python -m lab`, in the repository) and reuse `main` with their own modules."""

DESCRIPTION = "Lossless Jacobi decoding for Hugging Face LMs."


def build_parser(
    commands: Sequence[ModuleType] = COMMANDS, prog: str = "hf-jacobi", description: str = DESCRIPTION
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (also: HF_JACOBI_DEBUG=1)"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Runs one subcommand and returns its exit code: 0 ok, 1 Jacobi differed from greedy or setup failed, 2 usage.

    Args:
        argv: the arguments after the program name (default: `sys.argv[1:]`).
        parser: the parser of another command set that shares this error handling (default: `hf-jacobi`'s own).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = debug_requested(argv)
    if argv[:1] == ["--debug"]:  # the global flag, taken here so that the recipe steps see it too
        argv = argv[1:]
    if parser is None and argv and argv[0] in recipe.STEPS:  # parsed by TRL's parser, not argparse
        return recipe.run_step(argv[0], argv[1:], debug=debug)
    args = (parser or build_parser()).parse_args(argv)
    args.argv = argv
    import torch

    try:
        with torch.inference_mode():
            return args.handler(args)
    except USER_ERRORS as error:
        return report_error(error, debug)
    except KeyboardInterrupt as error:
        return report_interrupt(error, debug)
