"""`python -m lab compare`: does a re-run reproduce the committed outputs? (trajectories, training logs, adapters, reports)"""

from __future__ import annotations

import argparse
from pathlib import Path

from hf_jacobi.atomic import write_text
from hf_jacobi.cli.common import CliError, writable_output


def run_compare_command(args: argparse.Namespace) -> int:
    """Compares each (re-run, reference) pair, prints one verdict per pair, exits 1 when any differs."""
    from lab.reproduction import compare

    if len(args.paths) % 2:
        raise CliError(
            f"compare takes pairs REPRODUCED REFERENCE, got {len(args.paths)} paths: {' '.join(map(str, args.paths))}"
        )
    if args.output is not None:
        writable_output(args.output, "--output", folder=False)
    reports, equal = [], True
    for reproduced, reference in zip(args.paths[::2], args.paths[1::2], strict=True):
        try:
            result = compare(reproduced, reference, rtol=args.rtol, atol=args.atol)
        except (ValueError, FileNotFoundError) as error:
            raise CliError(str(error)) from error
        reports.append(result.markdown())
        print(reports[-1], flush=True)
        equal = equal and result.equal
    if args.output is not None:
        write_text(args.output, "\n\n".join(reports) + "\n")
        print(f"\nwrote {args.output}")
    return 0 if equal else 1


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "compare",
        help="check a re-run against committed outputs: prompt files, trajectory folders, training logs, adapters, "
        "evaluation JSON",
        description="Each pair is a re-run's output and the committed output it should equal; the kind is read from "
        "the reference. Token ids and counts must be equal; floats within --rtol (adapter tensors within --atol); "
        "clock readings and paths are not compared. Exit code 1 when any pair differs.",
    )
    parser.add_argument(
        "paths",
        type=Path,
        nargs="+",
        metavar="REPRODUCED REFERENCE",
        help="pairs: the re-run's output, then the reference",
    )
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of logged floats (default 1e-4)")
    parser.add_argument(
        "--atol", type=float, default=1e-4, help="absolute tolerance of adapter tensors (default 1e-4)"
    )
    parser.add_argument("--output", type=Path, default=None, help="also write the verdicts (Markdown) to this file")
    parser.set_defaults(handler=run_compare_command)
