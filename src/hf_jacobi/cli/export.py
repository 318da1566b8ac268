"""`hf-jacobi export-weights`: a trained Jacobi Forcing adapter written with its Jacobi defaults, to a folder of the
user's or, asked for by name, over the adapter shipped in the package.

`load_default_model(jacobi_forcing=True)` and `--jacobi-forcing` load the shipped one; replacing it is the last step
of `make jacobi-forcing-cpu`, so it takes `--replace-shipped`: a user exporting their own adapter who forgot
`--output-dir` would otherwise overwrite what the installed package ships, with nothing to get it back from. The size
limit keeps the package small; the Jacobi defaults travel in the adapter's generation_config.json: those the adapter
folder already carries (e.g. from `hf-jacobi tune`), with the flags given on top.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..decoding.config import CACHE_CHOICES
from .arg_types import positive_int
from .common import CliError, add_jacobi_setting_flags, jacobi_config, writable_output


def run_export_command(args: argparse.Namespace) -> int:
    from ..adapters import JACOBI_FORCING_WEIGHTS, export_adapter, export_target_problem
    from ..checkpoint import base_generation_config

    if (args.output_dir is None) == (not args.replace_shipped):
        raise CliError(
            "export-weights writes to --output-dir DIR, or with --replace-shipped over the adapter the installed "
            f"package ships ({JACOBI_FORCING_WEIGHTS}, what load_default_model(jacobi_forcing=True) loads); "
            + ("give one of the two" if args.output_dir is None else "not both")
        )
    target = args.output_dir or JACOBI_FORCING_WEIGHTS
    writable_output(target, "--output-dir" if args.output_dir else "--replace-shipped", folder=True)
    if problem := export_target_problem(args.adapter, target):
        what = "--output-dir" if args.output_dir else "--replace-shipped: the package's weights folder"
        raise CliError(f"{what} {str(target)!r} {problem}")
    try:
        jacobi = jacobi_config(args, base_generation_config(args.adapter) if args.adapter.is_dir() else None)
        folder = export_adapter(args.adapter, target, jacobi)
    except ValueError as error:
        raise CliError(str(error)) from error
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    print(f"wrote {folder} ({size:.1f} MiB; Jacobi defaults: {jacobi.describe()})")
    return 0


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "export-weights", help="write a trained adapter with its Jacobi defaults (or ship it in the package)"
    )
    parser.add_argument("adapter", type=Path, help="a PEFT adapter folder written by hf-jacobi train (use_peft)")
    parser.add_argument(
        "--output-dir", type=Path, default=None, help="the folder to write (new, or an earlier export)"
    )
    parser.add_argument(
        "--replace-shipped",
        action="store_true",
        help="write over the adapter shipped in the installed package (load_default_model(jacobi_forcing=True)) "
        "instead of --output-dir",
    )
    # Unset flags keep the adapter's own settings (its generation_config.json), else the library's defaults.
    own = "default: the adapter's, else"
    add_jacobi_setting_flags(parser, "the adapter's")
    parser.add_argument(
        "--verify-size", type=positive_int, default=None, help=f"recycled candidates verified per step ({own} pool)"
    )
    parser.add_argument(
        "--ngram-size", type=positive_int, default=None, help=f"tokens per recycled candidate ({own} block - 1)"
    )
    parser.add_argument(
        "--cache-implementation",
        choices=list(CACHE_CHOICES),
        default=None,
        help=f"the cache generate(decoding='jacobi') uses ({own} 'dynamic'); 'auto': the compiled static cache where "
        "generate compiles (an accelerator), the dynamic one elsewhere",
    )
    parser.add_argument(
        "--greedy-devices",
        nargs="*",
        default=None,
        metavar="ENTRY",
        help=f"where decoding='jacobi' decodes greedily instead, entries 'device', 'device:dtype' or "
        f"'cpu:dtype:units' (units: amx, avx512_bf16, none), e.g. cpu:float32 cpu:bfloat16:none; the flag alone: "
        f"nowhere ({own} nowhere)",
    )
    parser.set_defaults(handler=run_export_command)
