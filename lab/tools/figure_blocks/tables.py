"""The blocks that show results files as a table, listed in docs/results/tables.json by marker name: one renderer per
kind of table (a bench run, a tune run, a training run's held-out curve, HumanEval quality runs, the recipe's A/Bs). Results are data: a new run's table is an
entry in that file, not a function here."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core import RESULTS, Page, block, heldout_curve, load, markdown_table

TABLES: dict[str, dict[str, Any]] = load("tables.json")["tables"]
"""docs/results/tables.json: marker name -> {"kind", "file", the kind's options}."""


def bench_table(page: Page, entry: dict[str, Any]) -> str:
    """A bench run's table (the bench.md beside the file), with the answers that ended in a loop where asked."""
    path = entry["file"]
    table = markdown_table(str(Path(path).with_suffix(".md")))
    if not entry.get("loops", False):
        return table + f"\n\nFile: {page.ref(path)}."
    rows = load(path)["summary"]
    looping = "; ".join(f"{row['setting']} {row['collapsed']} of {row['samples']}" for row in rows)
    return (
        table + f"\n\nAnswers that end in a loop (the last 64 tokens under 40% distinct 4-grams): {looping}. "
        f"File: {page.ref(path)}."
    )


def roofline(path: str) -> str:
    """A tune run's forward costs by width, against a one-token forward."""
    curve = {int(k): v for k, v in load(path)["roofline_seconds"].items()}
    rows = ["| tokens | ms | x one token |", "|---:|---:|---:|"]
    rows += [f"| {n} | {s * 1000:.2f} | {s / curve[1]:.2f} |" for n, s in sorted(curve.items())]
    return "\n".join(rows)


def predictions(path: str, limit: int) -> str:
    """A tune run's best `limit` predictions, against its prediction for greedy."""
    predicted = load(path)["predictions"]
    greedy = next(p["predicted_tokens_per_s"] for p in predicted if p["candidate"] == "greedy")
    rows = [
        "| setting | tokens/forward | mean width | predicted tok/s | vs greedy |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in predicted[:limit]:
        rows.append(
            f"| {p['candidate']} | {p['tokens_per_forward']:.2f} | {p['mean_width']:.1f} | "
            f"{p['predicted_tokens_per_s']:.1f} | {p['predicted_tokens_per_s'] / greedy:.2f}x |"
        )
    return "\n".join(rows)


def tune_table(page: Page, entry: dict[str, Any]) -> str:
    """A tune run's roofline, its five best predictions and its finalists' timings against greedy."""
    path = entry["file"]
    data = load(path)
    timed = "; ".join(
        f"{v['candidate']} {v['speedup']:.2f}x (medians {v['seconds']:.1f} s against {v['greedy_seconds']:.1f} s)"
        for v in data["verified"]
    )
    return (
        roofline(path)
        + "\n\n"
        + predictions(path, 5)
        + f"\n\nTimed against greedy over {data['verified'][0]['rounds']} alternating rounds: {timed}. "
        f"File: {page.ref(path)}."
    )


def heldout_curve_table(page: Page, entry: dict[str, Any]) -> str:
    """A training run's held-out figures step by step (`HeldOutSpeedCallback`), the last tokens per forward bold."""
    rows = [
        f"| step | plain tokens/forward | distinct 3-grams | NLL of the {entry['reference']} model's answers |",
        "|---:|---:|---:|---:|",
    ]
    curve = heldout_curve(entry["file"])
    for i, point in enumerate(curve):
        step = f"0 ({entry['first']})" if point["step"] == 0 else str(point["step"])
        tpf = f"{point['heldout/plain_tokens_per_forward']:.3f}"
        if i == len(curve) - 1:
            tpf = f"**{tpf}**"
        rows.append(
            f"| {step} | {tpf} | {point['heldout/distinct_3grams']:.3f} | {point['heldout/reference_nll']:.3f} |"
        )
    note = f" ({entry['note']})" if "note" in entry else ""
    return "\n".join(rows) + f"\n\nFile: {page.ref(entry['file'])}{note}."


def humaneval_quality_table(page: Page, entry: dict[str, Any]) -> str:
    """HumanEval as users ask it, model by model, from one or more `hf-jacobi quality --sets humaneval` runs of the
    same protocol (`files`; a model in several is read from the first; `models` picks and orders them): pass@1, the
    answers that end in a loop and the set's bars, with the held-out tokens per forward of each speed setting where
    `speed` asks for them."""
    reports = [load(path) for path in entry["files"]]
    models: dict[str, dict[str, Any]] = {}
    for report in reports:
        for model in report["models"]:
            models.setdefault(model["name"], {**model, "bars": report["targets_met"].get(model["name"])})
    names = entry.get("models") or list(models)
    speed = [s["name"] for s in models[names[0]]["speed"]] if entry.get("speed") else []
    lines = [
        "| model |"
        + "".join(f" held-out {name} tokens/forward |" for name in speed)
        + " pass@1 | answers collapsed into a loop | bars met (loops, pass@1) |",
        "|---|" + "---:|" * (len(speed) + 3),
    ]
    for name in names:
        model = models[name]
        figures, bars = model["quality"]["humaneval"], model["bars"]
        met = "-" if bars is None else f"{sum(bars.values())} of {len(bars)}"
        tpf = {s["name"]: s["tokens_per_forward"] for s in model["speed"]}
        lines.append(
            f"| {name} |"
            + "".join(f" {tpf[setting]:.3f} |" for setting in speed)
            + f" {figures['code_passed']} of {figures['answers']} | {figures['collapsed']} | {met} |"
        )
    protocol = reports[0]["protocol"]
    where = f"; held-out tokens per forward on {protocol['speed_prompts']}" if speed else ""
    files = ", ".join(page.ref(path) for path in entry["files"])
    return (
        "\n".join(lines)
        + f"\n\nGreedy, {protocol['dtype']}, {protocol['max_new_tokens']} new tokens, batch {protocol['batch_size']}"
        f"{where}. {'Files' if len(entry['files']) > 1 else 'File'}: {files}."
    )


def recipe_ab_table(page: Page, entry: dict[str, Any]) -> str:
    """The recipe's A/Bs (`lab/recipe_ab.py table`): the ab.md it writes from the ab.json named, and its plot of the
    probe's curve of every arm."""
    path = Path(entry["file"])
    text = (RESULTS / path.with_suffix(".md")).read_text(encoding="utf-8").strip()
    png = str(path.with_suffix(".png"))
    return (
        text + f"\n\n![the probe's held-out curve of every arm]({page.url(png)})\n\n"
        f"Files: {page.ref(str(path))}, {page.ref(str(path.with_suffix('.md')))}, {page.ref(png)}."
    )


RENDERERS: dict[str, Callable[[Page, dict[str, Any]], str]] = {
    "humaneval-quality": humaneval_quality_table,
    "bench": bench_table,
    "tune": tune_table,
    "heldout-curve": heldout_curve_table,
    "recipe-ab": recipe_ab_table,
}


def files_of(kind: str) -> list[str]:
    """The results files of every table of `kind`."""
    return [entry["file"] for entry in TABLES.values() if entry["kind"] == kind and "file" in entry]


for _name, _entry in TABLES.items():
    if _entry["kind"] not in RENDERERS:
        raise ValueError(f"tables.json: {_name!r} has kind {_entry['kind']!r}; known kinds: {sorted(RENDERERS)}")
    block(_name)(functools.partial(lambda page, render, entry: render(page, entry),
                                   render=RENDERERS[_entry["kind"]], entry=_entry))  # fmt: skip
