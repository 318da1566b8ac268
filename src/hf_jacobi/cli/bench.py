"""`hf-jacobi bench`: AR baselines and Jacobi settings on one task, with tables, JSON and a plot."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from ..atomic import staged_files
from ..data.humaneval import MissingDataError
from ..loading import DTYPES
from .arg_types import model_name, non_negative_int, positive_float, positive_int
from .common import MODEL_HELP, CliError, add_jacobi_forcing_argument, load_model, source_error, writable_output
from .exactness import greedy_verdict

PARTIAL = "bench.partial.json"
"""What a running bench has measured so far, in --output-dir beside the finished files (see
`hf_jacobi.bench.report.write_partial`); removed once they are written."""


def run_bench_command(args: argparse.Namespace) -> int:
    """Greedy AR baselines and Jacobi configurations on one task: table and notes printed, JSON/Markdown/PNG written.

    Everything the writing needs (a writable --output-dir, matplotlib for the plot) is checked before the task and
    the model are loaded, and the three files replace their older versions together once all are rendered. Until
    then `bench.partial.json` holds the batches done, so a run cut short by a time limit leaves its measurements.
    """
    from hf_jacobi.bench import report
    from hf_jacobi.bench.runner import run_bench
    from hf_jacobi.bench.settings import Setting, bench_settings, path_variants

    writable_output(args.output_dir, "--output-dir")
    if importlib.util.find_spec("matplotlib") is None:
        raise CliError("bench writes a plot and needs matplotlib: pip install 'hf-jacobi[bench]'")
    task = _load_task(args)  # the task first: a bad --data is reported before a model is loaded
    loaded = load_model(args.model, args.dtype, args.jacobi_forcing, args.adapter)
    widths = args.static_widths or [None]
    settings = bench_settings(
        args.block_sizes, args.variants, not args.no_compile, paths=args.jacobi_paths, static_widths=widths
    )
    if args.model_defaults:
        generation_config = loaded.model.generation_config
        settings += [
            Setting.model_defaults(generation_config, *way) for way in path_variants(args.jacobi_paths, widths)
        ]
    meta = _run_meta(args, loaded.name, task, settings) | {"adapter_sha256": loaded.adapter_sha256}
    partial = args.output_dir / PARTIAL
    run = run_bench(
        loaded.model,
        loaded.tokenizer,
        task,
        settings,
        args.max_new_tokens,
        args.batch_size,
        rounds=args.rounds,
        on_batch=lambda so_far: report.write_partial(partial, so_far, meta),
    )
    rows = report.summarize(run)
    table = report.markdown_table(rows, task.metric)
    notes = report.notes(run, rows, args.batch_size, args.max_new_tokens)
    print(f"# hf-jacobi bench: {task.name}\n\n{loaded.describe(args.dtype)}\n\n{table}\n\n{notes}")
    with staged_files(args.output_dir) as staging:
        report.write_json(staging / "bench.json", run, rows, meta)
        (staging / "bench.md").write_text(f"{table}\n\n{notes}\n", encoding="utf-8")
        report.plot(staging / "bench.png", rows, f"{task.name}, {loaded.name}, batch {args.batch_size}")
    partial.unlink(missing_ok=True)
    print(f"\nwrote {args.output_dir}/bench.json, bench.md, bench.png")
    jacobi_rows = [row for row in rows if row["kind"] != "ar"]
    verdict, code = greedy_verdict(
        args.dtype, sum(row["identical"] for row in jacobi_rows), sum(row["samples"] for row in jacobi_rows)
    )
    print(verdict, file=sys.stderr if code else sys.stdout)
    return code


def _load_task(args: argparse.Namespace):
    """The task `--task` names, on `--data`'s problems; what it refuses ends the command in one line."""
    from hf_jacobi.bench.tasks import load_task

    try:
        return load_task(
            args.task,
            data=args.data,
            split=args.split,
            limit=args.limit,
            skip=args.skip,
            chat=args.chat,
            timeout_s=args.timeout,
            workers=args.workers,
        )
    except (MissingDataError, FileNotFoundError, ValueError) as error:
        raise source_error(error) from error


def _run_meta(args: argparse.Namespace, model_name: str, task, settings) -> dict:
    """What bench.json records about the run besides its measurements: the command, model, task and budget."""
    from hf_jacobi.bench.settings import AR_COMPILE_MODE, AR_COMPILED

    return {
        "command": "hf-jacobi " + " ".join(args.argv),
        "model": model_name,
        "dtype": args.dtype,
        "task": task.name,
        "metric": task.metric,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "rounds": args.rounds,
        "ar_compile_mode": AR_COMPILE_MODE if any(s.kind == AR_COMPILED for s in settings) else None,
        "jacobi_paths": list(args.jacobi_paths),
        "static_widths": args.static_widths,
    }


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="pass@1/accuracy, tokens per forward and tokens/s: AR vs Jacobi")
    _add_problem_arguments(bench)
    _add_model_and_setting_arguments(bench)
    _add_run_arguments(bench)
    bench.set_defaults(handler=run_bench_command)


def _add_problem_arguments(bench: argparse.ArgumentParser) -> None:
    """Which task and which of its problems."""
    from hf_jacobi.bench.tasks import TASKS

    bench.add_argument("--task", choices=list(TASKS), default="humaneval", help="benchmark (default humaneval)")
    bench.add_argument(
        "--data",
        default=None,
        help="gsm8k/math: a local .json/.jsonl/.parquet file or a Hub dataset; prompts: a prompt source (default packages)",
    )
    bench.add_argument(
        "--split",
        default=None,
        help="split of --data: a Hub dataset's (default test); for prompts, the prompt source's (default test where it "
        "has one, else its own: train for stdlib and a local file)",
    )
    bench.add_argument("--limit", type=positive_int, default=None, help="first N problems only (default all)")
    bench.add_argument(
        "--skip",
        type=non_negative_int,
        default=0,
        help="skip the first N problems, then --limit counts from there (e.g. choose a setting on one slice of a "
        "prompt set and report it on another; default 0)",
    )


def _add_model_and_setting_arguments(bench: argparse.ArgumentParser) -> None:
    """The model, and the Jacobi settings measured against its greedy baselines."""
    from hf_jacobi.bench.common import VARIANTS
    from hf_jacobi.bench.settings import EAGER, JACOBI_PATHS

    bench.add_argument("--model", type=model_name, default=None, help=f"{MODEL_HELP} (default: embedded SmolLM2-135M)")
    add_jacobi_forcing_argument(bench)
    bench.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    bench.add_argument(
        "--block-sizes", type=positive_int, nargs="+", default=[8, 16, 32], help="Jacobi block sizes (default 8 16 32)"
    )
    bench.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["plain", "both"],
        help="Jacobi variants per block size: " + "; ".join(f"{k} = {v or 'block only'}" for k, v in VARIANTS.items()),
    )
    bench.add_argument(
        "--jacobi-paths",
        nargs="+",
        choices=list(JACOBI_PATHS),
        default=[EAGER],
        help="how each Jacobi setting runs: eager (dynamic cache, the default path), static (static cache, forward not "
        "compiled) and/or compiled (static cache, verify forward compiled with transformers' default CompileConfig: "
        "CUDA graphs on a GPU); default eager",
    )
    bench.add_argument(
        "--static-widths",
        nargs="+",
        type=positive_int,
        default=None,
        help="the static and compiled paths' forward widths (jacobi_static_widths), one timed setting per count, e.g. "
        "1 5 to time one width against five; default: the device's choice (5 on a CPU, 1 on an accelerator)",
    )
    bench.add_argument(
        "--model-defaults",
        action="store_true",
        help="also time the Jacobi settings in the model's generation config (what decoding='jacobi' uses with no "
        "other argument, e.g. the tuned defaults of --jacobi-forcing)",
    )


def _add_run_arguments(bench: argparse.ArgumentParser) -> None:
    """How the samples are batched, timed and scored, and where the results go."""
    bench.add_argument("--batch-size", type=positive_int, default=1, help="prompts per left-padded batch (default 1)")
    bench.add_argument("--max-new-tokens", type=positive_int, default=256, help="token budget (default 256)")
    bench.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="time the whole set this many times (settings alternating within each batch) and report medians with "
        "their range (default 1)",
    )
    bench.add_argument(
        "--no-compile", action="store_true", help="skip the static-cache + torch.compile AR baseline (slow to build)"
    )
    bench.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="feed prompts through the chat template (default: no for humaneval, yes for gsm8k/math)",
    )
    bench.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds a HumanEval sample may run (default 10)"
    )
    bench.add_argument("--workers", type=positive_int, default=None, help="parallel HumanEval test processes")
    bench.add_argument(
        "--output-dir",
        type=Path,
        default=Path("bench_results"),
        help="where bench.json/.md/.png go (default bench_results)",
    )
