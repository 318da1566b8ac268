"""`hf-jacobi export-weights`: a trained Jacobi Forcing adapter for the embedded model, copied into the package.

`load_default_model(jacobi_forcing=True)` and `--jacobi-forcing` load what this writes; the last step of
`make jacobi-forcing-cpu`. The size limit keeps the package small; the Jacobi defaults travel in the adapter's
generation_config.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..decoding.config import JacobiConfig
from .common import CliError, non_negative_int, positive_int, writable_output


def run_export_command(args: argparse.Namespace) -> int:
    from ..loading import JACOBI_FORCING_WEIGHTS, export_adapter

    target = args.output_dir or JACOBI_FORCING_WEIGHTS
    writable_output(target, "--output-dir", folder=True)
    try:
        jacobi = JacobiConfig(
            block_size=args.block_size,
            num_blocks=args.num_blocks,
            ngram_pool_size=args.ngram_pool_size,
            verify_size=args.verify_size,
            ngram_size=args.ngram_size,
        )
        folder = export_adapter(args.adapter, target, jacobi)
    except ValueError as error:
        raise CliError(str(error)) from error
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    print(f"wrote {folder} ({size:.1f} MiB; Jacobi defaults: {jacobi.describe()})")
    return 0


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "export-weights", help="copy a trained adapter into the package as the shipped weights"
    )
    parser.add_argument("adapter", type=Path, help="a PEFT adapter folder written by hf-jacobi train (use_peft)")
    parser.add_argument("--output-dir", type=Path, default=None, help="default: the package's weights folder")
    parser.add_argument("--block-size", type=positive_int, default=16, help="Jacobi default block size (default 16)")
    parser.add_argument("--num-blocks", type=positive_int, default=1, help="Jacobi default blocks in flight")
    parser.add_argument("--ngram-pool-size", type=non_negative_int, default=0, help="Jacobi default n-gram pool")
    parser.add_argument(
        "--verify-size", type=positive_int, default=None, help="recycled candidates verified per step (default: pool)"
    )
    parser.add_argument(
        "--ngram-size", type=positive_int, default=None, help="tokens per recycled candidate (default: block - 1)"
    )
    parser.set_defaults(handler=run_export_command)
