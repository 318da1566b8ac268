"""The GPU-grade runs on one GPU (lab/benchmarks/bench_gpu.py and profile_step.py): decoding at each dtype and batch,
host work, traces and forward-cost projections, for the adapter shipped before the CPU campaign's and the one it
replaced."""

from __future__ import annotations

import statistics

from .core import Page, block, gpu_model, load, run_folder

GRADE = run_folder("gpu-grade")  # the adapter the one shipped then replaced, every dtype and batch
SHIPPED_GRADE = run_folder("gpu-grade-shipped")  # the adapter shipped then: float32 batch 1, bfloat16 batch 8


def grade_rows(dtype: str | None = None, batch: int | None = None, folder: str = GRADE) -> list[dict]:
    """The decoding rows of a GPU-grade run (lab/benchmarks/bench_gpu.py), of one dtype and batch size when given."""
    rows = load(f"{folder}/gpu-grade.json")["decode"]
    return [r for r in rows if dtype in (None, r["dtype"]) and batch in (None, r["batch_size"])]


def grade_best(dtype: str, batch: int = 1, folder: str = GRADE) -> dict:
    """The fastest Jacobi row of one dtype and batch size."""
    rows = grade_rows(dtype, batch, folder)
    return max((r for r in rows if r["kind"] == "jacobi"), key=lambda r: r["tokens_per_s"])


def _grade_table(folder: str, entries: tuple[tuple[str, int], ...]) -> list[str]:
    rows = [
        "| dtype | batch | setting | tokens/forward | batch forwards | tok/s | vs plain `generate` | vs CUDA-graph greedy "
        "| speedup / forward saving | identical to `generate` | answers looping |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for dtype, batch in entries:
        best = grade_best(dtype, batch, folder)
        for r in grade_rows(dtype, batch, folder):
            cells = [
                dtype,
                str(batch),
                r["setting"].replace("AR (static cache + compile)", "AR (static cache + compile, CUDA graphs)"),
                f"{r['tokens_per_forward']:.2f}",
                str(r["batch_forwards"]),
                f"{r['tokens_per_s']:.1f}",
                f"{r['speedup_vs_generate']:.2f}x",
                f"{r['speedup_vs_best_greedy']:.2f}x",
                "-" if r["speedup_per_forward_saving"] is None else f"{r['speedup_per_forward_saving']:.2f}",
                f"{r['identical']}/{r['samples']}",
                f"{r['collapsed']}/{r['samples']}",
            ]
            if r is best:
                cells = [f"**{c}**" if i > 0 else c for i, c in enumerate(cells)]
            rows.append(f"| {' | '.join(cells)} |")
    return rows


@block("gpu-grade-decode")
def gpu_grade_decode(page: Page) -> str:
    rows = _grade_table(GRADE, (("float32", 1), ("bfloat16", 1), ("float32", 8), ("bfloat16", 8)))
    env = load(f"{GRADE}/gpu-grade.json")["environment"]
    return "\n".join(rows) + (
        f"\n\n{env['nvidia_smi']} (driver), torch {env['torch']}, transformers {env['transformers']}, CUDA "
        f"{env['cuda']}. Files: {page.ref(GRADE + '/gpu-grade.json', 'gpu-grade.json')}, "
        + ", ".join(
            page.ref(f"{GRADE}/decode-{d}-b{b}/bench.json", f"{d} batch {b}")
            for d in ("float32", "bfloat16")
            for b in (1, 8)
        )
        + " bench.json (batch 8: 3 timed rounds, medians; batch 1: one round)."
    )


@block("gpu-shipped-decode")
def gpu_shipped_decode(page: Page) -> str:
    data = load(f"{SHIPPED_GRADE}/gpu-grade.json")
    rows = _grade_table(SHIPPED_GRADE, (("float32", 1), ("bfloat16", 8)))
    host = [
        "| dtype | batch | steps | ms per step | forward launch to read-back (ms) | host work (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    host += [
        f"| {h['dtype']} | {h['batch_size']} | {h['steps']} | {h['ms_per_step']:.2f} | "
        f"{h['device_ms_per_step']:.2f} | **{h['host_ms_per_step']:.2f}** |"
        for h in data["host"]
    ]
    bound = [
        f"{p['dtype']} batch {p['batch_size']} width {p['width']}: {p['projected_speedup']:.2f}x"
        for p in data["projections"]
        if p["architecture"] == "smollm2-135m"
    ]
    env = data["environment"]
    files = ", ".join(
        page.ref(f"{SHIPPED_GRADE}/{name}", text)
        for name, text in (
            ("gpu-grade.json", "gpu-grade.json"),
            ("decode-float32-b1/bench.json", "float32 batch 1"),
            ("decode-bfloat16-b8/bench.json", "bfloat16 batch 8"),
            ("host-bfloat16-b8.json", "host work"),
        )
    )
    return (
        "\n".join(rows)
        + "\n\nHost work per step (`lab/benchmarks/profile_step.py --split --rounds 3`, 2 blocks of 16 + recycling on the "
        "compiled static cache, medians of 3 rounds):\n\n"
        + "\n".join(host)
        + "\n\nThe same speedups from forward costs alone (forward saving / cost of the setting's width on the "
        f"earlier run's curves, i.e. with no loop overhead; a bound, not a measurement): {'; '.join(bound)}.\n\n"
        f"{env['nvidia_smi']} (driver), torch {env['torch']}, transformers {env['transformers']}, CUDA {env['cuda']}; "
        f"one timed round after untimed warm-ups. Files: {files}."
    )


def _host_bf16_b8() -> tuple[dict, dict]:
    """The shipped run's host phase (bfloat16, batch 8) and the forward-cost bound of the same setting (width 92)."""
    data = load(f"{SHIPPED_GRADE}/gpu-grade.json")
    host = next(h for h in data["host"] if (h["dtype"], h["batch_size"]) == ("bfloat16", 8))
    bound = next(
        p
        for p in data["projections"]
        if (p["architecture"], p["dtype"], p["batch_size"], p["width"]) == ("smollm2-135m", "bfloat16", 8, 92)
    )
    return host, bound


@block("gpu-shipped-host-sentence")
def gpu_shipped_host_sentence(page: Page) -> str:
    host, bound = _host_bf16_b8()
    later = _trace_split("bfloat16", 8)
    gpu = gpu_model(later["device_name"])
    return (
        f"{later['host']:.1f} of a {later['ms']:.1f} ms batch-8 bfloat16 step on the {gpu}, "
        f"{host['host_ms_per_step']:.1f} of {host['ms_per_step']:.1f} on the lease before; the forward costs alone "
        f"would give {bound['projected_speedup']:.2f}x"
    )


@block("gpu-shipped-settings-sentence")
def gpu_shipped_settings_sentence(page: Page) -> str:
    def pair(dtype: str, batch: int) -> str:
        rows = {r["setting"].split(" (")[0]: r for r in grade_rows(dtype, batch, SHIPPED_GRADE)}
        both, default = rows["Jacobi both n=16"], rows["Jacobi default"]
        return f"{both['speedup_vs_best_greedy']:.2f}x against the default's {default['speedup_vs_best_greedy']:.2f}x"

    return f"{pair('float32', 1)} at batch 1 in float32, and {pair('bfloat16', 8)} at batch 8 in bfloat16"


@block("gpu-tpf-settings")
def gpu_tpf_settings(page: Page) -> str:
    path = f"{SHIPPED_GRADE}/tpf-settings-cpu.json"
    data = load(path)
    rows = [
        "| setting | widest forward | forwards | tokens/forward | identical to greedy |",
        "|---|---:|---:|---:|:---:|",
    ]
    for name, r in data["rows"].items():
        rows.append(
            f"| {name} | {r['width']} | {r['forwards']} | {r['tokens_per_forward']:.2f} | "
            f"{r['identical']}/{data['prompts']} |"
        )
    return "\n".join(rows) + (
        f"\n\n`lab/benchmarks/tpf_settings.py` on this CPU: the previous adapter, float32, batch 1, the same "
        f"{data['prompts']} prompts, {data['max_new_tokens']} tokens. File: {page.ref(path)}."
    )


TRACE = run_folder("gpu-trace")  # where a step's time goes on the device and the host


def _trace_split(dtype: str, batch: int) -> dict:
    """A traced entry's unprofiled split (profile_step --split): its own file's medians, or the transcribed split;
    `device_name` is the card the entry was traced on."""
    record = load(f"{TRACE}/trace-{dtype}-b{batch}.json")
    if "split_rounds" in record:
        step = statistics.median(r["ms_per_step"] for r in record["split_rounds"])
        split = {"ms": step, "device": record["device_ms_per_step"], "host": record["host_ms_per_step"]}
    else:
        transcribed = load(f"{TRACE}/split-{dtype}-b{batch}.json")
        device, host = transcribed["device_ms_per_step"], transcribed["host_ms_per_step"]
        split = {"ms": device + host, "device": device, "host": host}
    return {**split, "device_name": record["device"]}


@block("gpu-trace")
def gpu_trace(page: Page) -> str:
    rows = [
        "| dtype | batch | Jacobi step (ms) | of which host work | Jacobi kernels per forward (ms) | greedy kernels per "
        "token (ms) | kernels: Jacobi / greedy | profiled wall per forward, Jacobi / greedy (ms) | graph launches per "
        "forward, Jacobi / greedy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    files, devices = [], set()
    for dtype, batch in (("float32", 1), ("bfloat16", 1), ("bfloat16", 8)):
        name = f"trace-{dtype}-b{batch}.json"
        record, split = load(f"{TRACE}/{name}"), _trace_split(dtype, batch)
        devices.add(split["device_name"])
        jacobi, greedy = record["trace"]["jacobi"], record["trace"]["greedy"]
        rows.append(
            f"| {dtype} | {batch} | {split['ms']:.2f} | {split['host']:.2f} | {jacobi['kernel_ms_per_forward']:.2f} | "
            f"{greedy['kernel_ms_per_forward']:.2f} | {jacobi['kernels_per_forward']:.0f} / "
            f"{greedy['kernels_per_forward']:.0f} | {jacobi['wall_ms_per_forward']:.2f} / "
            f"{greedy['wall_ms_per_forward']:.2f} | {jacobi['graph_launches_per_forward']:.2f} / "
            f"{greedy['graph_launches_per_forward']:.2f} |"
        )
        files.append(page.ref(f"{TRACE}/{name}", f"{dtype} batch {batch}"))
    return "\n".join(rows) + (
        "\n\n`lab/benchmarks/profile_step.py --trace` (and `--split` for the step and its host work) on one "
        f"{' and '.join(sorted(devices))}, the previous adapter, 2 blocks of 16 + recycling on the compiled static "
        'cache against greedy on the static cache compiled in mode "reduce-overhead", the first `packages` test '
        "prompt(s), 128 tokens; per forward the prefill included. Files: "
        + ", ".join(files)
        + f", {page.ref(f'{TRACE}/split-bfloat16-b8.json', 'the batch-8 split')}."
    )


@block("gpu-shipped-sentence")
def gpu_shipped_sentence(page: Page) -> str:
    fp32, bf16 = grade_best("float32", 1, SHIPPED_GRADE), grade_best("bfloat16", 8, SHIPPED_GRADE)

    def setting(row: dict) -> str:
        return "2 blocks + recycling" if row["setting"].startswith("Jacobi both") else "the shipped default"

    return (
        f"{fp32['speedup_vs_best_greedy']:.2f}x CUDA-graph greedy in float32 at batch 1 with {setting(fp32)} "
        f"({fp32['tokens_per_forward']:.2f} tokens per forward, {fp32['identical']}/{fp32['samples']} identical) and "
        f"{bf16['speedup_vs_best_greedy']:.2f}x in bfloat16 at batch 8 with {setting(bf16)}"
    )


@block("gpu-grade-projection")
def gpu_grade_projection(page: Page) -> str:
    data = load(f"{GRADE}/gpu-grade.json")
    paper = data["paper_tokens_per_forward"]
    rows = [
        "| architecture (random weights) | dtype | batch | width | forward cost vs 1 token | projected at the measured "
        f"tokens/forward | projected at the paper's {paper} |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in data["projections"]:
        rows.append(
            f"| {p['architecture']} | {p['dtype']} | {p['batch_size']} | {p['width']} | {p['cost_vs_one_token']:.2f} | "
            f"{p['projected_speedup']:.2f}x (at {p['measured_forward_saving']:.2f}) | "
            + ("-" if p["projected_speedup_at_paper_tpf"] is None else f"{p['projected_speedup_at_paper_tpf']:.2f}x")
            + " |"
        )
    curves = ", ".join(
        page.ref(f"{GRADE}/curve-{a}-{d}.json", f"{a} {d}")
        for a, d in (
            ("smollm2-135m", "float32"),
            ("smollm2-135m", "bfloat16"),
            ("qwen2.5-coder-1.5b", "bfloat16"),
            ("qwen2.5-coder-7b", "bfloat16"),
        )
    )
    return "\n".join(rows) + f"\n\nCurves (batch 1 and 8, widths 1-256): {curves}."


@block("gpu-grade-sentence")
def gpu_grade_sentence(page: Page) -> str:
    fp32, bf16 = grade_best("float32"), grade_best("bfloat16")
    return (
        f"{fp32['speedup_vs_best_greedy']:.2f}x CUDA-graph greedy in float32 ({fp32['tokens_per_forward']:.2f} tokens "
        f"per forward, {fp32['identical']}/{fp32['samples']} identical) and {bf16['speedup_vs_best_greedy']:.2f}x in "
        f"bfloat16 ({bf16['identical']}/{bf16['samples']} identical to bfloat16 `generate`) at batch 1; at batch 8 "
        f"{grade_best('float32', 8)['speedup_vs_best_greedy']:.2f}x in float32 and "
        f"{grade_best('bfloat16', 8)['speedup_vs_best_greedy']:.2f}x in bfloat16"
    )
