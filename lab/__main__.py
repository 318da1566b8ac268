"""`python -m lab COMMAND`: the project's own study commands, with `hf-jacobi`'s flags, errors and exit codes.

- `study`: a Jacobi Forcing study's report from its training runs' logged held-out curves;
- `compare`: does a re-run reproduce the committed outputs of a recipe stage;
- `overhead`: tokens per forward per Jacobi variant and what the loop costs beyond the model;
- `forward-cost`: one forward's cost against its width, at several batch sizes, on this machine or a real shape.
"""

from __future__ import annotations

import sys

from hf_jacobi.cli import build_parser, main

from .commands import compare, forward_cost, overhead, study

COMMANDS = (overhead, forward_cost, study, compare)


def lab_main(argv: list[str] | None = None) -> int:
    """Runs one lab command and returns its exit code, as `hf_jacobi.cli.main` does for the user's commands."""
    parser = build_parser(COMMANDS, prog="python -m lab", description="The hf_jacobi project's own studies.")
    return main(argv, parser=parser)


if __name__ == "__main__":
    sys.exit(lab_main())
