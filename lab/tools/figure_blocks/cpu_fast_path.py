"""The CPU's fast path: the shipped default in bfloat16 and float32 on CPUs with bfloat16 units, against eager and
compiled greedy in both dtypes, eager and on the compiled static cache (the shipped adapter, one table row group per
kind of CPU its bench files were measured on), and the previous adapter's rows and the quality of its bfloat16
answers."""

from __future__ import annotations

from .core import RESULTS, Page, block, load, markdown_table

FAST = "cpu-fast-path"
COMPILED = {dtype: f"{FAST}/compiled-{dtype}/bench.json" for dtype in ("bfloat16", "float32")}
"""Per dtype: greedy (generate), greedy on a compiled static cache and the shipped default, 8 held-out prompts."""
SHIPPED = "Jacobi recycling n=8"
"""The shipped default (block 8 + pool 4) as an explicit bench row: it runs Jacobi whatever the fallback says."""
QUALITY = f"{FAST}/quality-bfloat16/quality.json"
SHIPPED_RUNS = f"{FAST}/shipped"
"""The shipped adapter's bench files: shipped/<kind of CPU>/compiled-<dtype>/bench.json, one folder per kind."""
REQUESTS = f"{FAST}/generate-defaults-bfloat16-requests/bench.json"


def _rows(path: str) -> dict[str, dict]:
    return {row["setting"]: row for row in load(path)["summary"]}


def _fastest_greedy_in(runs: list[dict]) -> float:
    """The fastest greedy rate (eager or compiled) in these bench runs, in tokens/s."""
    return max(row["tokens_per_s"] for run in runs for row in run["summary"] if row["kind"] != "jacobi")


def _fastest_greedy() -> tuple[float, str]:
    """The fastest greedy a user of this CPU can run, any dtype, eager or compiled: (tokens/s, its label)."""
    found = [
        (row["tokens_per_s"], f"{row['setting']}, {dtype}")
        for dtype, path in COMPILED.items()
        for row in load(path)["summary"]
        if row["kind"] != "jacobi"
    ]
    return max(found)


@block("cpu-fast-path")
def cpu_fast_path(page: Page) -> str:
    """Every greedy baseline and the shipped default in both dtypes, with speed against the fastest greedy of all."""
    fastest, label = _fastest_greedy()
    lines = [
        "| dtype | setting | tok/s (median of 2 rounds) | tokens/forward | vs greedy (generate) in its dtype | "
        "vs the fastest greedy | identical to greedy in its dtype | loops |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for dtype, path in COMPILED.items():
        for row in load(path)["summary"]:
            lines.append(
                f"| {dtype} | {row['setting']} | {row['tokens_per_s']:.1f} | {row['tokens_per_forward']:.2f} | "
                f"{row['speedup_vs_ar']:.2f}x | {row['tokens_per_s'] / fastest:.2f}x | "
                f"{row['identical']}/{row['samples']} | {row['collapsed']} |"
            )
    machine = load(COMPILED["bfloat16"])["meta"]["machine"]
    files = ", ".join(page.ref(path) for path in COMPILED.values())
    return (
        "\n".join(lines)
        + f"\n\nThe fastest greedy: {label} ({fastest:.1f} tok/s). Machine: {machine}. Files: {files}."
    )


@block("cpu-fast-path-sentence")
def cpu_fast_path_sentence(page: Page) -> str:
    """The README's line: the shipped default in bfloat16 against greedy on code prompts and chat requests, float32
    beside it, and whether its bfloat16 answers keep the quality bars."""
    fastest, label = _fastest_greedy()
    bf16 = _rows(COMPILED["bfloat16"])[SHIPPED]
    f32 = _rows(COMPILED["float32"])[SHIPPED]
    chat = next(row for row in load(REQUESTS)["summary"] if row["variant"] == "default")
    quality = load(QUALITY)
    jacobi = next(m for m in quality["models"] if m.get("jacobi_of") == "shipped")
    bars = quality["targets_met"][jacobi["name"]]
    chat_q, base_q = jacobi["quality"]["requests"], quality["models"][0]["quality"]["requests"]
    return (
        f"{bf16['speedup_vs_ar']:.2f}x bfloat16 greedy on 8 held-out code prompts and {bf16['tokens_per_s'] / fastest:.2f}x "
        f"the fastest greedy measured there ({label}), {bf16['identical']} of {bf16['samples']} answers identical to "
        f"bfloat16 greedy, but {chat['speedup_vs_ar']:.2f}x on 8 chat requests ({chat['tokens_per_forward']:.2f} tokens "
        f"per forward); in float32 it ran {f32['speedup_vs_ar']:.2f}x float32 greedy on the code prompts. Its bfloat16 "
        f"answers to the 48 chat requests and 32 code tasks met {sum(bars.values())} of {len(bars)} quality bars "
        f"({chat_q['collapsed']} of 48 chat answers loop, the base's bfloat16 greedy answers {base_q['collapsed']})"
    )


@block("cpu-fast-path-requests")
def cpu_fast_path_requests(page: Page) -> str:
    """bench's table of what a plain call gets in bfloat16 on the hand-written chat requests."""
    rows = load(REQUESTS)["summary"]
    looping = "; ".join(f"{row['setting']} {row['collapsed']} of {row['samples']}" for row in rows)
    return (
        markdown_table(REQUESTS.replace("bench.json", "bench.md"))
        + f"\n\nAnswers that end in a loop: {looping}. File: {page.ref(REQUESTS)}."
    )


@block("cpu-fast-path-quality")
def cpu_fast_path_quality(page: Page) -> str:
    """`hf-jacobi quality --jacobi-answers` in bfloat16: the table it wrote."""
    table = markdown_table(QUALITY.replace("quality.json", "quality.md"))
    return table + f"\n\nFiles: {page.ref(QUALITY)}, {page.ref(QUALITY.replace('quality.json', 'quality.md'))}."


def shipped_glance_row(page: Page, kind: str = "avx512-bf16") -> str:
    """The README glance's row for the shipped adapter on a kind of CPU: the shipped default as a plain call runs it
    (dynamic cache) against the fastest greedy measured there in the same dtype, eager or compiled, float32 then
    bfloat16, with the machine named by its bench file."""
    paths = {dtype: f"{SHIPPED_RUNS}/{kind}/compiled-{dtype}/bench.json" for dtype in ("float32", "bfloat16")}
    runs = {dtype: load(path) for dtype, path in paths.items()}
    ratios, identical = [], []
    for run in runs.values():
        rows = {row["setting"]: row for row in run["summary"]}
        fastest = _fastest_greedy_in([run])
        ratios.append(f"{rows[SHIPPED]['tokens_per_s'] / fastest:.2f}x")
        identical.append(f"{rows[SHIPPED]['identical']}/{rows[SHIPPED]['samples']}")
    machine = runs["bfloat16"]["meta"]["machine"]
    cpu = machine.split(" (")[0].removeprefix("CPU ")
    units = machine.split("bfloat16 units: ")[1].split(",")[0]
    threads = machine.split(", ")[2] if machine.count(", ") >= 2 else ""
    files = ", ".join(page.ref(path, "bench.json") for path in paths.values())
    return (
        f"| {cpu}, {threads}, bfloat16 units {units}, batch 1, the same 8 code prompts: the shipped default (dynamic "
        f"cache) vs the fastest greedy there in its dtype (eager or compiled), float32 ({identical[0]} identical) and "
        f"bfloat16 ({identical[1]} identical to bfloat16 greedy) | - | {ratios[0]}, {ratios[1]} | {files} |"
    )


def _shipped_files() -> dict[str, list[str]]:
    """The shipped adapter's bench files by kind of CPU (folder name), each kind's dtypes in name order."""
    found: dict[str, list[str]] = {}
    for path in sorted((RESULTS / SHIPPED_RUNS).glob("*/compiled-*/bench.json")):
        relative = path.relative_to(RESULTS).as_posix()
        found.setdefault(path.parent.parent.name, []).append(relative)
    return found


@block("cpu-fast-path-shipped")
def cpu_fast_path_shipped(page: Page) -> str:
    """Per kind of CPU: every greedy baseline and the shipped default, eager and on the compiled static cache, in each
    dtype, against the fastest greedy measured on that CPU in any dtype."""
    lines = [
        "| CPU | dtype | setting | tok/s (median of 2 rounds) | tokens/forward | vs greedy (generate) in its dtype | "
        "vs the fastest greedy there | identical to greedy in its dtype | loops |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    machines, files = [], []
    for kind, paths in _shipped_files().items():
        runs = [load(path) for path in paths]
        fastest = _fastest_greedy_in(runs)
        for path, run in zip(paths, runs, strict=True):
            for row in run["summary"]:
                lines.append(
                    f"| {kind} | {run['meta']['dtype']} | {row['setting']} | {row['tokens_per_s']:.1f} | "
                    f"{row['tokens_per_forward']:.2f} | {row['speedup_vs_ar']:.2f}x | "
                    f"{row['tokens_per_s'] / fastest:.2f}x | {row['identical']}/{row['samples']} | {row['collapsed']} |"
                )
            files.append(page.ref(path))
        machines.append(f"{kind}: {runs[0]['meta']['machine']}")
    return "\n".join(lines) + f"\n\nMachines: {'; '.join(machines)}. Files: {', '.join(files)}."


@block("cpu-fast-path-tune")
def cpu_fast_path_tune(page: Page) -> str:
    """`hf-jacobi tune`'s dtype search for the shipped adapter, per kind of CPU: each dtype's choice and measured rate
    against its own greedy, and the dtype chosen."""
    sentences = []
    for kind in _shipped_files():
        path = f"{SHIPPED_RUNS}/{kind}/tune.json"
        if not (RESULTS / path).is_file():
            continue
        report = load(path)
        searched = "; ".join(
            f"{dtype}: {entry['choice']} at {entry['measured_tokens_per_s']:.1f} tokens/s against its greedy's "
            f"{entry['greedy_tokens_per_s']:.1f} ({entry['measured_speedup']:.2f}x)"
            for dtype, entry in report["dtype_search"].items()
        )
        sentences.append(
            f"On {kind} ({report['hardware']}): {searched}; chosen: {report['dtype']}, "
            f"{'Jacobi' if report['choice']['decoding'] == 'jacobi' else 'greedy'} "
            f"block {report['choice'].get('block_size')}, {report['choice'].get('num_blocks')} block(s), pool "
            f"{report['choice'].get('ngram_pool_size')} ({page.ref(path)}, {page.ref(path.replace('.json', '.md'))})."
        )
    return " ".join(sentences)


@block("cpu-fast-path-compile-cost")
def cpu_fast_path_compile_cost(page: Page) -> str:
    """What compiling costs before the first timed call, on a cold and on a warm compile cache, beside what the
    compiled path gains per answer: the trade `jacobi_cache_implementation="auto"` weighs on a CPU."""
    cold = load(f"{SHIPPED_RUNS}/amx/cold-compile-cache-bfloat16/bench.json")
    warm = load(f"{SHIPPED_RUNS}/amx/compiled-bfloat16/bench.json")
    rows = {row["setting"]: row for row in warm["summary"]}
    eager, compiled = rows[SHIPPED], rows[f"{SHIPPED} (compiled static cache)"]
    per_answer = eager["seconds"] / eager["samples"] - compiled["seconds"] / compiled["samples"]
    key = f"{SHIPPED} (compiled static cache)"
    return (
        f"compiling the shipped default's verify forward took {cold['warmup_seconds'][key]:.0f} s in a process on a "
        f"cold compile cache and {warm['warmup_seconds'][key]:.0f} s once torch's on-disk cache held its kernels "
        f"(compiled greedy: {cold['warmup_seconds']['AR (static cache + compile)']:.0f} s and "
        f"{warm['warmup_seconds']['AR (static cache + compile)']:.0f} s), against {per_answer:.2f} s saved per "
        f"128-token answer ({eager['seconds'] / eager['samples']:.2f} s eager, "
        f"{compiled['seconds'] / compiled['samples']:.2f} s compiled; "
        f"{page.ref(f'{SHIPPED_RUNS}/amx/cold-compile-cache-bfloat16/bench.json')}, "
        f"{page.ref(f'{SHIPPED_RUNS}/amx/compiled-bfloat16/bench.json')})"
    )
