"""`hf-jacobi magpie`: plain-language instructions sampled from the instruct model itself, written as a prompt file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..atomic import write_text
from ..loading import DTYPES
from .arg_types import model_name, positive_float, positive_int, probability
from .common import MODEL_HELP, CliError, load_model, writable_output


def run_magpie_command(args: argparse.Namespace) -> int:
    """Samples --num-prompts instructions and writes them as JSON lines (`prompt_id`, `messages`)."""
    from ..data.magpie import magpie_prompts

    if args.output.suffix != ".jsonl":
        raise CliError(f"--output {str(args.output)!r} must end in .jsonl (what --prompts FILE reads back)")
    writable_output(args.output, "--output", folder=False)
    loaded = load_model(args.model, args.dtype)
    try:
        rows = magpie_prompts(
            loaded.model,
            loaded.tokenizer,
            args.num_prompts,
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
        )
    except (ValueError, RuntimeError) as error:
        raise CliError(str(error)) from error
    lines = [json.dumps({"prompt_id": r["prompt_id"], "messages": r["messages"]}, ensure_ascii=False) for r in rows]
    write_text(args.output, "\n".join(lines) + "\n")
    print(f"wrote {len(rows)} instructions to {args.output} (use it as `hf-jacobi collect --prompts {args.output}`)")
    return 0


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "magpie", help="sample plain-language instructions from the instruct model itself (Magpie), as a prompt file"
    )
    parser.add_argument("--num-prompts", type=positive_int, required=True, help="instructions to keep")
    parser.add_argument("--output", type=Path, required=True, help="the .jsonl prompt file to write")
    parser.add_argument(
        "--model", type=model_name, default=None, help=f"{MODEL_HELP} (default: embedded SmolLM2-135M)"
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="samples drawn together (default 8)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=96, help="longest instruction (default 96)")
    parser.add_argument("--temperature", type=positive_float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--top-p", type=probability, default=0.99, help="nucleus sampling (default 0.99)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the sampling (default 0)")
    parser.set_defaults(handler=run_magpie_command)
