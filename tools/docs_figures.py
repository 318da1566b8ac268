"""The figures of README.md, docs/*.md and model_cards/*.md, rendered from the results files they come from.

A page marks a figure with a pair of HTML comments, which neither GitHub nor the docs site shows:

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

and this script replaces what lies between them with what the block function registered as NAME returns. A pair
written inside a line (`about <!-- figures:NAME -->1.07<!-- /figures:NAME --> tokens`) is an inline block: its text
stays on that line. Run from anywhere:

    python tools/docs_figures.py           # rewrite the pages (make docs-figures)
    python tools/docs_figures.py --check   # print a diff of every page that disagrees with its files, exit 1

tests/test_docs.py runs the check, so a results file that changes, or a page edited by hand between markers, fails
`make test` until the pages are rendered again.

Adding a figure is one function and one marker pair: a function below that reads its files (paths relative to
docs/results/) and returns Markdown, decorated with `@block("name")`; then `<!-- figures:name -->` and
`<!-- /figures:name -->` where it goes. `page.ref(path)` links a results file from the page being rendered (a relative
link on README and docs pages, a code span in model cards, which are published without the docs).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
JF = "jacobi-forcing-cpu"
PAGE_GLOBS = ("README.md", "docs/*.md", "model_cards/*.md")
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"(?<!`)<!-- figures:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figures:(?P=name) -->", re.DOTALL)


@dataclass(frozen=True)
class Page:
    """The page a block is rendered into: links to results files depend on where it lies."""

    path: Path  # relative to the repository root

    def ref(self, path: str, text: str | None = None) -> str:
        """A reference to docs/results/<path> from this page."""
        text = text or path.rsplit("/", 1)[-1]
        if self.path.parts[0] == "model_cards":
            return f"`docs/results/{path}`"
        prefix = "docs/results" if len(self.path.parts) == 1 else "results"
        return f"[{text}]({prefix}/{path})"


BLOCKS: dict[str, Callable[[Page], str]] = {}


def block(name: str) -> Callable[[Callable[[Page], str]], Callable[[Page], str]]:
    """Register a block function under the marker name it fills."""

    def register(fn: Callable[[Page], str]) -> Callable[[Page], str]:
        if name in BLOCKS:
            raise ValueError(f"block {name!r} is registered twice")
        BLOCKS[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------------------------------------- reading


@functools.cache
def load(path: str) -> Any:
    """A JSON file under docs/results/."""
    return json.loads((RESULTS / path).read_text(encoding="utf-8"))


def markdown_table(path: str) -> str:
    """The first Markdown table of a file under docs/results/ (what `hf-jacobi bench` writes to bench.md)."""
    lines = (RESULTS / path).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


@dataclass(frozen=True)
class Side:
    """One model of an `hf-jacobi evaluate` report (its `base` or its `trained` side)."""

    data: dict

    def setting(self, name: str) -> dict | None:
        return next((s for s in self.data["settings"] if s["name"] == name), None)

    def tpf(self, name: str, digits: int = 3) -> str:
        s = self.setting(name)
        return "not run" if s is None else f"{s['tokens_per_forward']:.{digits}f}"

    def counts(self, name: str) -> str:
        s = self.setting(name)
        return f"{s['new_tokens']:,} / {s['forwards']:,}"

    @property
    def distinct(self) -> float:
        return self.data["distinct_3grams"]

    @property
    def reference_nll(self) -> float:
        return self.data["reference_nll"]

    @property
    def canonical_nll(self) -> float:
        return self.data["humaneval_canonical_nll"]

    @property
    def canonical_ratio(self) -> float:
        return self.data.get("humaneval_canonical_nll_vs_base", 1.0)


def evaluation(name: str) -> tuple[Side, Side] | None:
    """Base and trained sides of docs/results/jacobi-forcing-cpu/<name>.json, None when that evaluation was not run."""
    if not (RESULTS / JF / f"{name}.json").is_file():
        return None
    data = load(f"{JF}/{name}.json")
    return Side(data["base"]), Side(data["trained"])


def trained(name: str) -> Side:
    return evaluation(name)[1]


def base(name: str) -> Side:
    return evaluation(name)[0]


def bench_rows(path: str) -> dict[str, dict]:
    """The summary rows of a bench.json, by setting name."""
    return {row["setting"]: row for row in load(path)["summary"]}


def rng(values: list[float], fmt: str = ".2f") -> str:
    low, high = values
    return f"{low:{fmt}}-{high:{fmt}}"


def pct_gain(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:.0f}%"


def heldout_curve(path: str) -> list[dict]:
    """The held-out figures a training run logged (`HeldOutSpeedCallback`), step by step."""
    return [e for e in load(path)["log_history"] if "heldout/plain_tokens_per_forward" in e]


# --------------------------------------------------------------------------------------- the shipped adapter's rows

QUALITY_FRONT = "quality-cpu/front"
"""The answer-quality study of every adapter (`hf-jacobi quality`, merged with --merge)."""
SHIPPED_QUALITY = "base-scale-shipped"
"""The shipped adapter's name in that study."""
PREVIOUS_QUALITY = "repair-100-steps"
"""The adapter it replaced (the repair round's step 100, shipped until 2026-11-26), whose speed was measured on GPUs."""


def quality_model(name: str) -> dict:
    return next(m for m in load(f"{QUALITY_FRONT}/quality.json")["models"] if m["name"] == name)


# the rounds of the shipped chain, each with the evaluation files that hold its held-out figures
SHIPPED = "lora-r16-base-scale-kl10-step250"
REPAIR = "lora-r16-base-targets-step100"
ROUND4 = "lora-r16-round4-w16"
ROUND3 = "lora-r16-onpolicy-kl1-anchor300"
ROUND2 = "lora-r16-round2-kl1"
PACKAGES_ROWS = [  # (label, evaluation of the 16 `packages` test prompts at 64 tokens, or None for the base)
    ("base SmolLM2-135M-Instruct", None),
    ("round 1 (LoRA r16)", "evaluate-lora-r16"),
    ("full fine-tune instead of round 1 (not shipped)", "evaluate-full"),
    ("round 2, KL anchor", f"evaluate-{ROUND2}"),
    ("round 3, on-policy, KL anchor + anchor texts", f"evaluate-{ROUND3}"),
    ("round 4, on-policy, noise window 16 (shipped until 2026-11-26)", f"evaluate-{ROUND4}"),
]
HUMANEVAL_ROWS = [
    ("base SmolLM2-135M-Instruct", None),
    ("round 1 (LoRA r16)", "evaluate-humaneval"),
    ("round 2, KL anchor", f"evaluate-humaneval-{ROUND2}"),
    ("round 3, on-policy, KL anchor + anchor texts", f"evaluate-humaneval-{ROUND3}"),
    ("round 4, on-policy, noise window 16 (shipped until 2026-11-26)", f"evaluate-humaneval-{ROUND4}"),
    ("repair round: round 4 on the base's own answers (shipped until 2026-11-26)", f"evaluate-humaneval-{REPAIR}"),
    ("**a fresh adapter on the base's own answers, KL x10 (shipped)**", f"evaluate-humaneval-{SHIPPED}"),
]


def bold_if(label: str, text: str) -> str:
    return f"**{text}**" if label.startswith("**") else text


@block("eval-packages")
def eval_packages(page: Page) -> str:
    rows = [
        "| model | plain tokens/forward | 2 blocks + recycling tokens/forward | distinct 3-grams | NLL of base answers |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, name in PACKAGES_ROWS:
        side = base(f"evaluate-{ROUND4}") if name is None else trained(name)
        plain, both = side.tpf("plain"), side.tpf("both", 2)
        rows.append(
            f"| {label} | {bold_if(label, plain)} ({side.counts('plain')}) | {bold_if(label, both)} "
            f"({side.counts('both')}) | {side.distinct:.3f} | {side.reference_nll:.3f} |"
        )
    files = ", ".join(page.ref(f"{JF}/{name}.json") for _, name in PACKAGES_ROWS if name)
    return "\n".join(rows) + f"\n\nFiles: {files}."


@block("eval-humaneval")
def eval_humaneval(page: Page) -> str:
    rows = [
        "| model | plain n=8 tokens/forward | recycling n=8, pool 4 tokens/forward | distinct 3-grams "
        "| NLL of HumanEval's canonical solutions |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, name in HUMANEVAL_ROWS:
        side = base(f"evaluate-humaneval-{ROUND4}") if name is None else trained(name)
        plain, rec = side.tpf("plain"), side.tpf("recycling", 2)
        nll = f"{side.canonical_nll:.3f}"
        if name is not None:
            nll += f" ({bold_if(label, f'{side.canonical_ratio:.3f}x')} base)"
        rows.append(
            f"| {label} | {bold_if(label, plain)} ({side.counts('plain')}) | {bold_if(label, rec)} "
            f"({side.counts('recycling')}) | {side.distinct:.3f} | {nll} |"
        )
    files = ", ".join(page.ref(f"{JF}/{name}.json") for _, name in HUMANEVAL_ROWS if name)
    return "\n".join(rows) + f"\n\nFiles: {files}."


def quality_speed(name: str, setting: str, digits: int) -> str:
    """`tokens/forward (tokens / forwards)` of one model and Jacobi setting in the quality study (its speed is measured
    on the same 16 `packages` test prompts, 128 tokens, block 16, as `evaluate-128-tokens-*`)."""
    entry = next(s for s in quality_model(name)["speed"] if s["name"] == setting)
    return f"{entry['tokens_per_forward']:.{digits}f} ({entry['new_tokens']:,} / {entry['forwards']:,})"


@block("eval-128-tokens")
def eval_128_tokens(page: Page) -> str:
    r3, r4 = evaluation("evaluate-128-tokens-shipped"), evaluation(f"evaluate-128-tokens-{ROUND4}")
    rows = [
        "| model | plain tokens/forward | 2 blocks + recycling tokens/forward |",
        "|---|---:|---:|",
        f"| base SmolLM2-135M-Instruct | {r4[0].tpf('plain')} ({r4[0].counts('plain')}) | "
        f"{r4[0].tpf('both', 2)} ({r4[0].counts('both')}) |",
        f"| round 3 | {r3[1].tpf('plain')} ({r3[1].counts('plain')}) | {r3[1].tpf('both', 2)} ({r3[1].counts('both')}) |",
        f"| round 4 | {r4[1].tpf('plain')} ({r4[1].counts('plain')}) | {r4[1].tpf('both', 2)} ({r4[1].counts('both')}) |",
        f"| repair round (shipped until 2026-11-26) | {quality_speed(PREVIOUS_QUALITY, 'plain', 3)} | "
        f"{quality_speed(PREVIOUS_QUALITY, 'both', 2)} |",
        f"| **fresh adapter, KL x10 (shipped)** | **{quality_speed(SHIPPED_QUALITY, 'plain', 3)}** | "
        f"**{quality_speed(SHIPPED_QUALITY, 'both', 2)}** |",
    ]
    files = f"{page.ref(f'{JF}/evaluate-128-tokens-{ROUND4}.json')}, {page.ref(f'{QUALITY_FRONT}/quality.json')}"
    shipped = page.ref(f"{JF}/evaluate-128-tokens-shipped.json")
    return "\n".join(rows) + f"\n\nFiles: {files}; round 3's: {shipped} (named for the adapter it shipped as then)."


@block("untrained-acceptance")
def untrained_acceptance(page: Page) -> str:
    packages = base(f"evaluate-{ROUND4}").setting("plain")["tokens_per_forward"]
    humaneval = base(f"evaluate-humaneval-{ROUND4}")
    bench = base(f"evaluate-bench-prompts-{ROUND4}").setting("recycling")["tokens_per_forward"]
    recycling = humaneval.setting("recycling")["tokens_per_forward"]
    low, high = sorted((recycling, bench))
    return f"about {packages:.2f} tokens per forward, {low:.2f}-{high:.2f} with rejection recycling"


def _speedup(row: dict) -> str:
    return f"{row['speedup_vs_best_ar']:.2f}x"


@block("glance")
def glance(page: Page) -> str:
    he = evaluation(f"evaluate-humaneval-{SHIPPED}")
    shipped_cpu = bench_rows(PATHS_HELDOUT)["Jacobi recycling n=8 (compiled static cache in 5 widths)"]
    fhe, fq = f"{JF}/evaluate-humaneval-{SHIPPED}.json", f"{QUALITY_FRONT}/quality.json"
    base_q, shipped_q = quality_model("base")["quality"], quality_model(SHIPPED_QUALITY)["quality"]
    rows = [
        "| held out, every output identical to greedy | untrained | shipped adapter | file |",
        "|---|---:|---:|---|",
        f"| plain Jacobi, tokens per forward (16 `packages` prompts, 128 tokens, block 16) | "
        f"{quality_speed('base', 'plain', 3).split()[0]} | **{quality_speed(SHIPPED_QUALITY, 'plain', 3).split()[0]}** | "
        f"{page.ref(fq)} |",
        f"| 2 blocks + recycling, tokens per forward (same prompts) | {quality_speed('base', 'both', 2).split()[0]} | "
        f"**{quality_speed(SHIPPED_QUALITY, 'both', 2).split()[0]}** | {page.ref(fq)} |",
        f"| plain Jacobi, tokens per forward (16 HumanEval problems, block 8) | {he[0].tpf('plain')} | "
        f"**{he[1].tpf('plain')}** | {page.ref(fhe)} |",
        f"| block 8 + recycling, tokens per forward (same problems) | {he[0].tpf('recycling', 2)} | "
        f"**{he[1].tpf('recycling', 2)}** | {page.ref(fhe)} |",
        f"| answers collapsed into a loop, 48 plain chat requests (128 tokens) | "
        f"{base_q['requests']['collapsed']} | {shipped_q['requests']['collapsed']} | {page.ref(fq)} |",
        f"| answers collapsed into a loop / passing their tests, 32 code requests | "
        f"{base_q['code-tasks']['collapsed']} / {base_q['code-tasks']['code_passed']} | "
        f"{shipped_q['code-tasks']['collapsed']} / {shipped_q['code-tasks']['code_passed']} | {page.ref(fq)} |",
        f"| 2-core CPU, 2 quiet threads, batch 1, 8 other held-out prompts: the shipped default (block 8 + recycling) "
        f"on the compiled static cache vs compiled greedy | - | {_speedup(shipped_cpu)} | "
        f"{page.ref(PATHS_HELDOUT, 'bench.json')} |",
        f"| one H200, batch 1, float32, 8 `packages` prompts: 2 blocks + recycling on the compiled static cache vs "
        f"CUDA-graph greedy | - | {grade_best('float32', 1, SHIPPED_GRADE)['speedup_vs_best_greedy']:.2f}x | "
        f"{page.ref(SHIPPED_GRADE + '/gpu-grade.json', 'gpu-grade.json')} |",
    ]
    return "\n".join(rows)


@block("quality-summary")
def quality_summary(page: Page) -> str:
    base_q, ours = quality_model("base")["quality"], quality_model(SHIPPED_QUALITY)["quality"]
    previous = quality_model(PREVIOUS_QUALITY)["quality"]
    chat, code, base_chat, base_code = ours["requests"], ours["code-tasks"], base_q["requests"], base_q["code-tasks"]
    he = trained(f"evaluate-humaneval-{SHIPPED}")
    return (
        f"On 48 plain chat requests no training run saw (greedy, 128 tokens), the shipped adapter's answers collapse "
        f"into a loop {chat['collapsed']} times (base {base_chat['collapsed']}, the repair-round adapter it replaces "
        f"{previous['requests']['collapsed']}), their distinct 3-grams are "
        f"{chat['distinct_3grams'] / base_chat['distinct_3grams']:.2f}x the base's and the base model's NLL of them "
        f"{chat['base_nll'] / base_chat['base_nll']:.2f}x its NLL of its own (bars: 3 points, 0.9x, 1.2x). On 32 code "
        f"requests run against their tests it passes {code['code_passed']} (base {base_code['code_passed']}) and "
        f"{code['collapsed']} of its answers loop (base {base_code['collapsed']}, the repair round "
        f"{previous['code-tasks']['collapsed']}); distinct 3-grams {code['distinct_3grams'] / base_code['distinct_3grams']:.2f}x, "
        f"NLL {code['base_nll'] / base_code['base_nll']:.2f}x. HumanEval's canonical solutions: "
        f"{he.canonical_ratio:.3f}x the base's NLL. The price of keeping the base's answers is speed: the repair round "
        f"accepted more tokens per forward with answers that looped. Every adapter side by side: "
        f"{page.ref(f'{QUALITY_FRONT}/quality.md')} and {page.ref(f'{QUALITY_FRONT}/quality.png', 'its plot')}."
    )


@block("quality-front")
def quality_front(page: Page) -> str:
    files = ", ".join(
        page.ref(f"{QUALITY_FRONT}/{name}") for name in ("quality.json", "quality.md", "answers.json", "quality.png")
    )
    return f"{markdown_table(f'{QUALITY_FRONT}/quality.md')}\n\nFiles: {files}."


# ------------------------------------------------------------------------------------------------- the model card


def _curve_table(path: str, reference: str, first: str) -> str:
    rows = [
        f"| step | plain tokens/forward | distinct 3-grams | NLL of the {reference} model's answers |",
        "|---:|---:|---:|---:|",
    ]
    curve = heldout_curve(path)
    for i, entry in enumerate(curve):
        step = f"0 ({first})" if entry["step"] == 0 else str(entry["step"])
        tpf = f"{entry['heldout/plain_tokens_per_forward']:.3f}"
        if i == len(curve) - 1:
            tpf = f"**{tpf}**"
        rows.append(
            f"| {step} | {tpf} | {entry['heldout/distinct_3grams']:.3f} | {entry['heldout/reference_nll']:.3f} |"
        )
    return "\n".join(rows)


@block("card-curve-repair")
def card_curve_repair(page: Page) -> str:
    path = f"{JF}/training-states/lora-r16-base-targets/trainer_state.json"
    return _curve_table(path, "round-4", "round 4") + f"\n\nFile: {page.ref(path)}."


@block("card-curve-round4")
def card_curve_round4(page: Page) -> str:
    path = f"{JF}/training-states/{ROUND4}/trainer_state.json"
    return _curve_table(path, "round-3", "round 3") + f"\n\nFile: {page.ref(path)}."


@block("card-curve-round3")
def card_curve_round3(page: Page) -> str:
    path = f"{JF}/reproduction/training-states/{ROUND3}/trainer_state.json"
    return _curve_table(path, "round-2", "round 2") + f"\n\nFile: {page.ref(path)} (the uninterrupted re-run)."


@block("card-gains")
def card_gains(page: Page) -> str:
    b, t = evaluation(f"evaluate-{ROUND4}")
    hb, ht = evaluation(f"evaluate-humaneval-{ROUND4}")
    bb, bt = evaluation(f"evaluate-bench-prompts-{ROUND4}")
    r3 = trained(f"evaluate-humaneval-{ROUND3}")
    plain = t.setting("plain")["tokens_per_forward"] / b.setting("plain")["tokens_per_forward"]
    he_plain = ht.setting("plain")["tokens_per_forward"] / hb.setting("plain")["tokens_per_forward"]
    return (
        f"Round 4 (shipped until 2026-11-26): "
        f"Plain Jacobi accepts {plain:.2f}x the base model's tokens per forward on the `packages` test prompts and "
        f"{he_plain:.2f}x on HumanEval. The NLL of the 164 canonical solutions (given their prompts as raw "
        f"completions) is {ht.canonical_ratio:.3f}x the base's, inside the 1.10x bar set for quality (round 3: "
        f"{r3.canonical_ratio:.3f}x). Distinct 3-grams of the greedy answers are {t.distinct / b.distinct:.2f}x the "
        f"base's on `packages`, {ht.distinct / hb.distinct:.2f}x on HumanEval and {bt.distinct / bb.distinct:.2f}x "
        f"on the 4 bench prompts (bar 0.8x), and the NLL of the base model's own answers rises from "
        f"{b.reference_nll:.2f} to {t.reference_nll:.2f} nats per token on `packages` ({hb.reference_nll:.2f} to "
        f"{ht.reference_nll:.2f} on HumanEval): the adapter moves the model's own text more than its grasp of "
        "correct code."
    )


def _bench_wall_table(path: str, labels: dict[str, str], bold: str) -> str:
    rows = [
        "| setting | tokens/forward | tok/s (slowest-fastest round) | vs greedy (static cache + compile) "
        "| vs plain generate |",
        "|---|---:|---:|---:|---:|",
    ]
    for setting, row in bench_rows(path).items():
        label = labels.get(setting, setting)
        cells = [
            f"{row['tokens_per_forward']:.2f}",
            f"{row['tokens_per_s']:.1f} ({rng(row['tokens_per_s_range'], '.1f')})",
            f"{row['speedup_vs_best_ar']:.2f}x ({rng(row['speedup_vs_best_ar_range'])})",
            f"{row['speedup_vs_ar']:.2f}x",
        ]
        if setting == bold:
            label, cells = f"**{label}**", [f"**{c}**" for c in cells]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


@block("wall-round4")
def wall_round4(page: Page) -> str:
    path = f"{JF}/bench-round4/bench.json"
    labels = {
        "AR (generate)": "greedy `generate`",
        "AR (static cache + compile)": "greedy, static cache + `torch.compile`",
        "Jacobi plain n=8": "plain Jacobi, block 8",
        "Jacobi recycling n=8": "block 8 + pool 4 (the shipped default)",
        "Jacobi default (block 16, pool 4, 2 verified per step)": "block 16 + pool 4 verifying 2 (tune's choice)",
    }
    meta = load(path)["meta"]
    return (
        _bench_wall_table(path, labels, "Jacobi recycling n=8")
        + f"\n\n`{meta['command']}` on {meta['machine']}, {meta['rounds']} alternating rounds, medians "
        f"({page.ref(path)})."
    )


# ---------------------------------------------------------------------------------------------------- results page


@block("bench-md-round4")
def bench_md_round4(page: Page) -> str:
    return markdown_table(f"{JF}/bench-round4/bench.md") + f"\n\nFile: {page.ref(f'{JF}/bench-round4/bench.json')}."


@block("bench-md-round3")
def bench_md_round3(page: Page) -> str:
    return markdown_table(f"{JF}/bench-trained/bench.md") + f"\n\nFile: {page.ref(f'{JF}/bench-trained/bench.json')}."


@block("bench-md-round2")
def bench_md_round2(page: Page) -> str:
    folder = f"{JF}/bench-round2-beside-round3-onpolicy"
    return markdown_table(f"{folder}/bench.md") + f"\n\nFile: {page.ref(f'{folder}/bench.json')}."


@block("bench-md-untrained")
def bench_md_untrained(page: Page) -> str:
    folder = f"{JF}/bench-untrained"
    return markdown_table(f"{folder}/bench.md") + f"\n\nFile: {page.ref(f'{folder}/bench.json')}."


@block("humaneval-chat")
def humaneval_chat(page: Page) -> str:
    return markdown_table("cpu-humaneval-chat.md") + f"\n\nFile: {page.ref('cpu-humaneval-chat.json')}."


@block("humaneval-raw")
def humaneval_raw(page: Page) -> str:
    return markdown_table("cpu-humaneval-raw.md") + f"\n\nFile: {page.ref('cpu-humaneval-raw.json')}."


def _roofline(path: str) -> str:
    curve = {int(k): v for k, v in load(path)["roofline_seconds"].items()}
    rows = ["| tokens | ms | x one token |", "|---:|---:|---:|"]
    rows += [f"| {n} | {s * 1000:.2f} | {s / curve[1]:.2f} |" for n, s in sorted(curve.items())]
    return "\n".join(rows)


def _predictions(path: str, limit: int) -> str:
    """The tuner's best `limit` predictions, against its prediction for greedy."""
    predictions = load(path)["predictions"]
    greedy = next(p["predicted_tokens_per_s"] for p in predictions if p["candidate"] == "greedy")
    rows = [
        "| setting | tokens/forward | mean width | predicted tok/s | vs greedy |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in predictions[:limit]:
        rows.append(
            f"| {p['candidate']} | {p['tokens_per_forward']:.2f} | {p['mean_width']:.1f} | "
            f"{p['predicted_tokens_per_s']:.1f} | {p['predicted_tokens_per_s'] / greedy:.2f}x |"
        )
    return "\n".join(rows)


@block("tune-embedded")
def tune_embedded(page: Page) -> str:
    path = "cpu-tune-embedded.json"
    data = load(path)
    verified = data["verified"][0]
    return (
        _roofline(path)
        + "\n\n"
        + _predictions(path, 5)
        + f"\n\nThe knee (the widest forward within 1.5x a one-token forward) is {data['roofline_knee_tokens']} "
        f"tokens; the best prediction ({verified['candidate']}) was timed at {verified['speedup']:.2f}x greedy, "
        f'inside the 3% margin, so tune wrote `decoding="{data["choice"]["decoding"]}"`. File: {page.ref(path)}.'
    )


@block("tune-trained")
def tune_trained(page: Page) -> str:
    path = f"{JF}/tune-trained.json"
    data = load(path)
    rows = _predictions(path, 5)
    timed = "; ".join(
        f"{v['candidate']} {v['speedup']:.2f}x (medians {v['seconds']:.1f} s against {v['greedy_seconds']:.1f} s)"
        for v in data["verified"]
    )
    return (
        _roofline(path)
        + "\n\n"
        + rows
        + f"\n\nTimed against greedy over {data['verified'][0]['rounds']} alternating rounds: {timed}. "
        f"File: {page.ref(path)}."
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
        "**fourth round on round 3's own trajectories, noise window 16 (round 4, shipped)**",
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
    ("**round 4, noise window 16 (shipped)**", ROUND4),
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


@block("demo-counts")
def demo_counts(page: Page) -> str:
    b, t = evaluation(f"evaluate-bench-prompts-{SHIPPED}")
    rows = [
        "| model | new tokens | greedy forwards | Jacobi forwards | tokens/forward | forwards saved | identical |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    for label, side in (("untrained", b), ("+ Jacobi Forcing adapter", t)):
        s = side.setting("recycling")
        greedy = s["new_tokens"] - 4  # one greedy forward per token after the first, per prompt
        rows.append(
            f"| {label} | {s['new_tokens']} | {greedy} | {s['forwards']} | {s['tokens_per_forward']:.2f} | "
            f"{(1 - s['forwards'] / greedy):.1%} | {'yes' if s['identical_to_greedy'] else 'no'} |"
        )
    return "\n".join(rows) + (
        f"\n\nFile: {page.ref(f'{JF}/evaluate-bench-prompts-{SHIPPED}.json')} (the same prompts and setting, "
        f"batched); the GPU demo's transcript: {page.ref('gpu-h100/demo-batch1.md')}."
    )


def _gpu_rows(path: str, labels: dict[str, str], bold: str | None, batch_forwards: bool) -> list[str]:
    data = load(path)
    out = []
    for row in data["summary"]:
        if row["setting"] not in labels:
            continue
        cells = [f"{row['tokens_per_forward']:.2f}"]
        if batch_forwards:
            per_batch: dict[int, int] = {}
            for s in data["samples"]:
                if s["setting"] == row["setting"]:
                    per_batch[s["batch"]] = max(per_batch.get(s["batch"], 0), s["forwards"])
            cells.append(str(sum(per_batch.values())))
        best = f"{row['speedup_vs_best_ar']:.2f}x"
        if row["kind"] == "jacobi":
            best += f" ({rng(row['speedup_vs_best_ar_range'])})"
        cells += [
            f"{row['tokens_per_s']:.1f} ({rng(row['tokens_per_s_range'], '.1f')})",
            f"{row['speedup_vs_ar']:.2f}x",
            best,
        ]
        label = labels[row["setting"]]
        if row["setting"] == bold:
            label, cells = f"**{label}**", [f"**{c}**" for c in cells]
        out.append(f"| {label} | " + " | ".join(cells) + f" | {row['identical']}/{row['samples']} |")
    return out


GPU_LABELS = {
    "AR (generate)": "AR (`generate`)",
    "AR (static cache + compile)": "AR (static cache + `torch.compile`)",
    "Jacobi plain n=16": "Jacobi plain, block 16",
    "Jacobi both n=16": "Jacobi 2 blocks + recycling (pool 4), block 16",
    "Jacobi both n=32": "Jacobi 2 blocks + recycling (pool 4), block 32",
    "Jacobi default (block 8, pool 4)": "shipped (CPU) default: block 8, pool 4",
}


GRADE = "gpu-h200-grade"  # the adapter the shipped one replaced, every dtype and batch (2026-11-26)
SHIPPED_GRADE = "gpu-h200-shipped"  # the shipped adapter: float32 batch 1, bfloat16 batch 8 (2026-11-27)


def grade_rows(dtype: str | None = None, batch: int | None = None, folder: str = GRADE) -> list[dict]:
    """The decoding rows of a GPU-grade run (benchmarks/bench_gpu.py), of one dtype and batch size when given."""
    rows = load(f"{folder}/gpu-grade.json")["decode"]
    return [r for r in rows if dtype in (None, r["dtype"]) and batch in (None, r["batch_size"])]


def grade_best(dtype: str, batch: int = 1, folder: str = GRADE) -> dict:
    """The fastest Jacobi row of one dtype and batch size."""
    rows = grade_rows(dtype, batch, folder)
    return max((r for r in rows if r["kind"] == "jacobi"), key=lambda r: r["tokens_per_s"])


def _grade_table(folder: str, entries: tuple[tuple[str, int], ...]) -> list[str]:
    rows = [
        "| dtype | batch | setting | tokens/forward | batch forwards | tok/s | vs plain `generate` | vs CUDA-graph greedy "
        "| speedup / forward saving | identical to `generate` | answers looping |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for dtype, batch in entries:
        best = grade_best(dtype, batch, folder)
        for r in grade_rows(dtype, batch, folder):
            cells = [
                dtype,
                str(batch),
                r["setting"].replace("AR (static cache + compile)", "AR (static cache + compile, CUDA graphs)"),
                f"{r['tokens_per_forward']:.2f}",
                str(r["batch_forwards"]),
                f"{r['tokens_per_s']:.1f}",
                f"{r['speedup_vs_generate']:.2f}x",
                f"{r['speedup_vs_best_greedy']:.2f}x",
                "-" if r["speedup_per_forward_saving"] is None else f"{r['speedup_per_forward_saving']:.2f}",
                f"{r['identical']}/{r['samples']}",
                f"{r['collapsed']}/{r['samples']}",
            ]
            if r is best:
                cells = [f"**{c}**" if i > 0 else c for i, c in enumerate(cells)]
            rows.append(f"| {' | '.join(cells)} |")
    return rows


@block("gpu-grade-decode")
def gpu_grade_decode(page: Page) -> str:
    rows = _grade_table(GRADE, (("float32", 1), ("bfloat16", 1), ("float32", 8), ("bfloat16", 8)))
    env = load(f"{GRADE}/gpu-grade.json")["environment"]
    return "\n".join(rows) + (
        f"\n\n{env['nvidia_smi']} (driver), torch {env['torch']}, transformers {env['transformers']}, CUDA "
        f"{env['cuda']}. Files: {page.ref(GRADE + '/gpu-grade.json', 'gpu-grade.json')}, "
        + ", ".join(
            page.ref(f"{GRADE}/decode-{d}-b{b}/bench.json", f"{d} batch {b}")
            for d in ("float32", "bfloat16")
            for b in (1, 8)
        )
        + " bench.json (batch 8: 3 timed rounds, medians; batch 1: one round)."
    )


@block("gpu-shipped-decode")
def gpu_shipped_decode(page: Page) -> str:
    data = load(f"{SHIPPED_GRADE}/gpu-grade.json")
    rows = _grade_table(SHIPPED_GRADE, (("float32", 1), ("bfloat16", 8)))
    host = [
        "| dtype | batch | steps | ms per step | forward launch to read-back (ms) | host work (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    host += [
        f"| {h['dtype']} | {h['batch_size']} | {h['steps']} | {h['ms_per_step']:.2f} | "
        f"{h['device_ms_per_step']:.2f} | **{h['host_ms_per_step']:.2f}** |"
        for h in data["host"]
    ]
    bound = [
        f"{p['dtype']} batch {p['batch_size']} width {p['width']}: {p['projected_speedup']:.2f}x"
        for p in data["projections"]
        if p["architecture"] == "smollm2-135m"
    ]
    env = data["environment"]
    files = ", ".join(
        page.ref(f"{SHIPPED_GRADE}/{name}", text)
        for name, text in (
            ("gpu-grade.json", "gpu-grade.json"),
            ("decode-float32-b1/bench.json", "float32 batch 1"),
            ("decode-bfloat16-b8/bench.json", "bfloat16 batch 8"),
            ("host-bfloat16-b8.json", "host work"),
        )
    )
    return (
        "\n".join(rows)
        + "\n\nHost work per step (`benchmarks/profile_step.py --split --rounds 3`, 2 blocks of 16 + recycling on the "
        "compiled static cache, medians of 3 rounds):\n\n"
        + "\n".join(host)
        + "\n\nThe same speedups from forward costs alone (forward saving / cost of the setting's width on the "
        f"earlier run's curves, i.e. with no loop overhead; a bound, not a measurement): {'; '.join(bound)}.\n\n"
        f"{env['nvidia_smi']} (driver), torch {env['torch']}, transformers {env['transformers']}, CUDA {env['cuda']}; "
        f"one timed round after untimed warm-ups. Files: {files}."
    )


def _host_bf16_b8() -> tuple[dict, dict]:
    """The shipped run's host phase (bfloat16, batch 8) and the forward-cost bound of the same setting (width 92)."""
    data = load(f"{SHIPPED_GRADE}/gpu-grade.json")
    host = next(h for h in data["host"] if (h["dtype"], h["batch_size"]) == ("bfloat16", 8))
    bound = next(
        p
        for p in data["projections"]
        if (p["architecture"], p["dtype"], p["batch_size"], p["width"]) == ("smollm2-135m", "bfloat16", 8, 92)
    )
    return host, bound


@block("gpu-shipped-host-sentence")
def gpu_shipped_host_sentence(page: Page) -> str:
    host, bound = _host_bf16_b8()
    later = _trace_split("bfloat16", 8)
    return (
        f"{later['host']:.1f} of a {later['ms']:.1f} ms batch-8 bfloat16 step on the H200, {host['host_ms_per_step']:.1f} "
        f"of {host['ms_per_step']:.1f} on the lease before; the forward costs alone would give "
        f"{bound['projected_speedup']:.2f}x"
    )


@block("gpu-shipped-settings-sentence")
def gpu_shipped_settings_sentence(page: Page) -> str:
    def pair(dtype: str, batch: int) -> str:
        rows = {r["setting"].split(" (")[0]: r for r in grade_rows(dtype, batch, SHIPPED_GRADE)}
        both, default = rows["Jacobi both n=16"], rows["Jacobi default"]
        return f"{both['speedup_vs_best_greedy']:.2f}x against the default's {default['speedup_vs_best_greedy']:.2f}x"

    return f"{pair('float32', 1)} at batch 1 in float32, and {pair('bfloat16', 8)} at batch 8 in bfloat16"


@block("gpu-tpf-settings")
def gpu_tpf_settings(page: Page) -> str:
    path = f"{SHIPPED_GRADE}/tpf-settings-cpu.json"
    data = load(path)
    rows = [
        "| setting | widest forward | forwards | tokens/forward | identical to greedy |",
        "|---|---:|---:|---:|:---:|",
    ]
    for name, r in data["rows"].items():
        rows.append(
            f"| {name} | {r['width']} | {r['forwards']} | {r['tokens_per_forward']:.2f} | "
            f"{r['identical']}/{data['prompts']} |"
        )
    return "\n".join(rows) + (
        f"\n\n`benchmarks/tpf_settings.py` on this CPU: the shipped adapter, float32, batch 1, the same "
        f"{data['prompts']} prompts, {data['max_new_tokens']} tokens. File: {page.ref(path)}."
    )


TRACE = "gpu-h200-trace"  # where a step's time goes on the device and the host (H200, 2026-11-27, session 23)


def _trace_split(dtype: str, batch: int) -> dict:
    """A traced entry's unprofiled split (profile_step --split): its own file's medians, or the transcribed split."""
    record = load(f"{TRACE}/trace-{dtype}-b{batch}.json")
    if "split_rounds" in record:
        step = statistics.median(r["ms_per_step"] for r in record["split_rounds"])
        return {"ms": step, "device": record["device_ms_per_step"], "host": record["host_ms_per_step"]}
    split = load(f"{TRACE}/split-{dtype}-b{batch}.json")
    device, host = split["device_ms_per_step"], split["host_ms_per_step"]
    return {"ms": device + host, "device": device, "host": host}


@block("gpu-trace")
def gpu_trace(page: Page) -> str:
    rows = [
        "| dtype | batch | Jacobi step (ms) | of which host work | Jacobi kernels per forward (ms) | greedy kernels per "
        "token (ms) | kernels: Jacobi / greedy | profiled wall per forward, Jacobi / greedy (ms) | graph launches per "
        "forward, Jacobi / greedy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    files = []
    for dtype, batch in (("float32", 1), ("bfloat16", 1), ("bfloat16", 8)):
        name = f"trace-{dtype}-b{batch}.json"
        record, split = load(f"{TRACE}/{name}"), _trace_split(dtype, batch)
        jacobi, greedy = record["trace"]["jacobi"], record["trace"]["greedy"]
        rows.append(
            f"| {dtype} | {batch} | {split['ms']:.2f} | {split['host']:.2f} | {jacobi['kernel_ms_per_forward']:.2f} | "
            f"{greedy['kernel_ms_per_forward']:.2f} | {jacobi['kernels_per_forward']:.0f} / "
            f"{greedy['kernels_per_forward']:.0f} | {jacobi['wall_ms_per_forward']:.2f} / "
            f"{greedy['wall_ms_per_forward']:.2f} | {jacobi['graph_launches_per_forward']:.2f} / "
            f"{greedy['graph_launches_per_forward']:.2f} |"
        )
        files.append(page.ref(f"{TRACE}/{name}", f"{dtype} batch {batch}"))
    return "\n".join(rows) + (
        "\n\n`benchmarks/profile_step.py --trace` (and `--split` for the step and its host work) on one NVIDIA H200, "
        "the shipped adapter, 2 blocks of 16 + recycling on the compiled static cache against greedy on the static "
        'cache compiled in mode "reduce-overhead", the first `packages` test prompt(s), 128 tokens; per forward the '
        "prefill included. Files: "
        + ", ".join(files)
        + f", {page.ref(f'{TRACE}/split-bfloat16-b8.json', 'the batch-8 split')}."
    )


@block("gpu-shipped-sentence")
def gpu_shipped_sentence(page: Page) -> str:
    fp32, bf16 = grade_best("float32", 1, SHIPPED_GRADE), grade_best("bfloat16", 8, SHIPPED_GRADE)

    def setting(row: dict) -> str:
        return "2 blocks + recycling" if row["setting"].startswith("Jacobi both") else "the shipped default"

    return (
        f"{fp32['speedup_vs_best_greedy']:.2f}x CUDA-graph greedy in float32 at batch 1 with {setting(fp32)} "
        f"({fp32['tokens_per_forward']:.2f} tokens per forward, {fp32['identical']}/{fp32['samples']} identical) and "
        f"{bf16['speedup_vs_best_greedy']:.2f}x in bfloat16 at batch 8 with {setting(bf16)}"
    )


@block("gpu-grade-projection")
def gpu_grade_projection(page: Page) -> str:
    data = load(f"{GRADE}/gpu-grade.json")
    paper = data["paper_tokens_per_forward"]
    rows = [
        "| architecture (random weights) | dtype | batch | width | forward cost vs 1 token | projected at the measured "
        f"tokens/forward | projected at the paper's {paper} |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in data["projections"]:
        rows.append(
            f"| {p['architecture']} | {p['dtype']} | {p['batch_size']} | {p['width']} | {p['cost_vs_one_token']:.2f} | "
            f"{p['projected_speedup']:.2f}x (at {p['measured_forward_saving']:.2f}) | "
            + ("-" if p["projected_speedup_at_paper_tpf"] is None else f"{p['projected_speedup_at_paper_tpf']:.2f}x")
            + " |"
        )
    curves = ", ".join(
        page.ref(f"{GRADE}/curve-{a}-{d}.json", f"{a} {d}")
        for a, d in (
            ("smollm2-135m", "float32"),
            ("smollm2-135m", "bfloat16"),
            ("qwen2.5-coder-1.5b", "bfloat16"),
            ("qwen2.5-coder-7b", "bfloat16"),
        )
    )
    return "\n".join(rows) + f"\n\nCurves (batch 1 and 8, widths 1-256): {curves}."


@block("gpu-grade-sentence")
def gpu_grade_sentence(page: Page) -> str:
    fp32, bf16 = grade_best("float32"), grade_best("bfloat16")
    return (
        f"{fp32['speedup_vs_best_greedy']:.2f}x CUDA-graph greedy in float32 ({fp32['tokens_per_forward']:.2f} tokens "
        f"per forward, {fp32['identical']}/{fp32['samples']} identical) and {bf16['speedup_vs_best_greedy']:.2f}x in "
        f"bfloat16 ({bf16['identical']}/{bf16['samples']} identical to bfloat16 `generate`) at batch 1; at batch 8 "
        f"{grade_best('float32', 8)['speedup_vs_best_greedy']:.2f}x in float32 and "
        f"{grade_best('bfloat16', 8)['speedup_vs_best_greedy']:.2f}x in bfloat16"
    )


@block("gpu-h200-batch1")
def gpu_h200_batch1(page: Page) -> str:
    rows = [
        "| model, setting | tokens/forward | tok/s (range) | vs plain `generate` | vs static cache + compile (range) "
        "| identical |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for model, folder, bold in (("untrained", "untrained-b1", None), ("trained", "trained-b1", "Jacobi both n=16")):
        labels = {k: f"{model}, {v}" for k, v in GPU_LABELS.items() if k != "AR (generate)"}
        rows += _gpu_rows(f"gpu-h200/{folder}/bench.json", labels, bold, batch_forwards=False)
    return "\n".join(rows) + (
        f"\n\nFiles: {page.ref('gpu-h200/untrained-b1/bench.json', 'untrained')} (2 rounds), "
        f"{page.ref('gpu-h200/trained-b1/bench.json', 'trained')} (3 rounds); notes in "
        f"{page.ref('gpu-h200/README.md')}."
    )


@block("gpu-h100-batch8")
def gpu_h100_batch8(page: Page) -> str:
    rows = [
        "| setting | tokens/forward | batch forwards | tok/s (range) | vs plain `generate` "
        "| vs static cache + compile (range) | identical |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    path = "gpu-h100/bench-trained-batch8/bench.json"
    rows += _gpu_rows(path, GPU_LABELS, "Jacobi both n=16", batch_forwards=True)
    return "\n".join(rows) + f"\n\nFile: {page.ref(path)}; notes in {page.ref('gpu-h100/README.md')}."


@block("gpu-h200-batch8")
def gpu_h200_batch8(page: Page) -> str:
    u = bench_rows("gpu-h200/untrained-b8/bench.json")["Jacobi both n=16"]
    t = bench_rows("gpu-h200/trained-b8/bench.json")["Jacobi both n=16"]
    return (
        f"the trained wide setting ran at {t['speedup_vs_ar']:.2f}x plain `generate` and "
        f"{t['speedup_vs_best_ar']:.2f}x compiled greedy ({rng(t['speedup_vs_best_ar_range'])} over the rounds), the "
        f"untrained one at {u['speedup_vs_ar']:.2f}x and {u['speedup_vs_best_ar']:.2f}x "
        f"({page.ref('gpu-h200/trained-b8/bench.json', 'trained')}, "
        f"{page.ref('gpu-h200/untrained-b8/bench.json', 'untrained')})"
    )


@block("forward-cost-ratios")
def forward_cost_ratios(page: Page) -> str:
    cpu = {int(k): v for k, v in load("cpu-tune-embedded.json")["roofline_seconds"].items()}
    gpu = {point["tokens"]: point["vs_one_token"] for point in load("gpu-h100/forward-cost.json")["float32-batch1"]}
    return (
        f"on the 2-core CPU a 16-token forward costs {cpu[16] / cpu[1]:.2f}x a one-token one "
        f"({page.ref('cpu-tune-embedded.json')}), on one H100 a 512-token one {gpu[512]:.2f}x "
        f"({page.ref('gpu-h100/forward-cost.json')})"
    )


@block("card-gpu")
def card_gpu(page: Page) -> str:
    b1 = bench_rows("gpu-h200/trained-b1/bench.json")["Jacobi both n=16"]
    h100 = bench_rows("gpu-h100/bench-trained-batch8/bench.json")["Jacobi both n=16"]
    h200 = bench_rows("gpu-h200/trained-b8/bench.json")["Jacobi both n=16"]
    return (
        f"{b1['speedup_vs_best_ar']:.2f}x greedy with static cache + `torch.compile` at batch 1 on an H200 "
        f"({rng(b1['speedup_vs_best_ar_range'])} over the rounds; {b1['speedup_vs_ar']:.2f}x plain `generate`, "
        f"{b1['tokens_per_forward']:.2f} tokens per forward), and in batches of 8 {h100['speedup_vs_best_ar']:.2f}x "
        f"on an H100 and {h200['speedup_vs_best_ar']:.2f}x on the H200, where a batch waits for its slowest row "
        f"({page.ref('gpu-h200/trained-b1/bench.json')}, {page.ref('gpu-h100/bench-trained-batch8/bench.json')}, "
        f"{page.ref('gpu-h200/trained-b8/bench.json')});"
    )


REPAIR_PATHS = f"{JF}/bench-repair-paths/bench.json"
SHIPPED_PATHS = f"{JF}/bench-base-scale-paths/bench.json"
RETUNE_HELDOUT = f"{JF}/retune-heldout-base-scale/bench.json"
PATHS_HELDOUT = f"{JF}/paths-heldout-base-scale/bench.json"


def _bench_paths(page: Page, path: str) -> str:
    rows = load(path)["summary"]
    looping = "; ".join(f"{row['setting']} {row['collapsed']} of {row['samples']}" for row in rows)
    return (
        markdown_table(path.replace("bench.json", "bench.md"))
        + f"\n\nAnswers that end in a loop (the last 64 tokens under 40% distinct 4-grams): {looping}. "
        f"File: {page.ref(path)}."
    )


@block("bench-md-repair-paths")
def bench_md_repair_paths(page: Page) -> str:
    return _bench_paths(page, REPAIR_PATHS)


@block("bench-md-shipped-paths")
def bench_md_shipped_paths(page: Page) -> str:
    return _bench_paths(page, SHIPPED_PATHS)


@block("bench-md-retune-heldout")
def bench_md_retune_heldout(page: Page) -> str:
    """The shipped adapter's candidate defaults on held-out prompts no default was chosen on (recipe `retune-heldout`)."""
    return _bench_paths(page, RETUNE_HELDOUT)


@block("bench-md-paths-heldout")
def bench_md_paths_heldout(page: Page) -> str:
    """The shipped default eager and on the static cache, not compiled and compiled, in one width and in five (recipe
    `paths-heldout`)."""
    return _bench_paths(page, PATHS_HELDOUT)


HOST_WORK = "host-work-cpu"


@block("host-work-cpu")
def host_work_cpu(page: Page) -> str:
    """The loop's own ops per step on the compiled static path, before and after the host-side layouts, masks and
    in-graph slot moves (benchmarks/profile_step.py --ops, on the commit before and the commit after)."""
    lines = [
        "| batch | code | steps | aten ops per step outside the compiled forward | commonest of them | ms per step (CPU) |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for batch in (1, 8):
        for name, label in ((f"before-c18c5d3-batch{batch}", "before (c18c5d3)"), (f"after-batch{batch}", "after")):
            run = load(f"{HOST_WORK}/{name}.json")
            common = ", ".join(
                f"{op.removeprefix('aten::')} {count:.1f}"
                for op, count in list(run["ops_by_name_per_step"].items())[:4]
            )
            bold = "**" if label == "after" else ""
            lines.append(
                f"| {batch} | {page.ref(f'{HOST_WORK}/{name}.json', label)} | {run['steps']} | "
                f"{bold}{run['ops_per_step']:.1f}{bold} | {common} | {run['ms_per_step']:.0f} |"
            )
    return "\n".join(lines)


@block("host-split-cpu")
def host_split_cpu(page: Page) -> str:
    """Each step's host work beside its device part on the compiled static path (profile_step --split): the rounds'
    median and every round's host figure."""
    lines = [
        "| batch | steps | ms per step | forward to read-back (ms) | host work (ms) | host work, each round (ms) | file |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for batch in (1, 8):
        name = f"{HOST_WORK}/split-batch{batch}.json"
        run = load(name)
        rounds = ", ".join(f"{r['host_ms_per_step']:.1f}" for r in run["split_rounds"])
        total = statistics.median(r["ms_per_step"] for r in run["split_rounds"])
        lines.append(
            f"| {batch} | {run['steps']} | {total:.0f} | {run['device_ms_per_step']:.0f} | "
            f"**{run['host_ms_per_step']:.1f}** | {rounds} | {page.ref(name, 'json')} |"
        )
    return "\n".join(lines)


@block("vllm-base-scale")
def vllm_base_scale(page: Page) -> str:
    """vLLM on this CPU with the shipped adapter merged (benchmarks/vllm_cpu.py): AR, n-gram and JacobiProposer."""
    path = "vllm-cpu/base-scale/vllm-cpu.md"
    return f"{markdown_table(path)}\n\nFiles: {page.ref(path)}, {page.ref('vllm-cpu/base-scale/vllm-cpu.json')}."


# every CPU bench of the embedded model: greedy's speed differs between sittings
CPU_BENCHES = [
    "cpu-humaneval-chat.json",
    "cpu-humaneval-raw.json",
    f"{JF}/bench-untrained/bench.json",
    f"{JF}/bench-trained/bench.json",
    f"{JF}/bench-round2-beside-round3-onpolicy/bench.json",
    f"{JF}/bench-round4/bench.json",
    REPAIR_PATHS,
    SHIPPED_PATHS,
    RETUNE_HELDOUT,
    PATHS_HELDOUT,
]


@block("greedy-speed-range")
def greedy_speed_range(page: Page) -> str:
    speeds = [row["tokens_per_s"] for path in CPU_BENCHES for row in load(path)["summary"] if row["kind"] == "ar"]
    return f"{min(speeds):.1f} to {max(speeds):.1f}"


OVERHEAD = "cpu-overhead"


@block("overhead-variants")
def overhead_variants(page: Page) -> str:
    """Tokens per forward per variant from `hf-jacobi overhead`; its timings came from a shared, loaded machine."""
    parts = []
    for name, title in (
        ("overhead", "plain Jacobi, 6 HumanEval prompts, 96 tokens"),
        ("variants", "the four variants, 4 HumanEval prompts, 64 tokens"),
    ):
        path = f"{OVERHEAD}/{name}.json"
        if not (RESULTS / path).is_file():
            parts.append(f"_{title}_: not measured with today's code yet.")
            continue
        rows = [
            f"_{title}_ ({page.ref(path)}):",
            "",
            "| variant | block | tokens/forward | vs plain | mean width | recycled tokens | identical |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in load(path)["summary"]:
            rows.append(
                f"| {r['variant']} | {r['block_size']} | {r['tokens_per_forward']:.3f} | {r['vs_plain']:.3f}x | "
                f"{r['mean_width']:.1f} | {r['recycled_tokens']} | {'yes' if r['all_identical'] else 'no'} |"
            )
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------------------------------- rendering


def page_paths(root: Path = ROOT) -> list[Path]:
    """The pages that may hold figures, relative to the root."""
    found: list[Path] = []
    for pattern in PAGE_GLOBS:
        found += sorted(p.relative_to(root) for p in root.glob(pattern))
    return found


def render_text(text: str, page: Page) -> str:
    """`text` with every marked block rendered again; an unknown block name is an error naming the page. Markers in
    fenced code blocks or right after a backtick (in a code span) are examples and stay as they are."""

    def fill(match: re.Match) -> str:
        name, body = match["name"], match["body"]
        if name not in BLOCKS:
            raise ValueError(f"{page.path}: no figure block named {name!r} (known: {', '.join(sorted(BLOCKS))})")
        rendered = BLOCKS[name](page).strip("\n")
        if body.startswith("\n"):  # a block of lines: markers on lines of their own
            rendered = f"\n{rendered}\n"
        return f"<!-- figures:{name} -->{rendered}<!-- /figures:{name} -->"

    # markers inside fenced code blocks are examples (docs/development.md shows some), not figures
    out, start = [], 0
    for fence in FENCE.finditer(text):
        out += [MARKER.sub(fill, text[start : fence.start()]), fence[0]]
        start = fence.end()
    return "".join([*out, MARKER.sub(fill, text[start:])])


def render_pages(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """Every page holding a marker: its committed text and its text rendered from the results files."""
    out = {}
    for rel in page_paths(root):
        text = (root / rel).read_text(encoding="utf-8")
        if "<!-- figures:" in text:
            out[rel] = (text, render_text(text, Page(rel)))
    return out


def stale_pages(root: Path = ROOT) -> str:
    """A unified diff of every page whose figures disagree with its files ('' when all agree)."""
    diffs = []
    for rel, (old, new) in render_pages(root).items():
        if old != new:
            diffs += difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"{rel} (committed)", f"{rel} (rendered)"
            )
    return "".join(diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print the diff of pages that disagree, exit 1")
    args = parser.parse_args(argv)
    if args.check:
        diff = stale_pages()
        if diff:
            print(diff, end="")
            print("\nfigures out of date: run `make docs-figures`", file=sys.stderr)
            return 1
        return 0
    for rel, (old, new) in render_pages().items():
        if old != new:
            (ROOT / rel).write_text(new, encoding="utf-8")
            print(f"rendered {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
