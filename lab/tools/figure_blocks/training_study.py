"""The training study of the results page: every run's held-out figures against round 1's recipe, the runs
evaluated in full, and the block-size runs."""

from __future__ import annotations

from .core import (
    JF,
    RESULTS,
    ROUND2,
    ROUND3,
    ROUND4,
    Page,
    Side,
    base,
    bench_rows,
    block,
    evaluation,
    heldout_curve,
    shipped_when,
    trained,
)

# the study's runs: (label, how it differs from round 1's recipe)
STUDY = {
    "lora-r16": ("LoRA r16, 1 epoch (round 1)", ""),
    "full": ("full fine-tune, 1 epoch", "`train_packages_full.yaml` (lr 5e-5)"),
    "lora-r16-2ep": ("LoRA r16, 2 epochs", "`--num_train_epochs 2`"),
    "lora-r16-lr1e-3": ("LoRA r16, lr 1e-3", "`--learning_rate 1e-3`"),
    "lora-r64": ("LoRA r64", "`--lora_r 64 --lora_alpha 128`"),
    "lora-r16-448": ("LoRA r16, 448 prompts, 1 epoch", "`--num_trajectory_prompts 448`"),
    "lora-r16-ar0.25": ("LoRA r16, AR weight 0.25", "`--ar_loss_weight 0.25`"),
    "lora-r16-w4": ("LoRA r16, noise window 4", "`--noise_window 4`"),
    "lora-r16-b8": ("LoRA r16, trajectories at block 8", "`jacobi-forcing-block-sizes` (collect `--block_size 8`)"),
    "lora-r16-b32": ("LoRA r16, trajectories at block 32", "`jacobi-forcing-block-sizes` (collect `--block_size 32`)"),
    "lora-r16-w16": ("LoRA r16, noise window 16 (block 16)", "`--noise_window 16`"),
    "lora-r16-mixed": ("LoRA r16, 2,000 prompts (code + instructions), 1 epoch", "`train_mixed_lora.yaml`"),
    "lora-r16-mixed-ar2": ("the same, AR weight 2", "`train_mixed_lora.yaml --ar_loss_weight 2`"),
    "lora-r16-round2": ("second round from round 1", "`train_round2.yaml --base_kl_weight 0`"),
    "lora-r16-round2-ar2": ("the same, AR weight 2", "`train_round2.yaml --base_kl_weight 0 --ar_loss_weight 2`"),
    "lora-r16-round2-kl1": ("the same, KL anchor to the base (round 2)", "`train_round2.yaml` (`--base_kl_weight 1`)"),
    "lora-r16-round2-kl0.5": ("the same, KL weight 0.5", "`train_round2.yaml --base_kl_weight 0.5`"),
    "lora-r16-round3-mixed-kl1": ("third round from round 2, 2,000 prompts, KL anchor", "`train_round3.yaml`"),
    "lora-r16-onpolicy-kl1": (
        "the same on round 2's own trajectories (on-policy)",
        "`train_onpolicy.yaml` without anchor texts",
    ),
    ROUND3: ("the same with 300 anchor texts (round 3)", "`train_onpolicy.yaml`"),
    ROUND4: (
        f"**fourth round on round 3's own trajectories, noise window 16 (round 4, shipped {shipped_when(ROUND4)})**",
        "`train_round4.yaml`",
    ),
}


def _curve_path(run: str) -> str:
    if (
        run == ROUND3
    ):  # the uninterrupted re-run: the original's held-out NLL after its resume scored a wrong reference
        return f"{JF}/reproduction/training-states/{run}/trainer_state.json"
    return f"{JF}/training-states/{run}/trainer_state.json"


@block("study")
def study(page: Page) -> str:
    lines = (RESULTS / JF / "study.md").read_text(encoding="utf-8").splitlines()
    rows = [
        "| run | flag | steps | training tokens | plain tokens/forward | distinct 3-grams | NLL of base answers |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 6 or cells[0] not in STUDY:
            continue
        run, steps, tokens, plain, distinct, nll = cells
        label, flag = STUDY[run]
        curve = heldout_curve(_curve_path(run))
        best = max(curve, key=lambda e: e["heldout/plain_tokens_per_forward"])
        if (
            best is not curve[-1]
            and best["heldout/plain_tokens_per_forward"] > curve[-1]["heldout/plain_tokens_per_forward"] + 0.005
        ):
            plain += f" ({best['heldout/plain_tokens_per_forward']:.3f} at step {best['step']})"
        rows.append(f"| {label} | {flag} | {steps} | {tokens} | {plain} | {distinct} | {nll} |")
    return "\n".join(rows) + f"\n\nFile: {page.ref(f'{JF}/study.md')} (and each run's `trainer_state.json`)."


# the runs evaluated in full: (label, run name in the evaluation files, or None for the base model)
FULL_EVALS = [
    ("base", None),
    ("LoRA r16, 1 epoch (round 1)", "lora-r16"),
    ("LoRA r16, 2 epochs", "lora-r16-2ep"),
    ("LoRA r16, 448 prompts", "lora-r16-448"),
    ("LoRA r16, 2,000 prompts (mixed)", "lora-r16-mixed"),
    ("the same, AR weight 2", "lora-r16-mixed-ar2"),
    ("second round (from round 1)", "lora-r16-round2"),
    ("the same, KL anchor weight 1 (round 2)", ROUND2),
    ("the same, KL weight 0.5", "lora-r16-round2-kl0.5"),
    ("third round, 2,000 prompts, KL anchor", "lora-r16-round3-mixed-kl1"),
    ("the same, on-policy (round 2's trajectories)", "lora-r16-onpolicy-kl1"),
    ("the same with 300 anchor texts (round 3)", ROUND3),
    (f"**round 4, noise window 16 (shipped {shipped_when(ROUND4)})**", ROUND4),
]
# round 1's HumanEval and bench-prompt evaluations were run while it shipped, under the package weights' name
ROUND1_FILES = {
    "evaluate-humaneval": "evaluate-humaneval",
    "evaluate-bench-prompts": "evaluate-bench-prompts-lora-r16",
}


def _full_eval(kind: str, run: str | None) -> tuple[Side, Side] | None:
    if run is None:
        return evaluation(f"{kind}-{ROUND4}")
    if run == "lora-r16" and kind in ROUND1_FILES:
        return evaluation(ROUND1_FILES[kind])
    return evaluation(f"{kind}-{run}")


def _bench_fallback(run: str | None) -> str:
    """Round 2's recycling on the bench prompts was timed by a bench, not an evaluation: same prompts, same setting."""
    if run != ROUND2:
        return "not run"
    row = bench_rows(f"{JF}/bench-round2-beside-round3-onpolicy/bench.json")["Jacobi recycling n=8"]
    return f"{row['tokens_per_forward']:.2f} (bench)"


@block("full-evals")
def full_evals(page: Page) -> str:
    rows = [
        "| model | plain, packages 16 | plain n=8, HumanEval | recycling n=8, HumanEval | recycling n=8, bench prompts "
        "| distinct 3-grams, packages / bench / HumanEval | HumanEval canonical NLL vs base |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run in FULL_EVALS:
        pick = 0 if run is None else 1
        packages = _full_eval("evaluate", run)
        humaneval = _full_eval("evaluate-humaneval", run)
        bench = _full_eval("evaluate-bench-prompts", run)
        p = packages[pick] if packages else None
        h = humaneval[pick] if humaneval else None
        b = bench[pick] if bench else None
        distinct = " / ".join(f"{s.distinct:.3f}" if s else "not run" for s in (p, b, h))
        cells = [
            p.tpf("plain") if p else "not run",
            h.tpf("plain") if h else "not run",
            h.tpf("recycling", 2) if h else "not run",
            b.tpf("recycling", 2) if b else _bench_fallback(run),
            distinct,
            f"{h.canonical_ratio:.3f}x" if h else "not run",
        ]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + (
        "\n\nFiles: `evaluate-<run>.json`, `evaluate-humaneval-<run>.json` and `evaluate-bench-prompts-<run>.json` "
        f"under {page.ref(f'{JF}/study.md', 'jacobi-forcing-cpu/')} (round 1's HumanEval and bench-prompt "
        f"evaluations: {page.ref(f'{JF}/evaluate-humaneval.json')} and "
        f"{page.ref(f'{JF}/evaluate-bench-prompts-lora-r16.json')})."
    )


@block("block-sizes")
def block_sizes(page: Page) -> str:
    base8, base16, base32 = (
        base("evaluate-lora-r16-b8-at8"),
        base("evaluate-lora-r16"),
        base("evaluate-lora-r16-b32-at32"),
    )
    rows = [
        "| trained on | evaluated at block | plain tokens/forward | 2 blocks + recycling | distinct 3-grams "
        "| NLL of base answers |",
        "|---|---:|---:|---:|---:|---:|",
        f"| base model (no training) | 8 / 16 / 32 | {base8.tpf('plain')} / {base16.tpf('plain')} / "
        f"{base32.tpf('plain')} | {base8.tpf('both', 2)} / {base16.tpf('both', 2)} / {base32.tpf('both', 2)} | "
        f"{base16.distinct:.3f} | {base16.reference_nll:.3f} |",
    ]
    for label, blocks, names in [
        ("block 8, window 8", "8 / 16", ["evaluate-lora-r16-b8-at8", "evaluate-lora-r16-b8-at16"]),
        ("block 16, window 8 (round 1)", "16", ["evaluate-lora-r16"]),
        ("block 32, window 8", "32 / 16", ["evaluate-lora-r16-b32-at32", "evaluate-lora-r16-b32-at16"]),
        ("block 16, window 16", "16", ["evaluate-lora-r16-w16"]),
    ]:
        sides = [trained(n) for n in names]
        rows.append(
            f"| {label} | {blocks} | {' / '.join(s.tpf('plain') for s in sides)} | "
            f"{' / '.join(s.tpf('both', 2) for s in sides)} | {sides[0].distinct:.3f} | "
            f"{sides[0].reference_nll:.3f} |"
        )
    return "\n".join(rows) + (
        f"\n\nFiles: {page.ref(f'{JF}/evaluate-lora-r16-b8-at8.json')}, "
        f"{page.ref(f'{JF}/evaluate-lora-r16-b8-at16.json')}, {page.ref(f'{JF}/evaluate-lora-r16.json')}, "
        f"{page.ref(f'{JF}/evaluate-lora-r16-b32-at32.json')}, {page.ref(f'{JF}/evaluate-lora-r16-b32-at16.json')}, "
        f"{page.ref(f'{JF}/evaluate-lora-r16-w16.json')}."
    )
