"""Stage 4: every variant judged by `hf-jacobi quality` beside the base, and one table with confidence intervals.

Each judge answers the campaign's held-out plain requests (judge.parquet) and the committed `requests` (48) and
`code-tasks` (32) sets, and times held-out tokens per forward on `packages` test prompts, as the committed quality
front does; the CPU campaign adds HumanEval problems and 32 of the judging requests (`hf-jacobi evaluate`). On the
GPU the base is judged once, while the variants train, and every variant's judge (one process each, side by side)
reuses its figures (`--base-results`), so all share one protocol; run inline (the CPU rehearsal), one judge measures
the base and every variant. The table adds what a reader needs to weigh a loop count: the
Wilson 95% interval of each collapse rate (and of code tasks passed), since a few hundred answers leave a wide one.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QUALITY_SETS = ("requests", "code-tasks")
TINY_QUALITY = ["--num-prompts", "2", "--num-speed-prompts", "2", "--max-new-tokens", "16", "--batch-size", "4"]
MAKEFILE = Path(__file__).resolve().parents[3] / "recipes" / "smollm2-135m" / "Makefile"


def make_variable(name: str, makefile: Path = MAKEFILE) -> list[str]:
    """A variable of the recipe's Makefile (`NAME := ...` or `NAME ?= ...` on one line), split as the shell splits it:
    what the campaign shares with the Makefile's targets is written once, there."""
    for line in makefile.read_text(encoding="utf-8").splitlines():
        if found := re.match(rf"{re.escape(name)}\s*[:?]=(.*)", line):
            return shlex.split(found.group(1))
    raise LookupError(f"{makefile} defines no {name} (NAME := value on one line)")


HUMANEVAL_GATE = make_variable("HUMANEVAL_GATE")
"""`hf-jacobi evaluate` as the shipped adapter's HumanEval figures were taken, read from the recipe's Makefile: the
first 16 problems as chat turns, block 8, plain and with recycling, and the NLL of the 164 canonical solutions."""
TINY_HUMANEVAL = ["--num_prompts", "2", "--max_new_tokens", "16"]
HUMANEVAL_FILE = "evaluate-humaneval.json"
HUMANEVAL_SETTINGS = {"plain": "humaneval-b8-plain", "recycling": "humaneval-b8-recycling"}
"""The HumanEval settings' names beside quality's own speed settings (`plain`, `both`: `packages`, block 16)."""
JUDGE_SPEED = [
    "--num_prompts",
    "32",
    "--settings",
    "plain",
    "both",
    "--block_size",
    "16",
    "--max_new_tokens",
    "128",
    "--batch_size",
    "16",
]
"""`hf-jacobi evaluate` on the first 32 judging requests, plain and 2 blocks + recycling at block 16, 128 new tokens
as the judge's answers. Why beside the `packages` speed prompts: those are 16 code prompts, while half the campaign's
training prompts are plain requests like these, so speed where the data is (and on twice the prompts) is what says
whether more of it helps; the targets stay on the committed front's prompts. 32, not 64: on a CPU without bfloat16
units these requests are slow to decode, mostly in 2 blocks + recycling (judging times: docs/results.md, "The CPU
campaign"), and the base's figures are measured once (`--base_results`)."""
TINY_JUDGE_SPEED = ["--num_prompts", "2", "--max_new_tokens", "16", "--batch_size", "2"]
JUDGE_SPEED_FILE = "evaluate-judge.json"
JUDGE_SPEED_SETTINGS = {"plain": "judge-b16-plain", "both": "judge-b16-both"}
EVALUATIONS = {HUMANEVAL_FILE: ("humaneval", HUMANEVAL_SETTINGS), JUDGE_SPEED_FILE: ("judge", JUDGE_SPEED_SETTINGS)}
"""Each `hf-jacobi evaluate` part of a judge: its file, and the prefix and names its settings take in a row."""
QUALITY_FILE = "quality.json"
"""What `hf-jacobi quality` writes in a run's judged folder."""
JUDGE_FILES = (QUALITY_FILE, *EVALUATIONS)
"""What a finished judge of one run leaves in its folder (each part skipped where its file is there)."""


@dataclass
class JudgeSettings:
    """`hf-jacobi quality` settings shared by every judge of one campaign (one protocol)."""

    batch_size: int = 64
    dtype: str = "float32"
    tiny: bool = False

    def arguments(self, model: str | None, judge_file: Path, output: Path) -> list[str]:
        """The arguments of a base-only judge; a variant's adds --adapters and --base-results."""
        arguments = ["quality", "--sets", *QUALITY_SETS, str(judge_file), "--dtype", self.dtype]
        arguments += ["--batch-size", str(self.batch_size), "--output-dir", str(output)]
        arguments += ["--model", model] if model is not None else []
        return arguments + (TINY_QUALITY if self.tiny else [])

    def humaneval_arguments(
        self, model: str | None, adapter: Path, output: Path, base_results: Path | None = None
    ) -> list[str]:
        """`hf-jacobi evaluate` of the base and `adapter` on HumanEval problems, into `output`/HUMANEVAL_FILE (the
        base's figures from `base_results`, an earlier run's report, where given)."""
        file = output / HUMANEVAL_FILE
        return self._evaluate(HUMANEVAL_GATE, TINY_HUMANEVAL, model, adapter, file, base_results)

    def judge_speed_arguments(
        self, model: str | None, adapter: Path, judge_file: Path, output: Path, base_results: Path | None = None
    ) -> list[str]:
        """`hf-jacobi evaluate` of the base and `adapter` on the judging requests, into `output`/JUDGE_SPEED_FILE (the
        base's figures from `base_results` where given)."""
        flags = ["--prompts", str(judge_file), *JUDGE_SPEED]
        return self._evaluate(flags, TINY_JUDGE_SPEED, model, adapter, output / JUDGE_SPEED_FILE, base_results)

    def _evaluate(
        self, flags: list[str], tiny: list[str], model: str | None, adapter: Path, file: Path, base: Path | None
    ) -> list[str]:
        arguments = ["evaluate", *flags, "--adapter", str(adapter), "--dtype", self.dtype, "--output_file", str(file)]
        arguments += ["--model_name_or_path", model] if model is not None else []
        arguments += ["--base_results", str(base)] if base is not None else []
        return arguments + (tiny if self.tiny else [])

    def base_report(self, judged: Path, file: str) -> Path | None:
        """An earlier run's report `file` under `judged` (one folder a run) whose base figures a new run's evaluation
        can reuse: the first, by folder name, written in this campaign's dtype (reports written before evaluate
        recorded its dtype cannot be reused, and are passed over)."""
        for report in sorted(judged.glob(f"*/{file}")):
            try:
                if json.loads(report.read_text(encoding="utf-8")).get("dtype") == self.dtype:
                    return report
            except (OSError, ValueError):
                continue
        return None


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for z = 1.96); (0, 1) without trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _set_label(name: str) -> str:
    return "judge" if name.endswith(".parquet") else name


def _bar_label(name: str) -> str:
    """A quality bar's name (`<set>/<measure>`) with the judging file's path shortened as its set is."""
    source, _, measure = name.rpartition("/")
    return f"{_set_label(source)}/{measure}"


def model_row(
    model: dict[str, Any], targets: dict[str, bool] | None, evaluations: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One model's figures from a quality.json entry, with intervals, per-setting tokens per forward and bars met;
    `evaluations` (its side of each `hf-jacobi evaluate` report, by EVALUATIONS file) adds their settings, and the
    HumanEval one the canonical NLL."""
    sets = {}
    for name, figures in model["quality"].items():
        answers = figures["answers"]
        entry = {
            "answers": answers,
            "collapsed": figures["collapsed"],
            "collapse_wilson95": [round(x, 4) for x in wilson(figures["collapsed"], answers)],
            "distinct_3grams": figures["distinct_3grams"],
            "base_nll": figures["base_nll"],
            "identical_to_base": figures.get("identical_to_base"),
        }
        if figures.get("code_passed") is not None:
            entry["code_passed"] = figures["code_passed"]
            entry["code_wilson95"] = [round(x, 4) for x in wilson(figures["code_passed"], answers)]
        sets[_set_label(name)] = entry
    speed = {s["name"]: s["tokens_per_forward"] for s in model["speed"]}
    lossless = [s.get("identical_to_greedy", True) for s in model["speed"]]
    evaluations = evaluations or {}
    for file, side in evaluations.items():
        prefix, names = EVALUATIONS[file]
        for setting in side["settings"]:
            speed[names.get(setting["name"], f"{prefix}-{setting['name']}")] = setting["tokens_per_forward"]
            lossless.append(setting["identical_to_greedy"])
    humaneval = evaluations.get(HUMANEVAL_FILE)
    unscored = 1.0 if targets is None else None  # the base is its own reference
    nll = None if humaneval is None else humaneval.get("humaneval_canonical_nll_vs_base", unscored)
    bars = (
        None
        if targets is None
        else {
            "met": sum(targets.values()),
            "of": len(targets),
            "failed": sorted(_bar_label(name) for name, ok in targets.items() if not ok),
        }
    )
    row = {"name": model["name"], "sets": sets, "tokens_per_forward": speed, "bars": bars, "lossless": all(lossless)}
    return row | {"canonical_nll_vs_base": nll}


def read_judged(folders: list[Path], variants: list[str]) -> list[dict[str, Any]]:
    """The base row and each variant's row, from whichever judges' folders finished (hold a quality.json): one judge
    may have measured the base alone, one variant beside the base's figures, or several variants at once. A folder
    named for a variant may also hold its `hf-jacobi evaluate` reports (EVALUATIONS: HumanEval, the judging
    requests), whose base sides are the base's."""
    models: dict[str, dict[str, Any]] = {}
    targets: dict[str, dict[str, bool]] = {}
    evaluated: dict[str, dict[str, dict[str, Any]]] = {}  # model -> evaluate file -> its side of the report
    for folder in folders:
        path = folder / QUALITY_FILE
        if path.is_file():
            results = json.loads(path.read_text())
            for model in results["models"]:
                models.setdefault(model["name"], model)
            targets.update(results.get("targets_met", {}))
        for file in EVALUATIONS:
            if (report_path := folder / file).is_file():
                report = json.loads(report_path.read_text())
                evaluated.setdefault(folder.name, {})[file] = report["trained"]
                evaluated.setdefault("base", {}).setdefault(file, report["base"])
    rows = [model_row(models["base"], None, evaluated.get("base"))] if "base" in models else []
    return rows + [
        model_row(models[name], targets[name], evaluated.get(name))
        for name in variants
        if name in models and name in targets
    ]


def choose_winner(rows: list[dict[str, Any]], setting: str = "plain") -> tuple[str | None, str]:
    """The variant meeting every quality bar with the most held-out tokens per forward at `setting`; if none meets
    them all, the one meeting most bars (then the most tokens per forward). Returns (name or None, the rule used)."""
    variants = [row for row in rows if row["bars"] is not None]
    if not variants:
        return None, "no variant was judged"
    best = max(
        variants,
        key=lambda r: (
            r["bars"]["met"] == r["bars"]["of"],
            r["bars"]["met"],
            r["tokens_per_forward"].get(setting, 0.0),
        ),
    )
    everything = best["bars"]["met"] == best["bars"]["of"]
    rule = (
        f"every quality bar met, most {setting} tokens per forward"
        if everything
        else (
            f"no variant met every bar: most bars met ({best['bars']['met']}/{best['bars']['of']}), then tokens per forward"
        )
    )
    return best["name"], rule


def markdown(rows: list[dict[str, Any]], extra: dict[str, dict[str, Any]]) -> str:
    """The judged table: per model and set, loops with their Wilson 95% interval, distinct 3-grams, the base's NLL,
    answers identical to the base's (and code tasks passed), then tokens per forward and bars met; `extra` adds
    per-variant columns (steps trained, weights judged)."""
    lines = [
        "| model | set | loops (Wilson 95%) | distinct 3-grams | base NLL | same as base | code passed |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        for name, s in row["sets"].items():
            low, high = s["collapse_wilson95"]
            code = (
                f"{s['code_passed']}/{s['answers']} ({s['code_wilson95'][0]:.2f}-{s['code_wilson95'][1]:.2f})"
                if ("code_passed" in s)
                else "-"
            )
            same = "-" if s["identical_to_base"] is None else f"{s['identical_to_base']}/{s['answers']}"
            lines.append(
                f"| {row['name']} | {name} | {s['collapsed']}/{s['answers']} ({low:.2f}-{high:.2f}) | "
                f"{s['distinct_3grams']:.3f} | {s['base_nll']:.3f} | {same} | {code} |"
            )
    lines += [
        "",
        "| model | tokens per forward | HumanEval canonical NLL (x base) | bars met | lossless | steps | weights judged |",
        "|---|---|---:|---|---|---:|---|",
    ]
    for row in rows:
        speed = ", ".join(f"{k} {v:.3f}" for k, v in row["tokens_per_forward"].items())
        bars = "-" if row["bars"] is None else f"{row['bars']['met']}/{row['bars']['of']}"
        info = extra.get(row["name"], {})
        nll = "-" if row.get("canonical_nll_vs_base") is None else f"{row['canonical_nll_vs_base']:.3f}x"
        lines.append(
            f"| {row['name']} | {speed} | {nll} | {bars} | {row['lossless']} | {info.get('steps', '-')} | "
            f"{info.get('judged', '-')} |"
        )
    return "\n".join(lines) + "\n"
