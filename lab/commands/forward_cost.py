"""`python -m lab forward-cost`: what one forward costs against the tokens in it, at several batch sizes, on this machine.

Whether Jacobi decoding saves wall time is decided by this curve, not by tokens per forward alone: a forward of w tokens
costing c(w) one-token forwards pays only if the setting accepts more than c(w) tokens per forward (before the loop's
own overhead). On a small CPU the curve climbs almost from the start; on a GPU it stays flat far out, more so for a
small model, whose forwards are bound by kernel launches. The figures come from the same bare-forward timer that
`hf-jacobi tune` and `python -m lab overhead` use (`hf_jacobi.bench.roofline.block_forward_seconds`), so the three
compare.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hf_jacobi.atomic import write_text
from hf_jacobi.cli.arg_types import model_name, positive_int
from hf_jacobi.cli.common import DTYPES, MODEL_HELP, CliError, add_jacobi_forcing_argument, load_model, writable_output

DEFAULT_WIDTHS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def run_forward_cost_command(args: argparse.Namespace) -> int:
    """Times the curve at each batch size, prints one table per batch size and writes the JSON when asked."""
    from hf_jacobi.bench.report import machine_description
    from lab.forward_cost import forward_cost_curve
    from lab.overhead import cost_curve_table

    if args.json:
        writable_output(args.json, "--json", folder=False)
    if args.cuda_graphs and not torch.cuda.is_available():
        raise CliError("--cuda-graphs replays each forward as a CUDA graph and needs a CUDA device; none is visible")
    model, name, describe = _model(args)
    widths = sorted({1, *args.widths})
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and args.context + widths[-1] > limit:
        raise CliError(
            f"--context {args.context} + the widest forward ({widths[-1]} tokens) exceeds the model's "
            f"max_position_embeddings ({limit}): lower --context or --widths"
        )
    # the token ids do not change a forward's cost; a fixed generator keeps runs comparable
    generator = torch.Generator().manual_seed(0)
    curves = []
    for batch_size in args.batch_sizes:
        context = torch.randint(0, model.config.vocab_size, (batch_size, args.context), generator=generator)
        context = context.to(model.device)
        forward_cost_curve(model, context, [1, widths[-1]], repeats=2)  # warm-up: kernels, allocator, clocks
        curve = forward_cost_curve(model, context, widths, args.repeats, cuda_graphs=args.cuda_graphs)
        curves.append({"batch_size": batch_size, "curve": curve})

    machine = machine_description(model.device)
    how = "replayed as CUDA graphs on a static cache" if args.cuda_graphs else "eager"
    print(describe)
    print(
        f"{machine}; bare forwards ({how}) on a KV cache of {args.context} tokens, median of {args.repeats} per "
        "width; a setting whose forwards hold w tokens beats greedy only above the break-even tokens per forward at w"
    )
    for entry in curves:
        print(f"\n## batch {entry['batch_size']}\n")
        print(cost_curve_table(entry["curve"]))
    if args.json:
        report = {
            "model": name,
            "architecture": args.architecture,
            "random_weights": args.architecture is not None,
            "cuda_graphs": args.cuda_graphs,
            "dtype": args.dtype,
            "machine": machine,
            "context_tokens": args.context,
            "repeats": args.repeats,
            "curves": curves,
        }
        write_text(args.json, json.dumps(report, indent=2))
    return 0


def _model(args: argparse.Namespace):
    """The model to time (a random-weight architecture, or a loaded checkpoint), its name and its one-line description."""
    if args.architecture is None:
        loaded = load_model(args.model, args.dtype, args.jacobi_forcing, args.adapter)
        return loaded.model, loaded.name, loaded.describe(args.dtype)
    if args.model is not None or args.jacobi_forcing or args.adapter is not None:
        raise CliError(
            f"--architecture {args.architecture} builds a random model: drop --model/--jacobi-forcing/--adapter"
        )
    model, name = _random_model(args.architecture, args.dtype)
    return model, name, f"model: {name} | device: {model.device} | dtype: {args.dtype}"


def _random_model(architecture: str, dtype: str):
    """The named architecture with random weights on the GPU (else the CPU), and how the output names it."""
    from lab.architectures import parameter_count, random_model

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = random_model(architecture, DTYPES[dtype], device)
    return model, f"{architecture} (random weights, {parameter_count(model):,} parameters)"


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "forward-cost",
        help="the forward cost curve of this machine: a forward of w tokens against a one-token forward, per batch "
        "size (the break-even tokens per forward of each width)",
    )
    parser.add_argument(
        "--model", type=model_name, default=None, help=f"{MODEL_HELP} (default: the embedded SmolLM2-135M)"
    )
    add_jacobi_forcing_argument(parser)
    from lab.architectures import ARCHITECTURES

    parser.add_argument(
        "--architecture",
        choices=list(ARCHITECTURES),
        default=None,
        help="time a real architecture with random weights instead (a forward costs the same whatever its weights): "
        "for models this machine cannot download",
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="replay each forward as a CUDA graph on a static cache, as compiled decoding does on a GPU (CUDA only)",
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    parser.add_argument(
        "--batch-sizes", type=positive_int, nargs="+", default=[1], help="rows per forward, one curve each (default 1)"
    )
    parser.add_argument(
        "--widths",
        type=positive_int,
        nargs="+",
        default=DEFAULT_WIDTHS,
        metavar="TOKENS",
        help="tokens per row in one forward (1 is always timed: the reference); default "
        + " ".join(map(str, DEFAULT_WIDTHS)),
    )
    parser.add_argument(
        "--context", type=positive_int, default=140, help="tokens already in the KV cache (default 140, a chat prompt)"
    )
    parser.add_argument("--repeats", type=positive_int, default=12, help="timed forwards per width (default 12)")
    parser.add_argument("--json", type=Path, default=None, help="also write the curves here")
    parser.set_defaults(handler=run_forward_cost_command)
