"""`hf-jacobi tune`: measure this hardware and write the fastest Jacobi settings (or greedy) into a generation config."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..atomic import staged_files
from ..loading import DTYPES
from .arg_types import model_name, non_negative_int, optional_positive_int, positive_int
from .common import (
    CliError,
    add_jacobi_forcing_argument,
    add_prompt_source_arguments,
    encode_prompt,
    load_model,
    load_source_prompts,
    writable_output,
)
from .exactness import EXACT_DTYPES, ROUNDING_NOTE

if TYPE_CHECKING:
    from ..bench.tune import DtypeSearch, TuneResult


def summary(result: TuneResult, top: int = 5) -> str:
    """What was measured and why the choice was made, for the terminal."""
    from hf_jacobi.bench.report import markdown

    one = result.curve[min(result.curve)]
    roofline = [[w, f"{1000 * c:.2f}", f"{c / one:.2f}"] for w, c in sorted(result.curve.items())]
    greedy_rate = result.predictions_greedy.tokens_per_s
    predictions = [
        [
            "greedy" if p.candidate is None else str(p.candidate),
            f"{p.tokens_per_forward:.2f}",
            f"{p.mean_width:.1f}",
            f"{p.tokens_per_s:.1f}",
            f"{p.tokens_per_s / greedy_rate:.2f}x",
        ]
        for p in result.predictions[:top]
    ]
    lines = [
        f"roofline on {result.hardware} (forward seconds against tokens in it, batch 1):",
        "",
        markdown(["tokens", "ms", "x one token"], roofline, ["---:"] * 3),
        "",
        f"knee (<= 1.5x a one-token forward): {result.knee} tokens; loop overhead "
        f"{1000 * result.loop_overhead_s:.2f} ms per iteration",
        "",
        markdown(
            ["setting", "tokens/forward", "mean width", "predicted tok/s", "vs greedy"],
            predictions,
            ["---", *["---:"] * 4],
        ),
        "",
    ]
    lines += [
        f"timed {v['candidate']}: {v['speedup']:.2f}x greedy (medians of {v['rounds']} alternating rounds: "
        f"{v['seconds']:.2f} s [{v['seconds_range'][0]:.2f}-{v['seconds_range'][1]:.2f}] vs greedy "
        f"{v['greedy_seconds']:.2f} s [{v['greedy_seconds_range'][0]:.2f}-{v['greedy_seconds_range'][1]:.2f}])"
        for v in result.verified
    ]
    if result.choice is None:
        lines.append("choice: greedy (no Jacobi setting was measurably faster than greedy on this hardware)")
    else:
        lines.append(f"choice: Jacobi {result.choice}, measured {result.measured_speedup:.2f}x greedy")
    return "\n".join(lines)


def run_tune_command(args: argparse.Namespace) -> int:
    """Measures, chooses and writes the Jacobi defaults (or greedy) into a generation config."""
    from hf_jacobi.bench import tune

    if args.model is None and args.output_dir is None:
        raise CliError(
            "the embedded model's cache is checksummed and must not be edited: give --output-dir for its tuned "
            "generation_config.json, or tune a local --model folder"
        )
    if isinstance(args.model, str) and args.output_dir is None:  # a Hub id (see arg_types.model_name)
        raise CliError(
            f"--model {args.model!r} is a Hub id, not a folder to write the tuned settings into: give --output-dir "
            "for its tuned generation_config.json, or tune a local --model folder"
        )
    target = writable_output(*((args.output_dir, "--output-dir") if args.output_dir else (args.model, "--model")))
    try:
        candidates = tune.candidate_grid(
            args.block_sizes, args.num_blocks, args.pool_sizes, args.verify_sizes, args.ngram_sizes
        )
    except ValueError as error:
        raise CliError(str(error)) from error
    prompt_rows = load_source_prompts(args, skip=args.skip_prompts)  # before a model is loaded
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = [args.dtype] if args.dtype is not None else tune.searched_dtypes(device)
    first = load_model(args.model, dtypes[0], args.jacobi_forcing, args.adapter)
    prompts = [
        {k: v.to(first.model.device) for k, v in encode_prompt(first.tokenizer, messages, chat=True).items()}
        for _, messages in prompt_rows
    ]
    generation_config = copy.deepcopy(first.model.generation_config)
    waiting = {dtypes[0]: first}

    def load(dtype: str):
        loaded = waiting.pop(dtype, None) or load_model(args.model, dtype, args.jacobi_forcing, args.adapter)
        return loaded.model

    del first
    compiled = args.compiled if args.compiled is not None else device == "cuda"
    options = {"repeats": args.repeats, "rounds": args.rounds, "compiled": compiled}
    search = tune.search_dtypes(load, dtypes, prompts, candidates, max_new_tokens=args.max_new_tokens, **options)
    config = tune.write_generation_config(generation_config, search.chosen.choice, device != "cpu")
    with staged_files(target) as staging:  # both files replace their older versions together
        config.save_pretrained(staging)
        report_name = tune.save_report(staging, search if len(dtypes) > 1 else search.chosen).name
    for dtype, result in search.results.items():
        print(f"## {dtype}\n\n{summary(result)}\n")
    print(dtype_summary(search))
    print(f"wrote {target / 'generation_config.json'} and {target / report_name}")
    return 0


def dtype_summary(search: DtypeSearch) -> str:
    """Each dtype's choice and measured rate, the dtype chosen, and what a user does to load the model in it: the
    settings written apply to whatever dtype the model is loaded in, and are only the fastest in the one chosen."""
    rows = [
        [dtype, "greedy" if r.choice is None else str(r.choice), f"{r.chosen_tokens_per_s:.1f}",
         f"{r.greedy_tokens_per_s:.1f}"]
        for dtype, r in search.results.items()
    ]  # fmt: skip
    from hf_jacobi.bench.report import markdown

    table = markdown(["dtype", "choice", "measured tok/s", "greedy tok/s"], rows, ["---", "---", "---:", "---:"])
    dtype = search.dtype
    lines = [table, "", f"chosen dtype: {dtype}"]
    if dtype not in EXACT_DTYPES:
        lines.append(
            f"load the model in it for these settings to pay: from_pretrained(..., dtype=torch.{dtype}), or --dtype "
            f"{dtype} on hf-jacobi commands ({ROUNDING_NOTE})"
        )
    return "\n".join(lines)


def add_parser(commands) -> None:
    from hf_jacobi.bench.tune import DEFAULT_BLOCK_SIZES, DEFAULT_NUM_BLOCKS, DEFAULT_POOL_SIZES

    tune = commands.add_parser("tune", help="measure this hardware and write the fastest Jacobi settings (or greedy)")
    tune.add_argument(
        "--model",
        type=model_name,
        default=None,
        help="a local checkpoint folder (written in place) or a Hub model id (with --output-dir)",
    )
    tune.add_argument(
        "--output-dir", type=Path, default=None, help="write generation_config.json here instead of into --model"
    )
    add_jacobi_forcing_argument(tune)
    tune.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default=None,
        help="tune in this dtype only (default: search float32 and, where it runs natively, bfloat16: a GPU that "
        "supports it or a CPU with bfloat16 units)",
    )
    add_prompt_source_arguments(tune, "stdlib", "train", "keep the prompts you evaluate on out of the sample")
    tune.add_argument(
        "--skip-prompts", type=non_negative_int, default=0, help="prompts of the source to skip first (default 0)"
    )
    tune.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per sample (default 64)")
    tune.add_argument(
        "--compiled",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time each finalist on the compiled static path (static cache, verify forward compiled; CUDA "
        "graphs on a GPU) and write it when it is the fastest; default: on a GPU only (compiling on a CPU is slow)",
    )
    tune.add_argument("--block-sizes", type=positive_int, nargs="+", default=list(DEFAULT_BLOCK_SIZES))
    tune.add_argument("--num-blocks", type=positive_int, nargs="+", default=list(DEFAULT_NUM_BLOCKS))
    tune.add_argument("--pool-sizes", type=non_negative_int, nargs="+", default=list(DEFAULT_POOL_SIZES))
    tune.add_argument(
        "--verify-sizes",
        type=optional_positive_int,
        nargs="+",
        default=[None],
        help="candidate n-grams verified per step, for settings with a pool ('default': the pool size)",
    )
    tune.add_argument(
        "--ngram-sizes",
        type=optional_positive_int,
        nargs="+",
        default=[None],
        help="tokens per candidate n-gram, for settings with a pool ('default': block size - 1)",
    )
    tune.add_argument("--repeats", type=positive_int, default=5, help="timed repeats per roofline point (default 5)")
    tune.add_argument(
        "--rounds",
        type=positive_int,
        default=5,
        help="alternating timed rounds of greedy and each finalist, compared on medians (default 5)",
    )
    tune.set_defaults(handler=run_tune_command)
