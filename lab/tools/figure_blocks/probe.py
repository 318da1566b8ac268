"""The acceptance probe: its prediction of plain Jacobi's tokens per forward against the measured figure over the
committed adapters (lab/probe_validation.py), and the overfit check on the embedded model (lab/overfit_check.py)."""

from __future__ import annotations

from .core import RESULTS, Page, block, load

VALIDATION = "probe/validation.json"


@block("probe-validation")
def probe_validation(page: Page) -> str:
    """One row per model: the probe on the base's states and on its own, beside measured plain Jacobi; the rank
    correlations under the table."""
    if not (RESULTS / VALIDATION).is_file():
        return "not measured yet"
    report = load(VALIDATION)
    lines = [
        "| model | probe on the base's states: tokens/iteration (depth 0, 1, 2 rates) | agreement with the base's "
        "answers | block-by-block on its own states: tokens/iteration | measured plain Jacobi: tokens/forward |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, row in report["models"].items():
        base, own = row["probe_base_states"], row["own_states"]
        rates = ", ".join(f"{rate:.2f}" for rate in base["rates_by_depth"][:3])
        lines.append(
            f"| {label} | {base['tokens_per_iteration']:.3f} ({rates}) | {base['fixed_point_agreement']:.3f} | "
            f"{own['tokens_per_iteration']:.3f} | {row['plain_tokens_per_forward']:.3f} |"
        )
    return (
        "\n".join(lines)
        + f"\n\nCorrelation with measured plain Jacobi over the {len(report['models'])} models, rank (Spearman) and "
        f"linear (Pearson): the probe on the base's states {report['spearman_base_states']:.2f} and "
        f"{report['pearson_base_states']:.3f}; block-by-block decoding on each model's own states "
        f"{report['spearman_own_states']:.2f} and {report['pearson_own_states']:.3f}. Prompts: {report['prompts']}, block {report['block_size']}, "
        f"{report['max_new_tokens']} new tokens, float32. File: {page.ref(VALIDATION)}."
    )


@block("probe-overfit")
def probe_overfit(page: Page) -> str:
    """One row per run of the overfit check (every probe/overfit*.json, by epochs): the figures before and after
    training, its settings under the table."""
    paths = sorted((RESULTS / "probe").glob("overfit*.json"))
    if not paths:
        return "not measured yet"
    reports = sorted(((p, load(str(p.relative_to(RESULTS)))) for p in paths), key=lambda r: r[1]["settings"]["epochs"])
    lines = [
        "| epochs | steps | depth-0 rate on the training states | probe: tokens/iteration on them | plain Jacobi: "
        "tokens/forward on the same prompts | identical to greedy | probe on its own states (depth 0) | file |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for path, report in reports:
        before, after, settings = report["before"], report["after"], report["settings"]
        own = after.get("probe_own_states", {})
        steps = round(settings["epochs"] * settings["prompts"] * settings["drafts"] / settings["train_batch_size"])
        lines.append(
            f"| {settings['epochs']:g} | {steps} | {before['probe']['rates_by_depth'][0]:.2f} -> "
            f"{after['probe']['rates_by_depth'][0]:.2f} | {before['probe']['tokens_per_iteration']:.2f} -> "
            f"{after['probe']['tokens_per_iteration']:.2f} | {before['plain']['tokens_per_forward']:.2f} -> "
            f"{after['plain']['tokens_per_forward']:.2f} | {after['plain']['identical_to_greedy']} of "
            f"{after['plain']['prompts']} | {own.get('tokens_per_iteration', float('nan')):.2f} "
            f"({(own.get('rates_by_depth') or [float('nan')])[0]:.2f}) | {page.ref(str(path.relative_to(RESULTS)))} |"
        )
    settings = reports[0][1]["settings"]
    return (
        "\n".join(lines)
        + f"\n\n{settings['prompts']} `packages` training prompts x {settings['drafts']} drafts, block "
        f"{settings['block_size']}, {settings['train_batch_size']} rows a step at learning rate "
        f"{settings['learning_rate']} (constant; full fine-tune, no anchor, every block noised); a longer run resumes "
        "the shorter one's last checkpoint."
    )
