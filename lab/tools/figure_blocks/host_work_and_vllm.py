"""The decoding loop's own cost on the CPU (host work per step, the overhead variants) and vLLM serving the
shipped adapter on the CPU."""

from __future__ import annotations

import statistics

from .core import RESULTS, Page, block, load, markdown_table

HOST_WORK = "host-work-cpu"


@block("host-work-cpu")
def host_work_cpu(page: Page) -> str:
    """The loop's own ops per step on the compiled static path, before and after the host-side layouts, masks and
    in-graph slot moves (lab/benchmarks/profile_step.py --ops, on the commit before and the commit after)."""
    lines = [
        "| batch | code | steps | aten ops per step outside the compiled forward | commonest of them | ms per step (CPU) |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for batch in (1, 8):
        for name, label in ((f"before-c18c5d3-batch{batch}", "before (c18c5d3)"), (f"after-batch{batch}", "after")):
            run = load(f"{HOST_WORK}/{name}.json")
            common = ", ".join(
                f"{op.removeprefix('aten::')} {count:.1f}"
                for op, count in list(run["ops_by_name_per_step"].items())[:4]
            )
            bold = "**" if label == "after" else ""
            lines.append(
                f"| {batch} | {page.ref(f'{HOST_WORK}/{name}.json', label)} | {run['steps']} | "
                f"{bold}{run['ops_per_step']:.1f}{bold} | {common} | {run['ms_per_step']:.0f} |"
            )
    return "\n".join(lines)


@block("host-split-cpu")
def host_split_cpu(page: Page) -> str:
    """Each step's host work beside its device part on the compiled static path (profile_step --split): the rounds'
    median and every round's host figure."""
    lines = [
        "| batch | steps | ms per step | forward to read-back (ms) | host work (ms) | host work, each round (ms) | file |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for batch in (1, 8):
        name = f"{HOST_WORK}/split-batch{batch}.json"
        run = load(name)
        rounds = ", ".join(f"{r['host_ms_per_step']:.1f}" for r in run["split_rounds"])
        total = statistics.median(r["ms_per_step"] for r in run["split_rounds"])
        lines.append(
            f"| {batch} | {run['steps']} | {total:.0f} | {run['device_ms_per_step']:.0f} | "
            f"**{run['host_ms_per_step']:.1f}** | {rounds} | {page.ref(name, 'json')} |"
        )
    return "\n".join(lines)


@block("vllm-base-scale")
def vllm_base_scale(page: Page) -> str:
    """vLLM on a CPU with the previous adapter merged (lab/benchmarks/vllm_cpu.py): AR, n-gram and JacobiProposer."""
    path = "vllm-cpu/base-scale/vllm-cpu.md"
    return f"{markdown_table(path)}\n\nFiles: {page.ref(path)}, {page.ref('vllm-cpu/base-scale/vllm-cpu.json')}."


OVERHEAD = "cpu-overhead"


@block("overhead-variants")
def overhead_variants(page: Page) -> str:
    """Tokens per forward per variant from `python -m lab overhead`; its timings came from a shared, loaded machine."""
    parts = []
    for name, title in (
        ("overhead", "plain Jacobi, 6 HumanEval prompts, 96 tokens"),
        ("variants", "the four variants, 4 HumanEval prompts, 64 tokens"),
    ):
        path = f"{OVERHEAD}/{name}.json"
        if not (RESULTS / path).is_file():
            parts.append(f"_{title}_: not measured with today's code yet.")
            continue
        rows = [
            f"_{title}_ ({page.ref(path)}):",
            "",
            "| variant | block | tokens/forward | vs plain | mean width | recycled tokens | identical |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in load(path)["summary"]:
            rows.append(
                f"| {r['variant']} | {r['block_size']} | {r['tokens_per_forward']:.3f} | {r['vs_plain']:.3f}x | "
                f"{r['mean_width']:.1f} | {r['recycled_tokens']} | {'yes' if r['all_identical'] else 'no'} |"
            )
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
