"""Where a Jacobi step's time goes on the host: one profiled `generate(decoding="jacobi")` call, per step.

Why: on a GPU a compiled Jacobi step costs well more than a CUDA-graph greedy step at batch 8 in bfloat16
(docs/results/gpu-h200-grade/README.md), and the wider forward explains only part of that; the rest is the loop's host
work, which no device figure shows.
Python's profiler sees the host: the device runs asynchronously, so the time spent waiting for it lands on the one
read-back of each step (`tolist`), and every other function's own time is host work, which is what shrinking the
per-step overhead (mask building, cache commit, proposals) has to cut.

    python lab/benchmarks/profile_step.py --batch-size 8 --dtype bfloat16 --path compiled     # the shipped adapter
    python lab/benchmarks/profile_step.py --tiny                                              # any machine, seconds

Prints ms per step, the share spent waiting for the device, and the functions with the most host time per step;
`--ops` also runs the call once under torch's profiler and counts the aten ops each step runs outside the compiled
verify forward (top-level ops inside the loop's `_step`; the prefill and the call's set-up are not counted), and
`--output FILE` writes the figures as JSON (docs/results/host-work-cpu). `--split` times every step and its device
part (`loop._verify`: the forward, the scores' argmax and their read-back) over `--rounds` uncounted-for-profiling
calls, and reports the rest of the step: the host work between two forwards, which the device idles through. On a
CPU the device part is the forward computed in place; on a GPU it is the forward's launch and wait.

On a CPU, one thread, the embedded SmolLM2-135M with the shipped adapter, batch 1:

    OMP_NUM_THREADS=1 python lab/benchmarks/profile_step.py --max-new-tokens 64 --top 15 --ops

counts the aten ops a step runs outside the compiled forward. It guided the cuts to the host work: one foreach `sub_`
to crop instead of one per layer, one foreach copy instead of a gather and a copy per layer's keys and values on
reordering steps, and the slots' positions copied only for sliding windows, not for every mask, removed a large share
of those ops. On a CPU the forward's matmuls are most of a step, so the ms are noise; the op count is what a GPU step
pays in host launches.
(That command's counts spread the prefill over the steps; the counts in docs/results/host-work-cpu, from the layouts
and masks built on the host and the slot moves made inside the compiled forward, do not.)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers

# run as a script, from any folder: the repository's root makes `lab` importable
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hf_jacobi.bench.runner import KeptStaticCaches
from hf_jacobi.data.batching import left_padded
from hf_jacobi.data.prompts import encode_prompts, load_prompts
from hf_jacobi.measurement import timed
from lab.architectures import random_model

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
"""The runtime calls that launch one kernel from the host (a CUDA graph's replay is one `cudaGraphLaunch`)."""

WAIT = "tolist"
"""The loop's one read-back per step: where the host waits for the device."""


def _model(tiny: bool, dtype: torch.dtype, device: str):
    if tiny:
        from hf_jacobi import enable_jacobi

        model = random_model("tiny-llama", dtype, device)
        model.generation_config.pad_token_id = 0
        return enable_jacobi(model), None
    from hf_jacobi import load_default_model

    model, tokenizer = load_default_model(jacobi_forcing=True)
    return model.to(device=device, dtype=dtype), tokenizer


def _inputs(tokenizer, batch_size: int, device: str) -> dict:
    if tokenizer is None:
        rows = [[1, *range(5 + row, 25 + row)] for row in range(batch_size)]
        return left_padded(rows, 0, device)
    prompts = encode_prompts(load_prompts("packages", split="test", limit=batch_size), tokenizer)
    return left_padded(prompts, tokenizer.pad_token_id, device)


COMPILED = "Torch-Compiled Region"
"""The profiler's event around a call of the compiled forward: every op under it is the verify forward's."""


STEP = "hf_jacobi step"
"""The profiler's range around one `loop._step` (set by this script): the ops counted per step are under it."""


def outside_ops(events) -> Counter:
    """The loop's own ops per name: top-level aten ops (no aten op or compiled region above them) inside a step's
    range, so neither the verify forward's ops nor the prefill's and the call's set-up are counted."""
    count: Counter = Counter()
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        parent, in_step = event.cpu_parent, False
        while parent is not None:
            if parent.name.startswith("aten::") or parent.name.startswith(COMPILED):
                break
            in_step |= parent.name == STEP
            parent = parent.cpu_parent
        if parent is None and in_step:
            count[event.name] += 1
    return count


@contextmanager
def _timed_steps(times: dict[str, float]):
    """Adds each step's wall time and its device part's (`loop._verify`) to `times` while the block runs."""
    from hf_jacobi.decoding import loop

    step, verify = loop._step, loop._verify

    def timed_step(*args, **kwargs):
        start = time.perf_counter()
        step(*args, **kwargs)
        times["step"] += time.perf_counter() - start
        times["steps"] += 1

    def timed_verify(*args, **kwargs):
        start = time.perf_counter()
        out = verify(*args, **kwargs)
        times["verify"] += time.perf_counter() - start
        return out

    loop._step, loop._verify = timed_step, timed_verify
    try:
        yield
    finally:
        loop._step, loop._verify = step, verify


def split_rounds(model, inputs: dict, kwargs: dict, rounds: int) -> list[dict[str, float]]:
    """Per call: ms per step, of which the device part (forward to read-back) and the host work around it; and the
    whole call, whose time outside the steps (prefill, the cache's set-up, a CUDA graph recorded again) a benchmark's
    per-call figure pays too."""
    figures = []
    for _ in range(rounds):
        times = {"step": 0.0, "verify": 0.0, "steps": 0}
        with torch.inference_mode(), _timed_steps(times):
            _, call = timed(lambda: model.generate(**inputs, **kwargs))
        steps = max(times["steps"], 1)
        figures.append(
            {
                "steps": times["steps"],
                "ms_per_step": 1000 * times["step"] / steps,
                "device_ms_per_step": 1000 * times["verify"] / steps,
                "host_ms_per_step": 1000 * (times["step"] - times["verify"]) / steps,
                "call_ms": 1000 * call,
                "outside_steps_ms": 1000 * (call - times["step"]),
            }
        )
    return figures


@contextmanager
def _ranged_steps():
    """Wraps the loop's step in a profiler range named `STEP` while the block runs."""
    from hf_jacobi.decoding import loop

    step = loop._step

    def ranged(*args, **kwargs):
        with torch.profiler.record_function(STEP):
            return step(*args, **kwargs)

    loop._step = ranged
    try:
        yield
    finally:
        loop._step = step


def trace_call(model, inputs: dict, call_kwargs: Callable[[], dict], warmups: int = 2) -> dict:
    """One call under torch's profiler with the device's activities, after `warmups` untimed calls (compiling, then
    recording the CUDA graph): what the device computed and what the host launched, per forward.

    Why: a step's wall time alone cannot tell a loop whose device idles (host-bound: launches, Python) from one whose
    kernels are slow (device-bound: width, attention over the cache), and the cure differs. Counts are per forward
    with the prefill included (one eager forward per call, for greedy and Jacobi alike), so a compiled forward that
    replays a CUDA graph shows about one graph launch and few kernel launches per forward. `call_kwargs` gives each
    call's generate arguments (greedy's kept cache is reset for every call).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch.inference_mode():
        for _ in range(warmups):
            model.generate(**inputs, **call_kwargs())
        skips_before, recordings = _cudagraph_skips(), {}
        kwargs = call_kwargs()
        with counting_graph_recordings(recordings), torch.profiler.profile(activities=activities) as prof:
            out, wall = timed(lambda: model.generate(**inputs, **kwargs))
    prompt = inputs["input_ids"].shape[1]
    if getattr(out, "forward_passes", None) is not None:
        forwards = int(out.forward_passes.max()) + 1  # the steps and the prefill
    else:
        forwards = out.sequences.shape[1] - prompt  # greedy: one forward per new token, the prefill's included
    averages = prof.key_averages()
    kernels = [e for e in averages if e.device_type == DeviceType.CUDA]
    by_name = {e.key: e.count for e in averages if e.device_type != DeviceType.CUDA}
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:8]
    return {
        "forwards": forwards,
        "wall_ms_per_forward": 1000 * wall / forwards,
        "kernel_ms_per_forward": sum(e.self_device_time_total for e in kernels) / 1000 / forwards,
        "kernels_per_forward": sum(e.count for e in kernels) / forwards,
        "kernel_launches_per_forward": sum(by_name.get(name, 0) for name in LAUNCHES) / forwards,
        "graph_launches_per_forward": by_name.get("cudaGraphLaunch", 0) / forwards,
        "cudagraph_skips": _cudagraph_skips() - skips_before,
        "graphs_recorded": recordings["recorded"],
        "top_kernels_ms_per_forward": {e.key[:80]: e.self_device_time_total / 1000 / forwards for e in top},
    }


@contextmanager
def counting_graph_recordings(counts: dict[str, int]):
    """Counts the CUDA graphs torch records while the block runs, in `counts["recorded"]`.

    After a warm-up a decoding call should replay its graphs and record none: a graph recorded again (torch does it
    when a static input, such as a cache tensor or the slot-move plan, sits at a new address) costs a capture. Why it
    happened is what TORCH_LOGS=cudagraphs would say, but with torch 2.11 that log fails an assertion inside torch
    while it explains a re-recording (cudagraph_utils.log_data_ptr_mismatch), so it is counted instead.
    """
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.CUDAGraphTreeManager
    record = getattr(manager, "record_function", None)
    counts.setdefault("recorded", 0)
    if record is None:  # another torch: nothing to count with
        yield
        return

    def counted(self, *args, **kwargs):
        counts["recorded"] += 1
        return record(self, *args, **kwargs)

    manager.record_function = counted
    try:
        yield
    finally:
        manager.record_function = record


def _cudagraph_skips() -> int:
    """How many times inductor declined to record a CUDA graph (and why is in TORCH_LOGS=cudagraphs) so far."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--path", choices=["eager", "compiled"], default="compiled")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--top", type=int, default=20, help="functions listed")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model: a smoke run anywhere")
    parser.add_argument("--ops", action="store_true", help="also count the aten ops per step outside the forward")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--split", action="store_true", help="also time each step's host work and device part")
    parser.add_argument("--rounds", type=int, default=3, help="timed calls for --split (their median is reported)")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also profile one Jacobi call and one greedy call on the static cache (compiled as generate compiles it) "
        "with the device's activities: kernel time, kernels and launches per forward",
    )
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = _model(args.tiny, getattr(torch, args.dtype), device)
    inputs = _inputs(tokenizer, args.batch_size, device)
    settings = dict(decoding="jacobi", jacobi_block_size=16, jacobi_num_blocks=2, jacobi_ngram_pool_size=4)
    if args.path == "compiled":
        settings.update(cache_implementation="static", jacobi_compile="always")
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=False, return_dict_in_generate=True, **settings)
    with torch.inference_mode():
        model.generate(**inputs, **kwargs)  # warm-up: compiles and records the graph, untimed
        profiler, start = cProfile.Profile(), time.perf_counter()
        profiler.enable()
        out = model.generate(**inputs, **kwargs)
        profiler.disable()
    wall = time.perf_counter() - start
    steps = int(out.forward_passes.max())
    stats = pstats.Stats(profiler)
    waited = sum(row[2] for key, row in stats.stats.items() if key[2].endswith(WAIT) or WAIT in key[2])
    print(
        f"{device} {args.dtype} batch {args.batch_size} {args.path}: {steps} steps, {1000 * wall / steps:.2f} ms per "
        f"step, of which waiting for the device (or computing, on a CPU) {1000 * waited / steps:.2f} ms"
    )
    report = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "path": args.path,
        "model": "tiny random llama" if args.tiny else "SmolLM2-135M-Instruct + shipped adapter",
        "settings": settings,
        "max_new_tokens": args.max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "steps": steps,
        "ms_per_step": 1000 * wall / steps,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if args.split:
        rounds = split_rounds(model, inputs, kwargs, args.rounds)
        host = statistics.median(r["host_ms_per_step"] for r in rounds)
        device_part = statistics.median(r["device_ms_per_step"] for r in rounds)
        outside = statistics.median(r["outside_steps_ms"] for r in rounds)
        print(
            f"host work per step (median of {len(rounds)}): {host:.2f} ms beside {device_part:.2f} ms from the "
            f"forward's launch to its read-back; rounds: " + ", ".join(f"{r['host_ms_per_step']:.2f}" for r in rounds)
        )
        print(
            f"per call: {statistics.median(r['call_ms'] for r in rounds):.1f} ms, of which {outside:.1f} ms outside "
            "its steps (prefill, set-up, any graph recorded again)"
        )
        report.update(
            host_ms_per_step=host, device_ms_per_step=device_part, outside_steps_ms=outside, split_rounds=rounds
        )
    if args.ops:
        with (
            torch.inference_mode(),
            _ranged_steps(),
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
        ):
            model.generate(**inputs, **kwargs)
        ops = outside_ops(prof.events())
        common = ", ".join(f"{name.removeprefix('aten::')} {count / steps:.1f}" for name, count in ops.most_common(8))
        print(f"aten ops per step outside the compiled forward: {ops.total() / steps:.1f} ({common})")
        report["ops_per_step"] = ops.total() / steps
        report["ops_by_name_per_step"] = {name: count / steps for name, count in ops.most_common()}
    if args.trace:
        # greedy as bench times it: generate compiles it on the static cache, kept across calls and reset before each
        greedy = dict(max_new_tokens=args.max_new_tokens, do_sample=False, return_dict_in_generate=True)
        kept, (batch, prompt) = KeptStaticCaches(model), inputs["input_ids"].shape
        report["trace"] = {
            "jacobi": trace_call(model, inputs, lambda: kwargs),
            "greedy": trace_call(model, inputs, lambda: kept.kwargs(greedy, batch, prompt + args.max_new_tokens)),
        }
        for name, figures in report["trace"].items():
            print(
                f"{name}: {figures['forwards']} forwards, per forward {figures['wall_ms_per_forward']:.2f} ms wall "
                f"(profiled), {figures['kernel_ms_per_forward']:.2f} ms of kernels, {figures['kernels_per_forward']:.0f} "
                f"kernels, {figures['kernel_launches_per_forward']:.1f} kernel launches, "
                f"{figures['graph_launches_per_forward']:.2f} graph launches; cudagraph skips {figures['cudagraph_skips']}, "
                f"graphs recorded {figures['graphs_recorded']}"
            )
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[: args.top]
    for (file, line, name), (_, calls, own, _cumulative, _) in rows:
        print(
            f"{1000 * own / steps:8.3f} ms/step {calls / steps:7.1f} calls/step  {name}  {file.split('/')[-1]}:{line}"
        )
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
