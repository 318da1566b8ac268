"""A training study's report: held-out tokens per forward against training tokens, and quality beside it, per run.

Each run is a training output folder whose trainer_state.json holds the curve `HeldOutSpeedCallback` logged. The
report is a Markdown table (first and last measurement of every figure) and a plot of tokens per forward against
tokens seen, one line per run and setting, so that runs of different lengths and batch sizes compare on one axis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from hf_jacobi.bench.report import save_figure
from hf_jacobi.training.heldout import PREFIX, heldout_curve

STATE_FILE = "trainer_state.json"
TPF_SUFFIX = "_tokens_per_forward"


@dataclass
class RunCurve:
    """One run's held-out measurements, in step order.

    `tokens_before` places a run that continued an earlier one (a second round starting from round 1's adapter) after
    the tokens that earlier run trained on, so both rounds read on one training-tokens axis.
    """

    name: str
    entries: list[dict]
    tokens_before: int = 0

    @property
    def tokens_trained(self) -> int:
        """Tokens this run itself trained on, by its last measurement."""
        return self.entries[-1].get("num_input_tokens_seen", 0)

    @property
    def settings(self) -> list[str]:
        keys = self.entries[0].keys() if self.entries else []
        return [k[len(PREFIX) + 1 : -len(TPF_SUFFIX)] for k in keys if k.endswith(TPF_SUFFIX)]

    def series(self, setting: str) -> tuple[list[int], list[float]]:
        key = f"{PREFIX}/{setting}{TPF_SUFFIX}"
        tokens = [self.tokens_before + e.get("num_input_tokens_seen", 0) for e in self.entries]
        return tokens, [e[key] for e in self.entries]


def chain_runs(runs: list[RunCurve], continues: dict[str, str]) -> list[RunCurve]:
    """`runs` with each run named as a key of `continues` placed after the run named by its value (in any order of
    the list, chains of rounds included); refuses unknown names and cycles."""
    by_name = {run.name: run for run in runs}
    for later, earlier in continues.items():
        for name in (later, earlier):
            if name not in by_name:
                raise ValueError(f"--continues names {name!r}, not a run of this study; runs: {sorted(by_name)}")

    def offset(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            raise ValueError(f"--continues makes a cycle: {' -> '.join((*seen, name))}")
        if name not in continues:
            return 0
        earlier = by_name[continues[name]]
        return offset(earlier.name, (*seen, name)) + earlier.tokens_trained

    return [replace(run, tokens_before=offset(run.name)) for run in runs]


def state_file(folder: Path) -> Path:
    """The run's trainer_state.json: in the folder itself, else in its latest checkpoint."""
    if (folder / STATE_FILE).is_file():
        return folder / STATE_FILE
    checkpoints = sorted(folder.glob("checkpoint-*/" + STATE_FILE), key=lambda p: int(p.parent.name.split("-")[-1]))
    if not checkpoints:
        raise FileNotFoundError(f"{folder} holds no {STATE_FILE} (neither itself nor a checkpoint-* folder)")
    return checkpoints[-1]


def load_run(folder: str | Path, name: str | None = None) -> RunCurve:
    """The held-out curve of a training run folder; refused when the run logged none."""
    folder = Path(folder)
    state = json.loads(state_file(folder).read_text(encoding="utf-8"))
    entries = heldout_curve(state.get("log_history", []))
    if not entries:
        raise ValueError(f"{folder} has no held-out measurements: train with --heldout_prompts to log them")
    return RunCurve(name or folder.name, entries)


def markdown_table(runs: list[RunCurve]) -> str:
    """First -> last value of every held-out figure per run."""
    settings = list(dict.fromkeys(s for run in runs for s in run.settings))
    header = ["run", "steps", "tokens seen", *[f"{s} tokens/forward" for s in settings], "distinct 3-grams"]
    header.append("NLL of base answers")
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for run in runs:
        first, last = run.entries[0], run.entries[-1]

        def change(key: str, spec: str = ".3f", first=first, last=last) -> str:
            if key not in first or key not in last:
                return "-"
            return f"{format(first[key], spec)} -> {format(last[key], spec)}"

        tokens = f"{run.tokens_before:,} + {run.tokens_trained:,}" if run.tokens_before else f"{run.tokens_trained:,}"
        cells = [run.name, str(last["step"]), tokens]
        cells += [change(f"{PREFIX}/{s}{TPF_SUFFIX}") for s in settings]
        cells += [change(f"{PREFIX}/distinct_3grams"), change(f"{PREFIX}/reference_nll")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: list[RunCurve], path: str | Path, title: str = "held-out tokens per forward") -> Path:
    """Tokens per forward against tokens seen, one line per run and setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9.5, 4.6))
    styles = ("-", "--", ":")  # matplotlib's colour cycle repeats after 10 lines; the style tells those apart
    lines = [(run, setting) for run in runs for setting in run.settings]
    for index, (run, setting) in enumerate(lines):
        tokens, tpf = run.series(setting)
        style = styles[(index // 10) % len(styles)]
        axis.plot(tokens, tpf, style, marker="o", markersize=3, label=f"{run.name} ({setting})")
    axis.set_xlabel("training tokens seen")
    axis.set_ylabel("tokens per forward (held-out)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: inside, it hid curves
    return save_figure(figure, path)
