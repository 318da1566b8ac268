"""The adapter shipped before against CUDA-graph greedy on one GPU (the run `gpu-graph-greedy` of
docs/results/labels.json): all four entries, bfloat16 and float32 at batch 1 and 8.

Two of the four bench.json files came back; every entry's log holds the table `hf-jacobi bench` printed, so an entry
without its JSON is read from that table (the JSON, where it exists, is checked against its log's table)."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from .core import RESULTS, Page, block, gpu_model, load, run_folder

RUN = run_folder("gpu-graph-greedy")
ENTRIES = (("bfloat16", 1), ("float32", 1), ("bfloat16", 8), ("float32", 8))
GREEDY = "AR (static cache + compile)"
BOTH = "Jacobi both n=16 (compiled static cache)"
DEFAULT = "Jacobi default (block 8, pool 4, compiled static cache)"
COLUMNS = ("setting", "tokens/forward", "tok/s", "speedup vs best AR", "identical to greedy")  # read from a log


@dataclass(frozen=True)
class Row:
    """One setting of one entry: what the figures use, alike from a bench.json summary row or a printed table row."""

    tokens_per_forward: float
    tokens_per_s: float
    speedup: float  # against the fastest greedy baseline, compiled greedy (CUDA graphs)
    identical: int  # samples whose tokens equal plain `generate`'s
    samples: int

    @property
    def printed(self) -> tuple[str, str]:
        """Its tok/s and speedup as `hf-jacobi bench` prints them, to match a JSON row with its log's."""
        return f"{self.tokens_per_s:.1f}", f"{self.speedup:.2f}"

    @property
    def per_token(self) -> float:
        """The share of its tokens per forward a setting turns into wall time (speedup / tokens per forward)."""
        return self.speedup / self.tokens_per_forward


def _log_name(dtype: str, batch: int) -> str:
    return f"{RUN}/decode-{dtype}-b{batch}.log"


def _json_name(dtype: str, batch: int) -> str:
    return f"{RUN}/bench-{dtype}-b{batch}.json"


@functools.cache
def _log(dtype: str, batch: int) -> list[str]:
    return (RESULTS / _log_name(dtype, batch)).read_text(encoding="utf-8").splitlines()


def log_table(dtype: str, batch: int) -> dict[str, Row]:
    """The settings of the table an entry's log printed, by name; a missing table or column is an error."""
    name = _log_name(dtype, batch)
    lines = _log(dtype, batch)
    heads = [i for i, line in enumerate(lines) if re.match(r"\|\s*setting\s*\|", line)]
    if len(heads) != 1:
        raise ValueError(f"{name}: expected one printed bench table, found {len(heads)}")
    header = [c.strip() for c in lines[heads[0]].strip().strip("|").split("|")]
    missing = set(COLUMNS) - set(header)
    if missing:
        raise ValueError(f"{name}: the printed table lacks the columns {sorted(missing)}")
    rows = {}
    for line in lines[heads[0] + 2 :]:
        if not line.startswith("|"):
            break
        cells = dict(zip(header, (c.strip() for c in line.strip().strip("|").split("|")), strict=True))
        identical, samples = cells["identical to greedy"].split("/")
        rows[cells["setting"]] = Row(
            tokens_per_forward=float(cells["tokens/forward"]),
            tokens_per_s=float(cells["tok/s"]),
            speedup=float(cells["speedup vs best AR"].removesuffix("x")),
            identical=int(identical),
            samples=int(samples),
        )
    return rows


def _json_table(dtype: str, batch: int) -> dict[str, Row]:
    rows = {}
    for r in load(_json_name(dtype, batch))["summary"]:
        rows[r["setting"]] = Row(
            r["tokens_per_forward"], r["tokens_per_s"], r["speedup_vs_best_ar"], r["identical"], r["samples"]
        )
    return rows


def has_json(dtype: str, batch: int) -> bool:
    return (RESULTS / _json_name(dtype, batch)).is_file()


def entry(dtype: str, batch: int) -> dict[str, Row]:
    """An entry's greedy and Jacobi rows: from its bench.json where it came back (checked against the printed table,
    so a JSON filed under the wrong entry fails), else from its log. A setting missing from either is an error."""
    printed = log_table(dtype, batch)
    rows = _json_table(dtype, batch) if has_json(dtype, batch) else printed
    source = _json_name(dtype, batch) if has_json(dtype, batch) else _log_name(dtype, batch)
    for setting in (GREEDY, BOTH, DEFAULT):
        for table, name in ((rows, source), (printed, _log_name(dtype, batch))):
            if setting not in table:
                raise ValueError(f"{name}: no row {setting!r} (rows: {sorted(table)})")
        if rows[setting].printed != printed[setting].printed:
            raise ValueError(f"{source}: {setting!r} disagrees with the table of {_log_name(dtype, batch)}")
    return rows


def graph_recordings(dtype: str, batch: int) -> dict[str, dict[str, int]]:
    """The CUDA graphs each setting recorded, in its warm-up and in its timed calls (the log's last line)."""
    mark = "CUDA graphs recorded: "
    found = [line.split(mark, 1)[1] for line in _log(dtype, batch) if mark in line]
    if len(found) != 1:
        raise ValueError(f"{_log_name(dtype, batch)}: expected one line of CUDA graph recordings, found {len(found)}")
    return ast.literal_eval(found[0])


def compile_seconds(dtype: str, batch: int) -> dict[str, int]:
    """Each compiled setting's untimed warm-up in seconds (compiling at the shapes the timing uses), from the log."""
    mark = "Untimed warm-up (compiling, at the shapes the timing uses): "
    found = [line.split(mark, 1)[1].rstrip(".") for line in _log(dtype, batch) if mark in line]
    if len(found) != 1:
        raise ValueError(f"{_log_name(dtype, batch)}: expected one line of warm-up times, found {len(found)}")
    pairs = (part.rsplit(" ", 2) for part in found[0].split("; "))
    return {setting: int(seconds) for setting, seconds, unit in pairs if unit == "s"}


def _timed_graphs() -> int:
    """CUDA graphs recorded during timed calls, every setting of every entry."""
    return sum(c["timed"] for d, b in ENTRIES for c in graph_recordings(d, b).values())


def _graphs_line() -> str:
    compiled = {s: c for d, b in ENTRIES for s, c in graph_recordings(d, b).items() if "compile" in s}
    warm, timed = ({str(c[phase]) for c in compiled.values()} for phase in ("warm-up", "timed"))
    total = _timed_graphs()
    said = (
        "No CUDA graph was recorded in a timed call"
        if total == 0
        else f"{total} CUDA graphs were recorded in timed calls"
    )
    return (
        f"{said} (per compiled setting and entry: warm-up {'/'.join(sorted(warm))}, timed {'/'.join(sorted(timed))})"
    )


def _seconds(settings: list[str]) -> str:
    values = [s for d, b in ENTRIES for name, s in compile_seconds(d, b).items() if name in settings]
    return f"{min(values)}-{max(values)} s"


def _cell(row: Row, bold: bool) -> str:
    speedup = f"**{row.speedup:.2f}x**" if bold else f"{row.speedup:.2f}x"
    return f"{speedup} ({row.tokens_per_forward:.2f})"


@block("gpu-graph-greedy-decode")
def graph_greedy_decode(page: Page) -> str:
    lines = [
        "| dtype | batch | compiled greedy, CUDA graphs (tok/s) | 2 blocks of 16 + recycling: vs greedy (tokens/forward) "
        "| shipped default, block 8 + pool 4: vs greedy (tokens/forward) | shipped default: speedup / tokens per "
        "forward | identical to plain `generate`: compiled greedy, 2 blocks, default | read from |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for dtype, batch in ENTRIES:
        rows = entry(dtype, batch)
        greedy, both, default = rows[GREEDY], rows[BOTH], rows[DEFAULT]
        faster = max(both, default, key=lambda r: r.speedup)
        source = _json_name(dtype, batch) if has_json(dtype, batch) else _log_name(dtype, batch)
        lines.append(
            f"| {dtype} | {batch} | {greedy.tokens_per_s:.1f} | {_cell(both, both is faster)} | "
            f"{_cell(default, default is faster)} | {default.per_token:.2f} | "
            f"{greedy.identical}/{greedy.samples}, {both.identical}/{both.samples}, "
            f"{default.identical}/{default.samples} | {page.ref(source)} |"
        )
    env = load(f"{RUN}/environment.json")
    logs = ", ".join(page.ref(_log_name(d, b)) for d, b in ENTRIES)
    unsaved = " and ".join(f"{d} batch {b}" for d, b in ENTRIES if not has_json(d, b))
    read = (
        f"The rows of {unsaved} are read from the tables their logs printed (no bench.json came back). "
        if unsaved
        else ""
    )
    return "\n".join(lines) + (
        f"\n\n{env['nvidia_smi']} (driver), torch {env['torch']}, transformers {env['transformers']}, CUDA "
        f"{env['cuda']}; one timed round per entry after an untimed warm-up. {_graphs_line()}. "
        f"Compiling before the first token: greedy {_seconds([GREEDY])}, Jacobi {_seconds([BOTH, DEFAULT])}. "
        f"{read}Logs: {logs}; "
        f"{page.ref(f'{RUN}/environment.json')}, {page.ref(f'{RUN}/nvidia-smi.txt')}, "
        f"{page.ref(f'{RUN}/README.md', 'how it ran')}."
    )


@block("gpu-graph-greedy-sentence")
def graph_greedy_sentence(page: Page) -> str:
    bf1, fp1, bf8, fp8 = (entry(d, b) for d, b in ENTRIES)
    said = "no CUDA graph captured in a timed call" if _timed_graphs() == 0 else "CUDA graphs captured in timed calls"
    return (
        f"{bf1[DEFAULT].speedup:.2f}x CUDA-graph greedy in bfloat16 at batch 1 with the shipped default "
        f"({bf1[DEFAULT].tokens_per_forward:.2f} tokens per forward), {fp1[DEFAULT].speedup:.2f}x in float32 "
        f"({fp1[BOTH].speedup:.2f}x with 2 blocks of 16 + recycling; {fp1[DEFAULT].identical}/{fp1[DEFAULT].samples} "
        f"identical), and at batch 8 {bf8[DEFAULT].speedup:.2f}x in bfloat16 and {fp8[DEFAULT].speedup:.2f}x in "
        f"float32, with {said}"
    )


@block("gpu-graph-greedy-yield")
def graph_greedy_yield(page: Page) -> str:
    """The share of its tokens per forward the shipped default turns into wall time, bfloat16 at batch 1."""
    return f"{entry('bfloat16', 1)[DEFAULT].per_token:.2f}"


def glance_row(page: Page) -> str:
    """The README glance's GPU row: the newest measurement of the shipped default against CUDA-graph greedy, batch 1."""
    bf1, fp1 = entry("bfloat16", 1), entry("float32", 1)
    gpu = gpu_model(load(f"{RUN}/environment.json")["device"])
    return (
        f"| one {gpu}, batch 1, 8 `packages` prompts: the shipped default (block 8 + pool 4) on the compiled static "
        f"cache vs CUDA-graph greedy, bfloat16 ({bf1[DEFAULT].identical}/{bf1[DEFAULT].samples} identical to "
        f"`generate`; compiled greedy: {bf1[GREEDY].identical}/{bf1[GREEDY].samples}) and float32 "
        f"({fp1[DEFAULT].identical}/{fp1[DEFAULT].samples}) | - | {bf1[DEFAULT].speedup:.2f}x, "
        f"{fp1[DEFAULT].speedup:.2f}x | {page.ref(_json_name('bfloat16', 1))}, {page.ref(_log_name('float32', 1))} |"
    )
