"""The CPU campaign's scaling curve (issue 62): each judged run's held-out tokens per forward against the number of
prompts whose trajectories it trained on, beside the quality bars it met.

Why a curve and not a winner alone: the same recipe at 2,000, 5,000 and every prompt says whether data is the lever
at this model size, which one point cannot. The judge step writes it from the judged rows (`judging.read_judged`)
after every judge, so it grows with the campaign: `scaling.json` (the figures, what the docs render),
`scaling.md` (the table) and `scaling.png` (the curve), in the campaign's results folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPEED_TARGETS = {"plain": 1.6, "both": 4.5, "humaneval-b8-plain": 1.5}
"""Issue 62's targets, each to be met at every quality bar: held-out tokens per forward with plain Jacobi and with 2
blocks + recycling (16 `packages` test prompts, block 16), and plain on 16 HumanEval problems at block 8."""
LABELS = {
    "plain": "plain, block 16",
    "both": "2 blocks + recycling, block 16",
    "humaneval-b8-plain": "HumanEval plain, block 8",
}
FULL_SET = 10_000
"""The x axis runs to the campaign's full set from the first point on, so a partial curve shows how far it has come."""
JUDGE_SET = "judge"
"""The campaign's own held-out plain requests (`judging._set_label` of judge.parquet)."""
SHIPPED_PROMPTS = 2024
"""Prompts the shipped adapter trained on, its place on the x axis (LoRA r16, 250 steps on 2,024 base trajectories of
other prompts: under half an epoch)."""


SHIPPED_RUN = "shipped"
"""The judged name of the adapter the package ships (`cpu_campaign.py judge --run shipped` judges it by the
campaign's protocol): the reference every run has to beat."""


def run_name(variant: str, prompts: int) -> str:
    """A run's name, what its adapter, judge folder and curve point are called: (`lora-r16`, 2000) -> `lora-r16-n2000`
    (`run_size` reads it back)."""
    return f"{variant}-n{prompts}"


def run_size(name: str) -> tuple[str, int]:
    """A run's variant and its number of prompts: `lora-r16-n2000` -> (`lora-r16`, 2000)."""
    variant, _, count = name.rpartition("-n")
    if not variant or not count.isdigit():
        raise ValueError(f"run name {name!r} is not <variant>-n<prompts>, e.g. lora-r16-n2000")
    return variant, int(count)


def _point(row: dict[str, Any], variant: str, count: int) -> dict[str, Any]:
    judged = row["sets"].get(JUDGE_SET)
    return {
        "name": row["name"],
        "variant": variant,
        "prompts": count,
        "tokens_per_forward": {key: row["tokens_per_forward"].get(key) for key in SPEED_TARGETS},
        "bars": row["bars"],
        "judge_loops": None if judged is None else [judged["collapsed"], judged["answers"]],
        "canonical_nll_vs_base": row.get("canonical_nll_vs_base"),
        "lossless": row["lossless"],
    }


def scaling_points(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The curve's points from judged rows: the base (0 prompts) and each variant's run, with the speed settings the
    targets name, the quality bars met, the loops on the judging requests and the HumanEval canonical NLL; and the
    reference point, the shipped adapter as the campaign judged it (`judge --run shipped`; None before), which is not
    on the curve."""
    judged = {row["name"]: row for row in rows}
    shipped = judged.pop(SHIPPED_RUN, None)
    reference = None if shipped is None else _point(shipped, SHIPPED_RUN, SHIPPED_PROMPTS)
    points = [_point(row, *(("base", 0) if row["bars"] is None else run_size(row["name"]))) for row in judged.values()]
    return {"targets": SPEED_TARGETS, "points": points, "reference": reference}


def _figure(value: float | None, target: float | None = None) -> str:
    if value is None:
        return "-"
    return f"**{value:.3f}**" if target is not None and value >= target else f"{value:.3f}"


def markdown(curve: dict[str, Any]) -> str:
    """The curve as a table: a bold figure meets its target (at every quality bar only where bars met is full)."""
    names = " | ".join(LABELS[key] for key in curve["targets"])
    points = curve["points"] + ([curve["reference"]] if curve.get("reference") else [])
    lines = [
        f"| run | prompts | quality bars met | loops on the judging requests | {names} | HumanEval canonical NLL "
        "(x base) | lossless |",
        "|---|---:|---|---:|" + "---:|" * len(curve["targets"]) + "---:|---|",
    ]
    for point in points:
        bars = point["bars"]
        met = "-" if bars is None else f"{bars['met']}/{bars['of']}"
        if bars is not None and bars["failed"]:
            met += f" (not: {', '.join(bars['failed'])})"
        loops = "-" if point["judge_loops"] is None else "{}/{}".format(*point["judge_loops"])
        speeds = " | ".join(
            _figure(point["tokens_per_forward"][key], target if bars is not None else None)
            for key, target in curve["targets"].items()
        )
        nll = "-" if point["canonical_nll_vs_base"] is None else f"{point['canonical_nll_vs_base']:.3f}x"
        lines.append(
            f"| {point['name']} | {point['prompts']:,} | {met} | {loops} | {speeds} | {nll} | {point['lossless']} |"
        )
    targets = ", ".join(f"{LABELS[key]} >= {value}" for key, value in curve["targets"].items())
    note = ""
    if curve.get("reference"):
        note = (
            " shipped: the adapter the package ships, for reference (LoRA r16, 250 steps on 2,024 trajectories of "
            "other prompts, under half an epoch)."
        )
    return "\n".join(lines) + f"\n\nTargets (issue 62), at every quality bar: {targets}.{note}\n"


def plot(curve: dict[str, Any], path: Path) -> Path:
    """One panel per target setting: tokens per forward against prompts trained on, a line per variant (a filled
    marker where every quality bar is met, a hollow one where not), the base dotted and the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hf_jacobi.figures import save_figure

    settings = list(curve["targets"])
    figure, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 3.6))
    base = next((p for p in curve["points"] if p["variant"] == "base"), None)
    variants = sorted({p["variant"] for p in curve["points"]} - {"base"})
    for axis, key in zip(axes, settings, strict=True):
        for variant in variants:
            points = sorted((p for p in curve["points"] if p["variant"] == variant), key=lambda p: p["prompts"])
            points = [p for p in points if p["tokens_per_forward"][key] is not None]
            xs, ys = [p["prompts"] for p in points], [p["tokens_per_forward"][key] for p in points]
            (line,) = axis.plot(xs, ys, "-", label=variant)
            for x, y, p in zip(xs, ys, points, strict=True):
                full = p["bars"]["met"] == p["bars"]["of"]
                axis.plot(x, y, "o", color=line.get_color(), markerfacecolor=line.get_color() if full else "white")
        if base is not None and base["tokens_per_forward"][key] is not None:
            axis.axhline(base["tokens_per_forward"][key], color="grey", linestyle=":", label="base")
        if (shipped := curve.get("reference")) and shipped["tokens_per_forward"][key] is not None:
            axis.axhline(shipped["tokens_per_forward"][key], color="tab:green", linestyle="-.", label="shipped")
        axis.axhline(curve["targets"][key], color="tab:red", linestyle="--", label="target")
        axis.set_xlim(0, 1.05 * max([FULL_SET, *(p["prompts"] for p in curve["points"])]))
        axis.set_title(LABELS[key], fontsize=10)
        axis.set_xlabel("prompts trained on (one epoch)")
        axis.set_ylabel("tokens per forward")
    axes[0].legend(fontsize=8)
    figure.suptitle("CPU campaign: held-out tokens per forward (hollow: a quality bar missed)", fontsize=10)
    return save_figure(figure, path)


def write_curve(rows: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """scaling.json, scaling.md and scaling.png in `folder`, from the judged rows; returns the curve."""
    curve = scaling_points(rows)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scaling.json").write_text(json.dumps(curve, indent=1) + "\n")
    (folder / "scaling.md").write_text(markdown(curve))
    plot(curve, folder / "scaling.png")
    return curve
