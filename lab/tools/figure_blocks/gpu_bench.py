"""The earlier GPU benches (`hf-jacobi bench` on two kinds of GPU, batch 1 and 8) and the forward-cost ratios of the
CPU and the first GPU (the runs `gpu-first` and `gpu-bench` of docs/results/labels.json)."""

from __future__ import annotations

from .core import Page, bench_rows, block, load, rng, run_folder, run_machine

BENCH = run_folder("gpu-bench")  # untrained and trained, batch 1 and 8
FIRST = run_folder("gpu-first")  # the trained model at batch 8, the forward-cost curves


def _gpu_rows(path: str, labels: dict[str, str], bold: str | None, batch_forwards: bool) -> list[str]:
    data = load(path)
    out = []
    for row in data["summary"]:
        if row["setting"] not in labels:
            continue
        cells = [f"{row['tokens_per_forward']:.2f}"]
        if batch_forwards:
            per_batch: dict[int, int] = {}
            for s in data["samples"]:
                if s["setting"] == row["setting"]:
                    per_batch[s["batch"]] = max(per_batch.get(s["batch"], 0), s["forwards"])
            cells.append(str(sum(per_batch.values())))
        best = f"{row['speedup_vs_best_ar']:.2f}x"
        if row["kind"] == "jacobi":
            best += f" ({rng(row['speedup_vs_best_ar_range'])})"
        cells += [
            f"{row['tokens_per_s']:.1f} ({rng(row['tokens_per_s_range'], '.1f')})",
            f"{row['speedup_vs_ar']:.2f}x",
            best,
        ]
        label = labels[row["setting"]]
        if row["setting"] == bold:
            label, cells = f"**{label}**", [f"**{c}**" for c in cells]
        out.append(f"| {label} | " + " | ".join(cells) + f" | {row['identical']}/{row['samples']} |")
    return out


GPU_LABELS = {
    "AR (generate)": "AR (`generate`)",
    "AR (static cache + compile)": "AR (static cache + `torch.compile`)",
    "Jacobi plain n=16": "Jacobi plain, block 16",
    "Jacobi both n=16": "Jacobi 2 blocks + recycling (pool 4), block 16",
    "Jacobi both n=32": "Jacobi 2 blocks + recycling (pool 4), block 32",
    "Jacobi default (block 8, pool 4)": "shipped (CPU) default: block 8, pool 4",
}


@block("gpu-bench-batch1")
def gpu_bench_batch1(page: Page) -> str:
    rows = [
        "| model, setting | tokens/forward | tok/s (range) | vs plain `generate` | vs static cache + compile (range) "
        "| identical |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for model, folder, bold in (("untrained", "untrained-b1", None), ("trained", "trained-b1", "Jacobi both n=16")):
        labels = {k: f"{model}, {v}" for k, v in GPU_LABELS.items() if k != "AR (generate)"}
        rows += _gpu_rows(f"{BENCH}/{folder}/bench.json", labels, bold, batch_forwards=False)
    return "\n".join(rows) + (
        f"\n\nFiles: {page.ref(f'{BENCH}/untrained-b1/bench.json', 'untrained')} (2 rounds), "
        f"{page.ref(f'{BENCH}/trained-b1/bench.json', 'trained')} (3 rounds); notes in "
        f"{page.ref(f'{BENCH}/README.md')}."
    )


@block("gpu-first-batch8")
def gpu_first_batch8(page: Page) -> str:
    rows = [
        "| setting | tokens/forward | batch forwards | tok/s (range) | vs plain `generate` "
        "| vs static cache + compile (range) | identical |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    path = f"{FIRST}/bench-trained-batch8/bench.json"
    rows += _gpu_rows(path, GPU_LABELS, "Jacobi both n=16", batch_forwards=True)
    return "\n".join(rows) + f"\n\nFile: {page.ref(path)}; notes in {page.ref(f'{FIRST}/README.md')}."


@block("gpu-bench-batch8")
def gpu_bench_batch8(page: Page) -> str:
    u = bench_rows(f"{BENCH}/untrained-b8/bench.json")["Jacobi both n=16"]
    t = bench_rows(f"{BENCH}/trained-b8/bench.json")["Jacobi both n=16"]
    return (
        f"the trained wide setting ran at {t['speedup_vs_ar']:.2f}x plain `generate` and "
        f"{t['speedup_vs_best_ar']:.2f}x compiled greedy ({rng(t['speedup_vs_best_ar_range'])} over the rounds), the "
        f"untrained one at {u['speedup_vs_ar']:.2f}x and {u['speedup_vs_best_ar']:.2f}x "
        f"({page.ref(f'{BENCH}/trained-b8/bench.json', 'trained')}, "
        f"{page.ref(f'{BENCH}/untrained-b8/bench.json', 'untrained')})"
    )


@block("forward-cost-ratios")
def forward_cost_ratios(page: Page) -> str:
    cpu = {int(k): v for k, v in load("cpu-tune-embedded.json")["roofline_seconds"].items()}
    curves = f"{FIRST}/forward-cost.json"
    gpu = {point["tokens"]: point["vs_one_token"] for point in load(curves)["float32-batch1"]}
    return (
        f"on the 2-core CPU a 16-token forward costs {cpu[16] / cpu[1]:.2f}x a one-token one "
        f"({page.ref('cpu-tune-embedded.json')}), on one {run_machine('gpu-first')} a 512-token one {gpu[512]:.2f}x "
        f"({page.ref(curves)})"
    )
