"""Measured results as the model card quotes them, read from the bench.json that `hf-jacobi bench` writes.

The card reads the file, not the bench package: publishing then depends on a file format that bench keeps stable rather
than on the benchmark's code, and `hub` never imports `bench`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _spread(row: dict[str, Any], key: str, spec: str, suffix: str = "") -> str:
    """A median with the slowest and fastest round beside it when the run timed several rounds."""
    value = _fmt(row.get(key), spec) + suffix
    spread = row.get(f"{key}_range")
    if row.get("rounds", 1) > 1 and spread:
        value += f" ({format(spread[0], spec)}-{format(spread[1], spec)})"
    return value


def markdown_table(rows: list[dict[str, Any]], metric: str) -> str:
    """One line per setting: the score, tokens per forward, tokens/s with and without the prefill, speedups and how
    many samples were identical to greedy; with several timing rounds, medians with their range."""
    rounds = max((r.get("rounds", 1) for r in rows), default=1)
    median = f" (median of {rounds} rounds, range)" if rounds > 1 else ""
    # at batch > 1 a batch runs as many forwards as its slowest row: shown only where that differs from the rows' sum
    batched = any(r.get("batch_forwards") not in (None, r.get("forwards")) for r in rows)
    lines = [
        f"| setting | {metric} | tokens/forward |{' batch forwards |' if batched else ''} tok/s{median} "
        f"| tok/s excl. prefill | speedup vs AR | speedup vs best AR{median} | identical to greedy |",
        f"|---|---:|---:|{'---:|' if batched else ''}---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        score = "-" if r["score"] is None else f"{100 * r['score']:.1f}%"
        batch_cell = f" {_fmt(r.get('batch_forwards'), 'd')} |" if batched else ""
        lines.append(
            f"| {r['setting']} | {score} | {_fmt(r['tokens_per_forward'], '.2f')} |{batch_cell} "
            f"{_spread(r, 'tokens_per_s', '.1f')} | {_fmt(r['decode_tokens_per_s'], '.1f')} "
            f"| {_fmt(r['speedup_vs_ar'], '.2f')}x | {_spread(r, 'speedup_vs_best_ar', '.2f', 'x')} "
            f"| {r['identical']}/{r['samples']} |"
        )
    return "\n".join(lines)


@dataclass
class BenchResults:
    """One bench run: its summary rows (one per setting), what it ran on and under which command, and its plot.

    Args:
        rows: the "summary" rows of bench.json (setting, score, tokens_per_forward, tokens_per_s, ...).
        meta: the run's "meta" (machine, command, task, metric, batch_size, max_new_tokens).
        notes: caveats the run recorded (e.g. a baseline that could not run).
        plot: bench.png beside the JSON file, when there is one.
    """

    rows: list[dict[str, Any]]
    meta: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    plot: Path | None = None

    @classmethod
    def from_json(cls, path: str | Path) -> BenchResults:
        """Reads a bench.json, naming the file when it is missing or is not one."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"bench results {str(path)!r} do not exist (write them with hf-jacobi bench)")
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            meta, rows = payload["meta"], payload["summary"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{str(path)!r} is not a hf-jacobi bench JSON file ({error})") from None
        plot = path.with_suffix(".png")
        return cls(rows, meta, list(payload.get("notes", [])), plot if plot.is_file() else None)

    def table(self) -> str:
        return markdown_table(self.rows, self.meta.get("metric", "score"))

    def description(self) -> str:
        """What a reader needs to trust the table: the machine, the command, the sample set, what was counted."""
        meta = self.meta
        lines = [
            f"Measured on {meta.get('machine', 'unrecorded hardware')} with `{meta.get('command', 'hf-jacobi bench')}`: "
            f"{meta.get('task', '?')}, {self.rows[0]['samples'] if self.rows else 0} samples, "
            f"batch {meta.get('batch_size', '?')}, at most {meta.get('max_new_tokens', '?')} new tokens; every sample "
            "counted, prefill included in tok/s unless marked."
        ]
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)
