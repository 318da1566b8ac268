"""`python -m lab overhead`: tokens per forward per Jacobi variant, and what the loop costs beyond the model, on the
embedded model and HumanEval prompts (see `lab.overhead` for what is measured)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hf_jacobi.atomic import write_text
from hf_jacobi.bench.common import VARIANTS
from hf_jacobi.cli.arg_types import positive_int
from hf_jacobi.cli.common import CliError, writable_output
from hf_jacobi.data.humaneval import MissingDataError, load_humaneval


def run_overhead_command(args: argparse.Namespace) -> int:
    """Measures, prints the tables, and exits with 1 when any output differed from greedy."""
    from hf_jacobi.bench.report import machine_description
    from hf_jacobi.loading import EMBEDDED, load_model
    from lab import overhead

    if args.json:
        writable_output(args.json, "--json", folder=False)
    try:
        prompts = [(problem.task_id, problem.prompt) for problem in load_humaneval(args.prompts)]
    except MissingDataError as error:
        raise CliError(str(error)) from error
    model, tokenizer = load_model(EMBEDDED, dtype="float32")  # Jacobi-enabled
    run = overhead.run_overhead(
        model,
        tokenizer,
        prompts,
        args.variants,
        args.block_sizes,
        args.max_new_tokens,
        args.repeats,
        args.forward_costs,
    )
    print(
        f"SmolLM2-135M-Instruct (embedded, float32, sdpa), {machine_description(model.device)}; HumanEval prompts "
        f"0-{args.prompts - 1}, max_new_tokens={args.max_new_tokens}, batch 1, prefill included in tok/s; variants: "
        + "; ".join(f"{v} = {VARIANTS[v] or 'block only'}" for v in args.variants)
    )
    print(overhead.markdown_table(run.rows))
    if run.curve:
        print(f"\nForward cost against tokens in the forward (cache of {run.context_tokens} tokens):\n")
        print(overhead.cost_curve_table(run.curve))
    if args.json:
        write_text(args.json, json.dumps(run.to_json(), indent=2))
    return 0 if all(row["all_identical"] for row in run.rows) else 1


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "overhead", help="tokens per forward and the loop's overhead per Jacobi variant (embedded model, HumanEval)"
    )
    parser.add_argument("--prompts", type=positive_int, default=8, help="HumanEval problems to run (the first N)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--block-sizes", type=positive_int, nargs="+", default=[16])
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=["plain"], help="Jacobi variants to measure"
    )
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed repeats of the bare forward")
    parser.add_argument(
        "--forward-costs",
        type=positive_int,
        nargs="*",
        default=[],
        metavar="TOKENS",
        help="also time bare forwards of these widths against a one-token forward (the cost curve)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write per-prompt results and the summary here")
    parser.set_defaults(handler=run_overhead_command)
