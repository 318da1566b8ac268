"""The CPU campaign's scaling curve: each judged run's held-out tokens per forward against the number of
prompts whose trajectories it trained on, beside the quality bars it met.

Why a curve and not a winner alone: the same recipe at 2,000, 5,000 and every prompt says whether data is the lever
at this model size, which one point cannot. The judge step writes it from the judged rows (`judging.read_judged`)
after every judge, so it grows with the campaign: `scaling.json` (the figures, what the docs render),
`scaling.md` (the table) and `scaling.png` (the curve), in the campaign's results folder. Each variant with two
sizes or more gets a trend (`trend`): its gain per doubling of the data, and how much data would meet each target at
that rate, which is what "is data the lever" asks.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from campaign.judging import JUDGE_SPEED_SETTINGS

SPEED_TARGETS = {"plain": 1.6, "both": 4.5, "humaneval-b8-plain": 1.5}
"""The campaign's targets, each to be met at every quality bar: held-out tokens per forward with plain Jacobi and with 2
blocks + recycling (16 `packages` test prompts, block 16), and plain on 16 HumanEval problems at block 8."""
JUDGE_SPEEDS = tuple(JUDGE_SPEED_SETTINGS.values())
"""Settings measured without a target: tokens per forward on 32 of the judging requests (`judging.JUDGE_SPEED`), the
kind of prompt half the training data is, where the targets' `packages` prompts are code."""
LABELS = {
    "plain": "plain, block 16",
    "both": "2 blocks + recycling, block 16",
    "humaneval-b8-plain": "HumanEval plain, block 8",
    "judge-b16-plain": "judging requests plain, block 16",
    "judge-b16-both": "judging requests 2 blocks + recycling",
}
FULL_SET = 10_000
"""The x axis runs to the campaign's full set from the first point on, so a partial curve shows how far it has come."""
JUDGE_SET = "judge"
"""The campaign's own held-out plain requests (`judging._set_label` of judge.parquet)."""
SHIPPED_PROMPTS = 2024
"""Prompts that reference adapter trained on, its place on the x axis (LoRA r16, 250 steps on 2,024 base trajectories of
other prompts: under half an epoch)."""
SHIPPED_TRAINING = {"steps": 250, "rows_per_step": 4, "packages_prompts": 1800}
"""How that reference adapter trained (its model card then): 250 optimizer steps of 4 rows, on 1,800 `packages` prompts of
its 2,024, the kind of the targets' plain and 2-blocks test prompts."""


SHIPPED_RUN = "shipped"
"""The judged name of the adapter the package shipped while the campaign ran (`base-scale-kl10-step250`;
`cpu_campaign.py judge --run shipped` judged it by the campaign's protocol): the reference every run had
to beat. The campaign's `lora-r16-kl30-n9999` replaced it in the package."""
SHIPPED_SHA256 = "aa58b601784e43336da00aa0abe8acd32a2355ecaa5fdb8b4cb7aa1444f58c73"
"""SHA-256 of that reference's adapter_model.safetensors: judging `shipped` refuses other weights."""
SHIPPED_COMMIT = "7714017"
"""The last commit whose package held the reference's weights."""


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


def settings() -> list[str]:
    """Every setting on the curve: the targets' first, then JUDGE_SPEEDS."""
    return [*SPEED_TARGETS, *JUDGE_SPEEDS]


TRAINING_KEYS = ("steps", "rows_per_step", "packages_prompts")
"""What a point records of its training beside its prompts (None where unknown): optimizer steps, rows a step, and
how many of its prompts are `packages` prompts. The points differ in these as well as in data: a run's epoch takes
more steps the more prompts it has, and the targets' plain and 2-blocks prompts are `packages` prompts, which the
reference adapter trained on almost alone and the campaign's prompt set holds a third of."""


def steps_label(training: dict[str, Any]) -> str:
    """A training record's optimizer steps as the tables print them: `125 x 32` (steps x rows a step), the steps alone
    where the rows are unknown, `-` without steps."""
    if training.get("steps") is None:
        return "-"
    rows = training.get("rows_per_step")
    return f"{training['steps']} x {rows}" if rows else str(training["steps"])


def _point(row: dict[str, Any], variant: str, count: int, training: dict[str, Any] | None) -> dict[str, Any]:
    judged = row["sets"].get(JUDGE_SET)
    return {
        "name": row["name"],
        "variant": variant,
        "prompts": count,
        **{key: (training or {}).get(key) for key in TRAINING_KEYS},
        "tokens_per_forward": {key: row["tokens_per_forward"].get(key) for key in settings()},
        "bars": row["bars"],
        "judge_loops": None if judged is None else [judged["collapsed"], judged["answers"]],
        "canonical_nll_vs_base": row.get("canonical_nll_vs_base"),
        "lossless": row["lossless"],
    }


def scaling_points(rows: list[dict[str, Any]], training: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The curve's points from judged rows: the base (0 prompts) and each variant's run, with the speed settings the
    targets name, the quality bars met, the loops on the judging requests and the HumanEval canonical NLL, and what
    `training` (by run name: TRAINING_KEYS) says of its training; and the reference point, the adapter shipped then as
    the campaign judged it (`judge --run shipped`; None before), which is not on the curve."""
    training = training or {}
    judged = {row["name"]: row for row in rows}
    shipped = judged.pop(SHIPPED_RUN, None)
    reference = None if shipped is None else _point(shipped, SHIPPED_RUN, SHIPPED_PROMPTS, SHIPPED_TRAINING)
    points = [
        _point(row, *(("base", 0) if row["bars"] is None else run_size(row["name"])), training.get(row["name"]))
        for row in judged.values()
    ]
    curve = {"targets": SPEED_TARGETS, "points": points, "reference": reference}
    return {**curve, "trends": trends(curve)}


def trend(points: list[dict[str, Any]], key: str, target: float | None) -> dict[str, Any] | None:
    """The least-squares line of one variant's tokens per forward (setting `key`) against log2 of its prompts, and
    the prompts at which that line meets `target` (None where it never does: a slope <= 0; or without a target). Why
    log2: a data lever reads as a gain per doubling of the data, and the answer to "is data the lever" is how many
    doublings the target is away at the measured rate. An extrapolation from few points, said as such where it is printed; None below
    two distinct sizes."""
    pairs = sorted(
        {
            p["prompts"]: p["tokens_per_forward"][key] for p in points if p["tokens_per_forward"].get(key) is not None
        }.items()
    )
    if len(pairs) < 2:
        return None
    slope, intercept = statistics.linear_regression([math.log2(n) for n, _ in pairs], [value for _, value in pairs])
    meets = slope > 0 and target is not None
    doublings = (target - intercept) / slope if meets else None  # log2 of the prompts where the line meets it
    return {
        "sizes": [prompts for prompts, _ in pairs],
        "per_doubling": slope,
        "at_one_prompt": intercept,
        "prompts_for_target": None if doublings is None or doublings > 60 else 2**doublings,  # 2**60 ~ 1e18
    }


def trends(curve: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`trend` of every variant with two or more sizes on the curve, for each setting (`settings`)."""
    variants = sorted({p["variant"] for p in curve["points"]} - {"base"})
    found = {}
    for variant in variants:
        points = [p for p in curve["points"] if p["variant"] == variant]
        lines = {key: trend(points, key, curve["targets"].get(key)) for key in settings()}
        if any(line is not None for line in lines.values()):
            found[variant] = lines
    return found


def _count(value: float) -> str:
    """A large count as a reader says it, to three figures: 472,132,036 -> "472 million"."""
    for size, word in ((1e9, " billion"), (1e6, " million"), (1.0, "")):
        if value >= size:
            return f"{float(f'{value / size:.3g}'):,g}{word}"
    return f"{value:.3g}"


def _trend_sentence(curve: dict[str, Any]) -> str:
    """The trends in words, as an extrapolation: per doubling of the prompts, and where the target would fall."""
    parts = []
    for variant, lines in curve.get("trends", {}).items():
        said = []
        for key, line in lines.items():
            if line is None:
                continue
            where = (
                ""
                if key not in curve["targets"]
                else " (never at that rate)"
                if line["prompts_for_target"] is None
                else f" (the target at ~{_count(line['prompts_for_target'])} prompts at that rate)"
            )
            said.append(f"{LABELS[key]} {line['per_doubling']:+.3f} per doubling{where}")
        sizes = next(line["sizes"] for line in lines.values() if line is not None)
        parts.append(
            f" Trend of {variant} over its {len(sizes)} sizes ({', '.join(f'{n:,}' for n in sizes)}; least squares "
            f"in log2 of the prompts, an extrapolation): {'; '.join(said)}."
        )
    return "".join(parts)


def _figure(value: float | None, target: float | None = None) -> str:
    if value is None:
        return "-"
    return f"**{value:.3f}**" if target is not None and value >= target else f"{value:.3f}"


def markdown(curve: dict[str, Any]) -> str:
    """The curve as a table: a bold figure meets its target (at every quality bar only where bars met is full); then
    the targets and each variant's trend, in one paragraph (the docs read its last line)."""
    keys = settings()
    names = " | ".join(LABELS[key] for key in keys)
    points = curve["points"] + ([curve["reference"]] if curve.get("reference") else [])
    lines = [
        f"| run | prompts | `packages` prompts | steps x rows | quality bars met | loops on the judging requests | "
        f"{names} | HumanEval canonical NLL (x base) | lossless |",
        "|---|---:|---:|---:|---|---:|" + "---:|" * len(keys) + "---:|---|",
    ]
    for point in points:
        bars = point["bars"]
        met = "-" if bars is None else f"{bars['met']}/{bars['of']}"
        if bars is not None and bars["failed"]:
            met += f" (not: {', '.join(bars['failed'])})"
        loops = "-" if point["judge_loops"] is None else "{}/{}".format(*point["judge_loops"])
        speeds = " | ".join(
            _figure(point["tokens_per_forward"].get(key), curve["targets"].get(key) if bars is not None else None)
            for key in keys
        )
        nll = "-" if point["canonical_nll_vs_base"] is None else f"{point['canonical_nll_vs_base']:.3f}x"
        packages = "-" if point.get("packages_prompts") is None else f"{point['packages_prompts']:,}"
        steps = steps_label(point)
        lines.append(
            f"| {point['name']} | {point['prompts']:,} | {packages} | {steps} | {met} | {loops} | {speeds} | {nll} | "
            f"{point['lossless']} |"
        )
    targets = ", ".join(f"{LABELS[key]} >= {value}" for key, value in curve["targets"].items())
    note = ""
    if curve.get("reference"):
        note = (
            " shipped: the adapter the package shipped while the campaign ran (`base-scale-kl10-step250`), for "
            "reference (LoRA r16, 250 steps of 4 rows on 2,024 trajectories of other prompts, 1,800 "
            "of them `packages` prompts, under half an epoch)."
        )
    return "\n".join(lines) + f"\n\nTargets, at every quality bar: {targets}.{note}{_trend_sentence(curve)}\n"


def plot(curve: dict[str, Any], path: Path) -> Path:
    """One panel per setting (`settings`): tokens per forward against prompts trained on, a line per variant (a
    filled marker where every quality bar is met, a hollow one where not) with its log2 trend to the full set (thin
    dots), the base dotted and the target, where the setting has one, dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = settings()
    columns = 3
    rows = -(-len(keys) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False)
    axes, spare = list(grid.flat)[: len(keys)], list(grid.flat)[len(keys) :]
    base = next((p for p in curve["points"] if p["variant"] == "base"), None)
    variants = sorted({p["variant"] for p in curve["points"]} - {"base"})
    for axis, key in zip(axes, keys, strict=True):
        for variant in variants:
            points = sorted((p for p in curve["points"] if p["variant"] == variant), key=lambda p: p["prompts"])
            points = [p for p in points if p["tokens_per_forward"].get(key) is not None]
            xs, ys = [p["prompts"] for p in points], [p["tokens_per_forward"][key] for p in points]
            (line,) = axis.plot(xs, ys, "-", label=variant)
            if (fit := curve.get("trends", {}).get(variant, {}).get(key)) is not None:
                ends = [min(fit["sizes"]), FULL_SET]
                fitted = [fit["at_one_prompt"] + fit["per_doubling"] * math.log2(x) for x in ends]
                axis.plot(ends, fitted, ":", color=line.get_color(), linewidth=1)
            for x, y, p in zip(xs, ys, points, strict=True):
                full = p["bars"]["met"] == p["bars"]["of"]
                axis.plot(x, y, "o", color=line.get_color(), markerfacecolor=line.get_color() if full else "white")
        if base is not None and base["tokens_per_forward"].get(key) is not None:
            axis.axhline(base["tokens_per_forward"][key], color="grey", linestyle=":", label="base")
        if (shipped := curve.get("reference")) and shipped["tokens_per_forward"].get(key) is not None:
            axis.axhline(shipped["tokens_per_forward"][key], color="black", linestyle="-.", label="shipped before")
        if not any(p["tokens_per_forward"].get(key) is not None for p in curve["points"]):
            axis.text(0.5, 0.5, "not measured yet", transform=axis.transAxes, ha="center", color="grey")
        if key in curve["targets"]:
            axis.axhline(curve["targets"][key], color="tab:red", linestyle="--", label="target")
        axis.set_xlim(0, 1.05 * max([FULL_SET, *(p["prompts"] for p in curve["points"])]))
        axis.set_title(LABELS[key], fontsize=10)
        axis.set_xlabel("prompts trained on (one epoch)")
        axis.set_ylabel("tokens per forward")
    for axis in spare:
        axis.axis("off")
    (spare[0] if spare else axes[0]).legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="center")
    figure.suptitle("CPU campaign: held-out tokens per forward (hollow: a quality bar missed)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def write_curve(
    rows: list[dict[str, Any]], folder: Path, training: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """scaling.json, scaling.md and scaling.png in `folder`, from the judged rows and each run's `training`
    (`scaling_points`); returns the curve."""
    curve = scaling_points(rows, training)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scaling.json").write_text(json.dumps(curve, indent=1) + "\n")
    (folder / "scaling.md").write_text(markdown(curve))
    plot(curve, folder / "scaling.png")
    return curve
