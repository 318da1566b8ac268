"""The results page's sentences on the CPU benches of the embedded model: the tuner's choices, the shipped adapter's
decoding paths across machines, and greedy's speed from one run of a bench to the next (the benches' and tune runs'
tables themselves are entries of docs/results/tables.json)."""

from __future__ import annotations

from .core import JF, Page, bench_rows, block, load, rng
from .tables import files_of, predictions, roofline


@block("tune-embedded")
def tune_embedded(page: Page) -> str:
    path = "cpu-tune-embedded.json"
    data = load(path)
    verified = data["verified"][0]
    return (
        roofline(path)
        + "\n\n"
        + predictions(path, 5)
        + f"\n\nThe knee (the widest forward within 1.5x a one-token forward) is {data['roofline_knee_tokens']} "
        f"tokens; the best prediction ({verified['candidate']}) was timed at {verified['speedup']:.2f}x greedy, "
        f'inside the 3% margin, so tune wrote `decoding="{data["choice"]["decoding"]}"`. File: {page.ref(path)}.'
    )


@block("tune-round4")
def tune_round4(page: Page) -> str:
    path = f"{JF}/tune-round4.json"
    data = load(path)
    timed = "; ".join(f"{v['candidate']} {v['speedup']:.2f}x" for v in data["verified"])
    one = data["roofline_seconds"]["1"] * 1000
    return (
        f"timed against greedy on its train-prompt sample: {timed} (its one-token forward measured {one:.0f} ms, a "
        f"disturbed reading; {page.ref(f'{JF}/tune-round4.md')})"
    )


PATHS_HELDOUT = f"{JF}/paths-heldout-base-scale/bench.json"
PATHS_SECOND = f"{JF}/paths-heldout-second-machine/bench.json"
PATHS_SECOND_OLD_CODE = f"{JF}/paths-heldout-second-machine/earlier-code/bench.json"
PATHS_SHORT_CHAIN = f"{JF}/paths-heldout-short-chain/bench.json"
PATHS_COMPILED = "Jacobi recycling n=8 (compiled static cache in 5 widths)"
"""The shipped default on the compiled static cache, the CPU's default widths: its row in every `paths-heldout`."""


@block("short-chain-verdict")
def short_chain_verdict(page: Page) -> str:
    """tune-short-chain's choice against the shipped default, in the same rounds of one held-out bench."""
    rows = bench_rows(PATHS_SHORT_CHAIN)
    choice = {("compiled" if "compiled" in name else "eager"): row for name, row in rows.items() if "default" in name}
    shipped = {"eager": rows["Jacobi recycling n=8"], "compiled": rows["Jacobi recycling n=8 (compiled static cache)"]}
    tune = load(f"{JF}/tune-short-chain.json")
    chosen = tune["choice"]
    name = next(v["candidate"] for v in tune["verified"] if v["speedup"] == chosen["measured_speedup"])
    keys = ("block_size", "num_blocks", "ngram_pool_size", "verify_size", "ngram_size")
    block_8_pool_4 = {"block_size": 8, "num_blocks": 1, "ngram_pool_size": 4, "verify_size": None, "ngram_size": None}

    def sample(setting: dict) -> str:
        a = next(a for a in tune["acceptance"] if all(a[key] == setting[key] for key in keys))
        return f"{a['tokens_per_forward']:.2f} tokens per forward in {a['mean_width']:.1f} columns"

    return (
        f"on its 4 train prompts tune's choice, {name}, accepted {sample(chosen)} against "
        f"{sample(block_8_pool_4)} for the shipped default (block 8 + pool 4) and was timed at "
        f"{chosen['measured_speedup']:.2f}x eager greedy; on the 8 held-out prompts it accepted "
        f"{choice['eager']['tokens_per_forward']:.2f} tokens per forward against the shipped default's "
        f"{shipped['eager']['tokens_per_forward']:.2f} and ran at {choice['compiled']['speedup_vs_best_ar']:.2f}x "
        f"compiled greedy on the compiled static cache (the shipped default "
        f"{shipped['compiled']['speedup_vs_best_ar']:.2f}x) and {choice['eager']['speedup_vs_best_ar']:.2f}x eager "
        f"({shipped['eager']['speedup_vs_best_ar']:.2f}x)"
    )


@block("paths-machines")
def paths_runs(page: Page) -> str:
    """What the two runs of `paths-heldout` gave, and the first run's code timed in the second."""

    def figures(path: str) -> str:
        rows = bench_rows(path)
        greedy = rows["AR (static cache + compile)"]["tokens_per_s"]
        eager = rows["Jacobi recycling n=8"]["speedup_vs_best_ar"]
        compiled = rows[PATHS_COMPILED]
        return (
            f"compiled greedy {greedy:.1f} tok/s, eager Jacobi {eager:.2f}x it, compiled in five widths "
            f"{compiled['tokens_per_s']:.1f} tok/s ({compiled['speedup_vs_best_ar']:.2f}x)"
        )

    return (
        f"first machine: {figures(PATHS_HELDOUT)}; second machine, the newer code: {figures(PATHS_SECOND)}; second "
        f"machine, the first run's code: {figures(PATHS_SECOND_OLD_CODE)} "
        f"({page.ref(PATHS_SECOND_OLD_CODE, 'bench.json')}, how it was run: "
        f"{page.ref(PATHS_SECOND_OLD_CODE.replace('bench.json', 'README.md'), 'README')})."
    )


# every CPU bench of the embedded model: greedy's speed differs from one run to the next
CPU_BENCHES = [*files_of("bench"), PATHS_SECOND_OLD_CODE]


@block("greedy-speed-range")
def greedy_speed_range(page: Page) -> str:
    speeds = [row["tokens_per_s"] for path in CPU_BENCHES for row in load(path)["summary"] if row["kind"] == "ar"]
    return f"{min(speeds):.1f} to {max(speeds):.1f}"


DEFAULTS_CPU = (("held-out code prompts (packages test 17-24)", f"{JF}/generate-defaults-cpu"),
                ("hand-written chat requests (requests 1-8)", f"{JF}/generate-defaults-cpu-requests"))  # fmt: skip
DEFAULT_SETTING = "Jacobi default (block 8, pool 4)"


@block("generate-defaults-cpu")
def generate_defaults_cpu(page: Page) -> str:
    """The shipped defaults on a CPU's eager path against plain generate, per prompt set: behind
    jacobi_greedy_devices: ["cpu"] in the shipped generation config."""
    rows = [
        "| prompts | tokens per forward | vs plain greedy generate (median of 3 rounds, range) | identical | loops |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, folder in DEFAULTS_CPU:
        row = bench_rows(f"{folder}/bench.json")[DEFAULT_SETTING]
        rows.append(
            f"| {label} | {row['tokens_per_forward']:.2f} | {row['speedup_vs_ar']:.2f}x "
            f"({rng(row['speedup_vs_ar_range'])}) | {row['identical']}/{row['samples']} | {row['collapsed']} |"
        )
    files = ", ".join(page.ref(f"{folder}/bench.json") for _, folder in DEFAULTS_CPU)
    return "\n".join(rows) + f"\n\nFiles: {files}."


@block("generate-defaults-cpu-sentence")
def generate_defaults_cpu_sentence(page: Page) -> str:
    (_, code), (_, chat) = DEFAULTS_CPU
    code_row, chat_row = (bench_rows(f"{f}/bench.json")[DEFAULT_SETTING] for f in (code, chat))
    return (
        f"{chat_row['speedup_vs_ar']:.2f}x plain greedy on chat requests and {code_row['speedup_vs_ar']:.2f}x on "
        f"code prompts ({code_row['collapsed']} of {code_row['samples']} of those answers a loop)"
    )
