"""The blocks written for the shipped adapter's model card: round 4's gains, its wall-clock bench and the GPU sentence
(the card is published without the docs, so its figures are its own; the rounds' held-out curves are entries of
docs/results/tables.json)."""

from __future__ import annotations

from .core import (
    JF,
    ROUND3,
    ROUND4,
    Page,
    bench_rows,
    block,
    evaluation,
    gpu_model,
    load,
    rng,
    run_folder,
    shipped_when,
    trained,
)


@block("card-gains")
def card_gains(page: Page) -> str:
    b, t = evaluation(f"evaluate-{ROUND4}")
    hb, ht = evaluation(f"evaluate-humaneval-{ROUND4}")
    bb, bt = evaluation(f"evaluate-bench-prompts-{ROUND4}")
    r3 = trained(f"evaluate-humaneval-{ROUND3}")
    plain = t.setting("plain")["tokens_per_forward"] / b.setting("plain")["tokens_per_forward"]
    he_plain = ht.setting("plain")["tokens_per_forward"] / hb.setting("plain")["tokens_per_forward"]
    return (
        f"Round 4 (shipped {shipped_when(ROUND4)}): "
        f"Plain Jacobi accepts {plain:.2f}x the base model's tokens per forward on the `packages` test prompts and "
        f"{he_plain:.2f}x on HumanEval. The NLL of the 164 canonical solutions (given their prompts as raw "
        f"completions) is {ht.canonical_ratio:.3f}x the base's, inside the 1.10x bar set for quality (round 3: "
        f"{r3.canonical_ratio:.3f}x). Distinct 3-grams of the greedy answers are {t.distinct / b.distinct:.2f}x the "
        f"base's on `packages`, {ht.distinct / hb.distinct:.2f}x on HumanEval and {bt.distinct / bb.distinct:.2f}x "
        f"on the 4 bench prompts (bar 0.8x), and the NLL of the base model's own answers rises from "
        f"{b.reference_nll:.2f} to {t.reference_nll:.2f} nats per token on `packages` ({hb.reference_nll:.2f} to "
        f"{ht.reference_nll:.2f} on HumanEval): the adapter moves the model's own text more than its grasp of "
        "correct code."
    )


def _bench_wall_table(path: str, labels: dict[str, str], bold: str) -> str:
    rows = [
        "| setting | tokens/forward | tok/s (slowest-fastest round) | vs greedy (static cache + compile) "
        "| vs plain generate |",
        "|---|---:|---:|---:|---:|",
    ]
    for setting, row in bench_rows(path).items():
        label = labels.get(setting, setting)
        cells = [
            f"{row['tokens_per_forward']:.2f}",
            f"{row['tokens_per_s']:.1f} ({rng(row['tokens_per_s_range'], '.1f')})",
            f"{row['speedup_vs_best_ar']:.2f}x ({rng(row['speedup_vs_best_ar_range'])})",
            f"{row['speedup_vs_ar']:.2f}x",
        ]
        if setting == bold:
            label, cells = f"**{label}**", [f"**{c}**" for c in cells]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


@block("wall-round4")
def wall_round4(page: Page) -> str:
    path = f"{JF}/bench-round4/bench.json"
    labels = {
        "AR (generate)": "greedy `generate`",
        "AR (static cache + compile)": "greedy, static cache + `torch.compile`",
        "Jacobi plain n=8": "plain Jacobi, block 8",
        "Jacobi recycling n=8": "block 8 + pool 4 (the shipped default)",
        "Jacobi default (block 16, pool 4, 2 verified per step)": "block 16 + pool 4 verifying 2 (tune's choice)",
    }
    meta = load(path)["meta"]
    return (
        _bench_wall_table(path, labels, "Jacobi recycling n=8")
        + f"\n\n`{meta['command']}` on {meta['machine']}, {meta['rounds']} alternating rounds, medians "
        f"({page.ref(path)})."
    )


@block("card-gpu")
def card_gpu(page: Page) -> str:
    paths = (
        f"{run_folder('gpu-bench')}/trained-b1/bench.json",
        f"{run_folder('gpu-first')}/bench-trained-batch8/bench.json",
        f"{run_folder('gpu-bench')}/trained-b8/bench.json",
    )
    (b1, first, b8), (b1_gpu, first_gpu, b8_gpu) = zip(
        *((bench_rows(path)["Jacobi both n=16"], gpu_model(load(path)["meta"]["machine"])) for path in paths),
        strict=True,
    )
    return (
        f"{b1['speedup_vs_best_ar']:.2f}x greedy with static cache + `torch.compile` at batch 1 on an {b1_gpu} "
        f"({rng(b1['speedup_vs_best_ar_range'])} over the rounds; {b1['speedup_vs_ar']:.2f}x plain `generate`, "
        f"{b1['tokens_per_forward']:.2f} tokens per forward), and in batches of 8 {first['speedup_vs_best_ar']:.2f}x "
        f"on an {first_gpu} and {b8['speedup_vs_best_ar']:.2f}x on the {b8_gpu}, where a batch waits for its slowest "
        f"row ({', '.join(page.ref(path) for path in paths)});"
    )
