"""`python -m lab study`: the report of a Jacobi Forcing study, from its training runs' logged held-out curves."""

from __future__ import annotations

import argparse
from pathlib import Path

from hf_jacobi.atomic import write_text
from hf_jacobi.cli.common import CliError, writable_output


def run_study_command(args: argparse.Namespace) -> int:
    """Reads each run's held-out curve, prints the table, writes study.md and study.png."""
    from lab.study import chain_runs, load_run, markdown_table, plot

    writable_output(args.output_dir, "--output-dir", folder=True)
    continues = {}
    for pair in args.continues:
        later, sep, earlier = pair.partition("=")
        if not sep or not later or not earlier:
            raise CliError(f"--continues takes LATER=EARLIER (two run folder names), got {pair!r}")
        continues[later] = earlier
    try:
        runs = chain_runs([load_run(folder) for folder in args.runs], continues)
    except (ValueError, FileNotFoundError) as error:
        raise CliError(str(error)) from error
    table = markdown_table(runs)
    print(table)
    write_text(args.output_dir / "study.md", table + "\n")
    png = plot(runs, args.output_dir / "study.png", title=args.title)
    print(f"\nwrote {args.output_dir / 'study.md'} and {png}")
    return 0


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "study", help="table and plot of held-out tokens per forward of training runs (hf-jacobi train --heldout_*)"
    )
    parser.add_argument("runs", type=Path, nargs="+", help="training output folders (their trainer_state.json)")
    parser.add_argument("--output-dir", type=Path, default=Path("study"), help="where study.md / study.png go")
    parser.add_argument("--title", default="held-out tokens per forward", help="the plot's title")
    parser.add_argument(
        "--continues",
        nargs="+",
        default=[],
        metavar="LATER=EARLIER",
        help="runs that trained on from another's adapter (a second round): LATER's curve starts where EARLIER's "
        "training tokens end (names are the run folders' names)",
    )
    parser.set_defaults(handler=run_study_command)
