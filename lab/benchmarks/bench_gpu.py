"""The GPU figures in one command (`make bench-gpu`): decoding speed against the strongest greedy, forward costs of
real-size architectures, and the speedups they project.

Three phases, each writing into --output-dir (a phase can run on its own, e.g. across two device calls):

- curves: `python -m lab forward-cost` on random-weight builds of the embedded model's architecture (float32 and
  bfloat16) and of Qwen2.5-Coder-1.5B and 7B (bfloat16), at batch 1 and 8, each forward replayed as a CUDA graph
  (as compiled decoding runs it), widths 1..256: `curve-<architecture>-<dtype>.json`.
- decode: `hf-jacobi bench` on the first 8 held-out `packages` test prompts with the shipped Jacobi Forcing adapter:
  plain generate, greedy on a static cache compiled in mode "reduce-overhead" (CUDA graphs), and Jacobi (2 blocks of
  16 + recycling, and the shipped default) eager and on the compiled static cache; batch 1 and 8, float32 and
  bfloat16: `decode-<dtype>-b<batch>/bench.json`. In float32 every output must equal greedy's; in bfloat16 the
  share of identical answers and where the others depart are recorded.
- host: `lab/benchmarks/profile_step.py --split` for each decode entry (2 blocks of 16 + recycling on the compiled static
  cache, the shipped adapter): a step's host work between two forwards beside its device part, the time the GPU
  idles per step: `host-<dtype>-b<batch>.json`.
- summary: `gpu-grade.json` and `gpu-grade.md`: the decoding table, speedup per token-per-forward, the curves, and
  the speedup each curve projects at the measured tokens per forward and at the paper's 4.1 (a projection: it
  assumes the loop's own overhead away).

`--decode float32:1 bfloat16:8` keeps only those entries of the plan (decode and host phases), so that the plan can be
split across device calls of a few minutes each. `--tiny` runs the same phases with a tiny random model on any machine
in seconds (the test suite does).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers

# run as a script, from any folder: the repository's root makes `lab` importable
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hf_jacobi.bench.common import variant_config
from hf_jacobi.bench.roofline import interpolate_cost
from hf_jacobi.cli import main as hf_jacobi
from hf_jacobi.decoding.checks import widest_forward
from hf_jacobi.decoding.config import JacobiConfig
from lab.__main__ import lab_main

PAPER_TOKENS_PER_FORWARD = 4.1
"""Jacobi Forcing's tokens per forward on HumanEval with Qwen2.5-Coder-7B (arXiv 2512.14681), for the projection."""

FULL = {
    "curves": [
        ("smollm2-135m", "float32"),
        ("smollm2-135m", "bfloat16"),
        ("qwen2.5-coder-1.5b", "bfloat16"),
        ("qwen2.5-coder-7b", "bfloat16"),
    ],
    "widths": ["1", "2", "4", "8", "16", "32", "64", "128", "256"],
    "curve_batches": ["1", "8"],
    "context": "256",
    "repeats": "10",
    # (dtype, batch size, prompts, timed rounds), in the order they matter: batch 1 first. Compiling dominates the
    # time (greedy at two prompt shapes, each Jacobi setting once, per dtype and batch size), so one round each.
    "decode": [("float32", 1, 8, 1), ("bfloat16", 1, 8, 1), ("bfloat16", 8, 8, 1), ("float32", 8, 8, 1)],
    "max_new_tokens": "128",
}
TINY = {
    "curves": [("tiny-llama", "float32")],
    "widths": ["1", "2", "4"],
    "curve_batches": ["1", "2"],
    "context": "16",
    "repeats": "2",
    "decode": [("float32", 1, 2, 1), ("float32", 2, 2, 1)],
    "max_new_tokens": "8",
}


def run_curves(plan: dict, out: Path) -> None:
    graphs = ["--cuda-graphs"] if torch.cuda.is_available() else []
    for architecture, dtype in plan["curves"]:
        argv = [
            "forward-cost",
            "--architecture",
            architecture,
            "--dtype",
            dtype,
            "--batch-sizes",
            *plan["curve_batches"],
        ]
        argv += ["--widths", *plan["widths"], "--context", plan["context"], "--repeats", plan["repeats"]]
        argv += ["--json", str(out / f"curve-{architecture}-{dtype}.json")]
        if lab_main(argv + graphs) != 0 and graphs:
            print(f"CUDA graph capture failed for {architecture} {dtype}: timing eager forwards instead", flush=True)
            lab_main(argv)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_decode(
    plan: dict,
    out: Path,
    model: Path | None,
    compile_paths: bool,
    widths: list[str] | None = None,
    eager_jacobi: bool = True,
) -> bool:
    """Every decode run of the plan; False when a float32 run failed (in float32 every output must equal greedy's).

    Each entry also writes how many CUDA graphs torch recorded per setting, in its warm-up and in its timed calls
    (`recordings.json`): a graph recorded during timed calls is a capture their timing pays, which would make that
    setting (greedy's baseline included) look slower than it is.
    """
    ok = True
    for dtype, batch, prompts, rounds in plan["decode"]:
        argv = ["bench", "--task", "prompts", "--limit", str(prompts), "--batch-size", str(batch), "--dtype", dtype]
        argv += ["--max-new-tokens", plan["max_new_tokens"], "--rounds", str(rounds), "--model-defaults"]
        argv += ["--block-sizes", "16", "--variants", "both", "--output-dir", str(out / f"decode-{dtype}-b{batch}")]
        argv += ["--model", str(model)] if model is not None else ["--jacobi-forcing"]
        if not compile_paths:
            argv += ["--jacobi-paths", "eager", "--no-compile"]
        else:
            argv += ["--jacobi-paths", *(["eager"] if eager_jacobi else []), "compiled"]
        argv += ["--static-widths", *widths] if widths and compile_paths else []
        print(f"\n== decode {dtype} batch {batch}: hf-jacobi {' '.join(argv)}", flush=True)
        start, recordings = time.perf_counter(), {}
        with recordings_per_setting(recordings):
            code = hf_jacobi(argv)
        seconds = time.perf_counter() - start
        folder = out / f"decode-{dtype}-b{batch}"
        if folder.is_dir():
            (folder / "recordings.json").write_text(json.dumps(recordings, indent=2))
        print(
            f"== decode {dtype} batch {batch}: {seconds:.0f} s in all; CUDA graphs recorded: {recordings}", flush=True
        )
        if code != 0 and dtype == "float32":
            print(f"error: the float32 run at batch {batch} failed (exit {code})", file=sys.stderr, flush=True)
            ok = False
    return ok


@contextmanager
def recordings_per_setting(counts: dict[str, dict[str, int]]):
    """While the block runs, counts the CUDA graphs recorded during each bench setting's calls, apart for its untimed
    warm-up and its timed calls: `counts[setting]["warm-up" | "timed"]`."""
    from hf_jacobi.bench import runner

    decode, warm_up, phase = runner._Decoder.decode, runner._warm_up, ["timed"]

    def counted_decode(self, setting, *args, **kwargs):
        recorded: dict[str, int] = {}
        with _profile_step().counting_graph_recordings(recorded):
            result = decode(self, setting, *args, **kwargs)
        per_setting = counts.setdefault(setting.name, {"warm-up": 0, "timed": 0})
        per_setting[phase[0]] += recorded["recorded"]
        return result

    def marked_warm_up(*args, **kwargs):
        phase[0] = "warm-up"
        try:
            return warm_up(*args, **kwargs)
        finally:
            phase[0] = "timed"

    runner._Decoder.decode, runner._warm_up = counted_decode, marked_warm_up
    try:
        yield
    finally:
        runner._Decoder.decode, runner._warm_up = decode, warm_up


@functools.cache
def _profile_step():
    """lab/benchmarks/profile_step.py as a module (it lies beside this script, not in the package)."""
    spec = importlib.util.spec_from_file_location("profile_step", Path(__file__).with_name("profile_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_host(plan: dict, out: Path, tiny: bool, trace: bool = False) -> None:
    """The host work per step of each decode entry's batch and dtype (profile_step --split, compiled static path);
    with `trace`, also each call's kernels and launches per forward beside greedy's (profile_step --trace)."""
    profile_step = _profile_step()
    for dtype, batch, _prompts, _rounds in plan["decode"]:
        argv = ["--batch-size", str(batch), "--dtype", dtype, "--max-new-tokens", plan["max_new_tokens"], "--split"]
        argv += ["--rounds", "3", "--top", "0", "--output", str(out / f"host-{dtype}-b{batch}.json")]
        argv += ["--tiny"] if tiny else []
        argv += ["--trace"] if trace else []
        print(f"\n== host work {dtype} batch {batch}: profile_step {' '.join(argv)}", flush=True)
        profile_step.main(argv)


def select_decode(plan: dict, chosen: list[str] | None) -> dict:
    """The plan with only the decode entries named DTYPE:BATCH (all of them when none is named)."""
    if not chosen:
        return plan
    entries = {f"{entry[0]}:{entry[1]}": entry for entry in plan["decode"]}
    unknown = [name for name in chosen if name not in entries]
    if unknown:
        raise SystemExit(f"--decode: unknown entries {unknown}; the plan has {sorted(entries)}")
    return {**plan, "decode": [entries[name] for name in chosen]}


def environment() -> dict:
    """What the figures belong to: the card, its driver and the software versions."""
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU {platform.machine()}",
    }
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        env["nvidia_smi"] = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        env["nvidia_smi"] = None
    return env


def setting_width(row: dict, default: JacobiConfig, max_new_tokens: int) -> int | None:
    """Columns per forward of a Jacobi setting on the compiled path (chain + candidates, at the run's budget)."""
    if row["kind"] != "jacobi":
        return None
    config = default if row["variant"] == "default" else variant_config(row["variant"], row["block_size"])
    return sum(widest_forward(config, 100, max_new_tokens))


def decode_rows(out: Path, default: JacobiConfig) -> list[dict]:
    rows = []
    for path in sorted(out.glob("decode-*/bench.json")):
        record = json.loads(path.read_text())
        meta = record["meta"]
        best = max((r["tokens_per_s"] or 0 for r in record["summary"] if r["kind"] != "jacobi"), default=0)
        # A batch decodes until its slowest row is done, so above batch 1 the forwards saved are greedy's batch
        # forwards over the setting's, not the mean tokens per forward of its rows (at batch 8 a row's mean is
        # well above the setting's saving in batch forwards); at batch 1 the two agree.
        greedy_forwards = next(r["batch_forwards"] for r in record["summary"] if r["kind"] != "jacobi")
        for row in record["summary"]:
            speedup = row["speedup_vs_best_ar"]
            saving = greedy_forwards / row["batch_forwards"] if row["batch_forwards"] else None
            rows.append(
                {
                    "dtype": meta["dtype"],
                    "batch_size": meta["batch_size"],
                    "setting": row["setting"],
                    "kind": row["kind"],
                    "path": row.get("path", "eager"),
                    "width": setting_width(row, default, meta["max_new_tokens"]),
                    "tokens_per_forward": row["tokens_per_forward"],
                    "tokens_per_s": row["tokens_per_s"],
                    "speedup_vs_generate": row["speedup_vs_ar"],
                    "speedup_vs_best_greedy": speedup,
                    "best_greedy_tokens_per_s": best,
                    "batch_forwards": row["batch_forwards"],
                    "forward_saving": saving,
                    "speedup_per_forward_saving": (
                        speedup / saving if speedup and row["kind"] == "jacobi" and saving else None
                    ),
                    "identical": row["identical"],
                    "samples": row["samples"],
                    "collapsed": row["collapsed"],
                    "differing_common_prefix": row.get("differing_common_prefix"),
                }
            )
    return rows


def projections(curves: Path, decode: list[dict]) -> list[dict]:
    """Speedup a curve projects for a setting: forward saving / (cost of its width / cost of one token); the curves
    are the `curve-*.json` files of the folder `curves` (a forward's cost does not depend on the weights, so a decode
    run may take the curves of an earlier run on the same card)."""
    # (dtype, batch, width) -> forward saving (greedy's batch forwards / the setting's), of the compiled path where it
    # ran (in float32 the same tokens as the eager path; in bfloat16 the compiled kernels round differently, so the
    # answers and their count can differ)
    measured = {}
    for row in sorted(decode, key=lambda r: r["path"] != "compiled"):
        if row["kind"] == "jacobi" and row["forward_saving"]:
            measured.setdefault((row["dtype"], row["batch_size"], row["width"]), row["forward_saving"])
    rows = []
    for path in sorted(curves.glob("curve-*.json")):
        record = json.loads(path.read_text())
        for entry in record["curves"]:
            costs = {point["tokens"]: point["vs_one_token"] for point in entry["curve"]}
            for (dtype, batch, width), saving in sorted(measured.items()):
                if (dtype, batch) != (record["dtype"], entry["batch_size"]):
                    continue
                cost = interpolate_cost(costs, width)
                rows.append(
                    {
                        "architecture": record.get("architecture") or record["model"],
                        "dtype": record["dtype"],
                        "batch_size": batch,
                        "cuda_graphs": record.get("cuda_graphs", False),
                        "width": width,
                        "cost_vs_one_token": cost,
                        "measured_forward_saving": saving,
                        "projected_speedup": saving / cost,
                        "projected_speedup_at_paper_tpf": PAPER_TOKENS_PER_FORWARD / cost if batch == 1 else None,
                    }
                )
    return rows


def host_rows(out: Path) -> list[dict]:
    """The host phase's figures, one row per file: the medians over its rounds that profile_step --split wrote (the
    step's own median taken the same way, as docs/results.md renders the CPU's)."""
    rows = []
    for path in sorted(out.glob("host-*.json")):
        record = json.loads(path.read_text())
        row = {
            "dtype": record["dtype"],
            "batch_size": record["batch_size"],
            "steps": record["steps"],
            "ms_per_step": statistics.median(r["ms_per_step"] for r in record["split_rounds"]),
            "device_ms_per_step": record["device_ms_per_step"],
            "host_ms_per_step": record["host_ms_per_step"],
            "outside_steps_ms": record.get("outside_steps_ms"),  # per call; older files lack it
        }
        for name, figures in record.get("trace", {}).items():  # --trace: the kernels of a forward, Jacobi and greedy
            row[f"{name}_kernel_ms_per_forward"] = figures["kernel_ms_per_forward"]
            row[f"{name}_graph_launches_per_forward"] = figures["graph_launches_per_forward"]
        rows.append(row)
    return rows


def _cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def write_summary(out: Path, default: JacobiConfig, curves: Path | None = None) -> dict:
    decode = decode_rows(out, default)
    projected = projections(out if curves is None else curves, decode)
    env_path = out / "environment.json"
    summary = {
        "environment": json.loads(env_path.read_text()) if env_path.exists() else environment(),
        "decode": decode,
        "projections": projected,
        "paper_tokens_per_forward": PAPER_TOKENS_PER_FORWARD,
        "curves_from": None if curves is None else curves.as_posix(),
    }
    host = host_rows(out)
    if host:
        summary["host"] = host
    (out / "gpu-grade.json").write_text(json.dumps(summary, indent=2))
    lines = [
        "| dtype | batch | setting | width | tokens/forward | batch forwards | tok/s | x generate | x best greedy | "
        "x best greedy / forward saving | identical | answers looping |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in decode:
        lines.append(
            f"| {r['dtype']} | {r['batch_size']} | {r['setting']} | {_cell(r['width'], 'd')} | "
            f"{_cell(r['tokens_per_forward'], '.2f')} | {r['batch_forwards']} | {_cell(r['tokens_per_s'], '.1f')} | "
            f"{_cell(r['speedup_vs_generate'], '.2f')} | {_cell(r['speedup_vs_best_greedy'], '.2f')} | "
            f"{_cell(r['speedup_per_forward_saving'], '.2f')} | {r['identical']}/{r['samples']} | "
            f"{r['collapsed']}/{r['samples']} |"
        )
    lines += [
        "",
        "forward saving = greedy's batch forwards / the setting's (a batch waits for its slowest row; at batch 1 it is "
        "the tokens per forward).",
        "",
        "Projection (not a measurement): forward saving / forward cost at the setting's width, from each curve; at the "
        "paper's tokens per forward for batch 1 only."
        + ("" if curves is None else f" Curves from {curves.as_posix()} (the same card, an earlier run)."),
        "",
        "| architecture | dtype | batch | width | cost vs 1 token | measured forward saving | projected x | "
        f"projected x at {PAPER_TOKENS_PER_FORWARD} |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in projected:
        lines.append(
            f"| {p['architecture']} | {p['dtype']} | {p['batch_size']} | {p['width']} | "
            f"{p['cost_vs_one_token']:.2f} | {p['measured_forward_saving']:.2f} | {p['projected_speedup']:.2f} | "
            f"{_cell(p['projected_speedup_at_paper_tpf'], '.2f')} |"
        )
    if host:
        lines += [
            "",
            "Host work per step (lab/benchmarks/profile_step.py --split; 2 blocks of 16 + recycling, compiled static cache): "
            "the step's time outside its device part (forward launch to the read-back of its predictions).",
            "",
            "| dtype | batch | steps | ms per step | device part (ms) | host work (ms) | call outside its steps (ms) | "
            "kernels per forward, Jacobi / greedy (ms, --trace) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for h in host:
            kernels = "-"
            if "jacobi_kernel_ms_per_forward" in h:
                kernels = f"{h['jacobi_kernel_ms_per_forward']:.2f} / {h['greedy_kernel_ms_per_forward']:.2f}"
            lines.append(
                f"| {h['dtype']} | {h['batch_size']} | {h['steps']} | {h['ms_per_step']:.2f} | "
                f"{h['device_ms_per_step']:.2f} | {h['host_ms_per_step']:.2f} | {_cell(h['outside_steps_ms'], '.1f')} | "
                f"{kernels} |"
            )
    (out / "gpu-grade.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path("runs/gpu"))
    parser.add_argument(
        "--phases",
        nargs="+",
        choices=["curves", "decode", "host", "summary"],
        default=["curves", "decode", "host", "summary"],
    )
    parser.add_argument("--decode", nargs="+", metavar="DTYPE:BATCH", help="only these entries of the decode plan")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model and tiny sizes: a smoke run anywhere")
    parser.add_argument("--model", type=Path, default=None, help="a local checkpoint instead of the shipped adapter")
    parser.add_argument("--no-compile", action="store_true", help="skip both compiled paths (greedy and Jacobi)")
    parser.add_argument(
        "--compiled-jacobi-only",
        action="store_true",
        help="leave out the eager Jacobi rows (at batch 1 the slowest rows after plain generate) to fit a short lease",
    )
    parser.add_argument(
        "--curves-from",
        type=Path,
        default=None,
        help="the folder whose curve-*.json the summary projects from (default: --output-dir)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="host phase: also profile each entry's device work and launches beside greedy's (profile_step --trace)",
    )
    parser.add_argument("--static-widths", nargs="+", help="the compiled Jacobi path's width counts, e.g. 1 5 (bench)")
    args = parser.parse_args(argv)
    # bad flags fail here, before any phase spends minutes decoding
    if args.compiled_jacobi_only and args.no_compile:
        parser.error("--compiled-jacobi-only needs the compiled paths: drop --no-compile")
    if args.curves_from is not None and not sorted(args.curves_from.glob("curve-*.json")):
        parser.error(f"--curves-from {args.curves_from}: no curve-*.json there (the curves phase writes them)")
    plan = select_decode(TINY if args.tiny else FULL, args.decode)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if {"curves", "decode", "host"} & set(args.phases):  # the machine that measures, not the one that summarizes
        (args.output_dir / "environment.json").write_text(json.dumps(environment(), indent=2))
    if "curves" in args.phases:
        run_curves(plan, args.output_dir)
    ok = True
    if "decode" in args.phases:
        eager = not args.compiled_jacobi_only
        ok = run_decode(plan, args.output_dir, args.model, not args.no_compile, args.static_widths, eager)
    if "host" in args.phases and not args.no_compile and args.model is None:
        run_host(plan, args.output_dir, args.tiny, args.trace)
    if "summary" in args.phases:
        from transformers import GenerationConfig

        from hf_jacobi.adapters import JACOBI_FORCING_WEIGHTS

        source = args.model if args.model is not None else JACOBI_FORCING_WEIGHTS
        default = JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(source))
        write_summary(args.output_dir, default, args.curves_from)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
