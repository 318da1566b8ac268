"""Summaries of a bench run: one row per setting, as JSON, a Markdown table and a plot against block size; and the
Markdown table and machine description every benchmark's output uses.

Totals are ratios of sums over every sample (tokens / forwards, tokens / seconds), so long outputs weigh as much as
the time they take, and nothing is averaged over a chosen subset.
"""

from __future__ import annotations

import json
import platform
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..atomic import write_text
from ..card import markdown_table
from ..decoding.cpu_info import bfloat16_units, model_name
from .runner import BenchRun
from .settings import AR_COMPILE_MODE, AR_COMPILED, COMPILED, EAGER, JACOBI, STATIC

__all__ = [
    "machine_description",
    "markdown",
    "markdown_table",
    "notes",
    "plot",
    "summarize",
    "write_json",
    "write_partial",
]


def machine_description(device: str | torch.device | None = None) -> str:
    """The hardware the figures belong to, in words, for tables that are read away from the run; `device` is where
    the model ran (default: the GPU when there is one)."""
    on_gpu = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    if on_gpu:
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    model = _cpu_model_name()
    if model and model != cpu:
        cpu = f"{model} ({cpu})"
    # one model name covers CPUs with and without AMX, and bfloat16 speeds differ between them several times over
    units = bfloat16_units() or "none"
    return f"CPU {cpu}, bfloat16 units: {units}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def _cpu_model_name(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The processor's model name where Linux tells it: two machines of one kind can differ in it, and CPU speeds
    compare only within one machine (greedy's one-token forwards in particular move with it)."""
    return model_name(cpuinfo)


def summarize(run: BenchRun) -> list[dict[str, Any]]:
    """One row per setting. Rates are the median over timing rounds (one round: that round), with the slowest and
    fastest round beside them; speedups are medians of the per-round ratios, so a slow round hits both sides alike."""
    rounds = sorted({t.round for t in run.timings}) or [0]
    rows = []
    per_round: list[list[float]] = []
    for setting in run.settings:
        samples = [s for s in run.samples if s.setting == setting.name]
        tokens = sum(s.new_tokens for s in samples)
        forwards = sum(s.forwards for s in samples)
        slowest: dict[int, int] = {}  # batch -> its slowest row's forwards: the forwards the batch ran
        for s in samples:
            slowest[s.batch] = max(slowest.get(s.batch, 0), s.forwards)
        timings = [t for t in run.timings if t.setting == setting.name]
        seconds = [sum(t.seconds for t in timings if t.round == r) for r in rounds]
        decode = [sum(max(t.seconds - t.prefill_s, 1e-9) for t in timings if t.round == r) for r in rounds]
        rates = [tokens / s for s in seconds] if timings and all(seconds) else []
        per_round.append(rates)
        scored = [s for s in samples if s.correct is not None]
        differing = [s.common_prefix for s in samples if not s.identical]
        rows.append(
            {
                "setting": setting.name,
                "kind": setting.kind,
                "block_size": setting.block_size,
                "variant": setting.variant,
                "path": setting.path,
                "samples": len(samples),
                "score": sum(bool(s.correct) for s in scored) / len(scored) if scored else None,
                "new_tokens": tokens,
                "forwards": forwards,
                "tokens_per_forward": tokens / forwards if forwards else None,
                "batch_forwards": sum(slowest.values()),
                "rounds": len(rounds),
                "seconds": statistics.median(seconds) if timings else 0.0,
                "tokens_per_s": statistics.median(rates) if rates else None,
                "tokens_per_s_range": [min(rates), max(rates)] if rates else None,
                "decode_tokens_per_s": statistics.median(tokens / d for d in decode) if timings else None,
                "ended_on_eos": sum(s.ended_on_eos for s in samples),
                "identical": sum(s.identical for s in samples),
                "differing_common_prefix": statistics.mean(differing) if differing else None,
                "collapsed": sum(s.collapsed for s in samples),
            }
        )
    ar_rates = per_round[0]
    ar_indices = [i for i, st in enumerate(run.settings) if st.is_ar and per_round[i]]
    best_ar = max(ar_indices, key=lambda i: statistics.median(per_round[i]), default=None)
    for row, rates in zip(rows, per_round, strict=True):
        for key, base in (
            ("speedup_vs_ar", ar_rates),
            ("speedup_vs_best_ar", per_round[best_ar] if best_ar is not None else []),
        ):
            ratios = [r / b for r, b in zip(rates, base, strict=True)] if rates and base and all(base) else []
            row[key] = statistics.median(ratios) if ratios else None
            row[f"{key}_range"] = [min(ratios), max(ratios)] if ratios else None
    return rows


def markdown(headers: Sequence[str], rows: Iterable[Sequence[Any]], aligns: Sequence[str] | None = None) -> str:
    """A Markdown table; `aligns` holds one separator cell per column ("---", "---:" or ":---:"), left by default."""
    separators = aligns if aligns is not None else ["---"] * len(headers)
    lines = [f"| {' | '.join(headers)} |", f"|{'|'.join(separators)}|"]
    lines += [f"| {' | '.join(str(cell) for cell in row)} |" for row in rows]
    return "\n".join(lines)


def notes(run: BenchRun, rows: list[dict[str, Any]], batch_size: int, max_new_tokens: int) -> str:
    """What a reader needs to interpret the table: machine, sample set, what is counted."""
    samples = rows[0]["samples"] if rows else 0
    eos = rows[0]["ended_on_eos"] if rows else 0
    lines = [
        f"{run.task}: {samples} samples ({eos} ended on EOS, the rest on a stop string or the {max_new_tokens}-token "
        f"budget; all are counted), batch {batch_size}, greedy, on {machine_description()}.",
        "tokens/forward = new tokens / decoding forwards (prefill excluded; AR needs one per token after the first). "
        "tok/s counts the prefill unless marked. identical = samples whose tokens equal plain AR's.",
    ]
    if rows:
        lines.append(
            f"{rows[0]['collapsed']} of {samples} answers of the first setting collapsed into a loop (the last 64 tokens "
            "under 40% distinct 4-grams): loops are the cheapest tokens to accept, so read speed beside this."
        )
    if batch_size > 1:
        lines.append(
            "batch forwards = the forwards each batch ran, i.e. its slowest row's, summed over batches: a batch decodes "
            "until its last row is done, so wall time follows batch forwards rather than tokens/forward."
        )
    if rows and rows[0].get("rounds", 1) > 1:
        lines.append(
            f"Timed {rows[0]['rounds']} rounds over the whole set, settings alternating within each batch: tok/s is "
            "the median round (slowest-fastest in brackets), speedups the median of the per-round ratios."
        )
    if any(r.get("differing_common_prefix") is not None for r in rows):
        lines.append(
            "Where a setting's answers differ from plain AR's (only in a reduced precision: in float32 every Jacobi "
            "setting is exact), bench.json's differing_common_prefix is the mean number of tokens they share with "
            "greedy's before departing."
        )
    if any(r.get("path") == COMPILED for r in rows):
        lines.append(
            "(compiled static cache) = the same Jacobi setting on a static cache with its verify forward compiled "
            f"(transformers' default CompileConfig, mode {AR_COMPILE_MODE!r}), each forward padded to the narrowest of "
            "a few fixed widths that fits (jacobi_static_widths: 5 on a CPU and 1 on an accelerator unless the name "
            "says); the warm-up builds its graphs untimed."
        )
    if any(r.get("path") == STATIC for r in rows):
        lines.append(
            "(eager static cache) = the same Jacobi setting on the static cache, padded as the compiled path is, with "
            "its verify forward not compiled: what the compiled path costs without compilation."
        )
    if any(setting.kind == AR_COMPILED for setting in run.settings):
        lines.append(
            f"AR (static cache + compile) = greedy on a static cache with torch.compile mode {AR_COMPILE_MODE!r} "
            "(transformers' default for a compiled cache: CUDA graphs on a GPU), one cache kept across its calls and "
            "reset before each, as a server keeps it (a new cache per call would make a GPU capture its graph again)."
        )
    compiling = {setting.name for setting in run.settings if setting.compiled}
    compiled = {name: seconds for name, seconds in run.warmup_seconds.items() if name in compiling}
    if compiled:  # what a user's first call on those paths waits before its first token
        lines.append(
            "Untimed warm-up (compiling, at the shapes the timing uses): "
            + "; ".join(f"{name} {seconds:.0f} s" for name, seconds in compiled.items())
            + "."
        )
    lines += [f"Note: {n}" for n in run.notes]
    return "\n".join(lines)


def _record(run: BenchRun, meta: dict[str, Any], summary: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON form of a run, finished (with its summary rows) or in progress (without)."""
    record: dict[str, Any] = {"meta": {"machine": machine_description(), **meta}, "notes": run.notes}
    record["warmup_seconds"] = run.warmup_seconds
    if summary is not None:
        record["summary"] = summary
    record["samples"] = [asdict(s) for s in run.samples]
    record["timings"] = [asdict(t) for t in run.timings]
    return record


def write_json(path: Path, run: BenchRun, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    path.write_text(json.dumps(_record(run, meta, rows), indent=2), encoding="utf-8")


def write_partial(path: Path, run: BenchRun, meta: dict[str, Any]) -> None:
    """What a run has measured so far (unscored samples and timings of the batches done), replaced atomically after
    each batch: a run stopped by a time limit still leaves its figures. No summary: a round in progress would give
    rates over a part of the set."""
    batches_done = len({(t.round, t.batch) for t in run.timings})
    write_text(path, json.dumps(_record(run, {"complete": False, "batches_done": batches_done, **meta}), indent=2))


def plot(path: Path, rows: list[dict[str, Any]], title: str) -> None:
    """Tokens per forward and speedup over plain AR against block size, one line per Jacobi variant; the AR
    baselines are horizontal lines, since they have no block."""
    try:
        import matplotlib
    except ImportError as error:
        raise RuntimeError("plots need matplotlib: pip install 'hf-jacobi[bench]'") from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jacobi = [r for r in rows if r["kind"] == JACOBI]
    fig, (tpf_ax, speed_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, how in dict.fromkeys((r["variant"], r.get("path", EAGER)) for r in jacobi):
        points = sorted(
            ((r["block_size"], r) for r in jacobi if (r["variant"], r.get("path", EAGER)) == (variant, how)),
            key=lambda point: point[0],
        )
        blocks = [b for b, _ in points]
        label = variant if how == EAGER else f"{variant} ({how})"
        tpf_ax.plot(blocks, [r["tokens_per_forward"] for _, r in points], marker="o", label=label)
        speed_ax.plot(blocks, [r["speedup_vs_ar"] for _, r in points], marker="o", label=label)
    for r in rows:
        if r["kind"] != JACOBI and r["speedup_vs_ar"] is not None:
            speed_ax.axhline(r["speedup_vs_ar"], linestyle="--", linewidth=1, color="gray")
            speed_ax.annotate(r["setting"], (0.01, r["speedup_vs_ar"]), xycoords=("axes fraction", "data"), fontsize=7)
    tpf_ax.axhline(1.0, linestyle="--", linewidth=1, color="gray")
    blocks = sorted({r["block_size"] for r in jacobi})
    for ax, label in ((tpf_ax, "tokens per forward"), (speed_ax, "tokens/s vs AR (prefill incl.)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(blocks, [str(b) for b in blocks])
        ax.minorticks_off()
        ax.set_xlabel("block size n")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if jacobi:
            ax.legend(title="Jacobi variant", fontsize=8)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def save_figure(figure: Any, path: str | Path) -> Path:
    """Lays out `figure`, writes it to `path` (creating its folder) at 120 dpi, closes it and returns the path."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
