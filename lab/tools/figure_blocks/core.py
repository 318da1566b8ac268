"""What every block module shares: the page a block is rendered into, the registry of blocks, and the readers of
the project's result formats under docs/results/."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "results"
JF = "jacobi-forcing-cpu"


@dataclass(frozen=True)
class Page:
    """The page a block is rendered into: links to results files depend on where it lies."""

    path: Path  # relative to the repository root

    def ref(self, path: str, text: str | None = None) -> str:
        """A reference to docs/results/<path> from this page."""
        text = text or path.rsplit("/", 1)[-1]
        if self.path.parts[0] == "model_cards":
            return f"`docs/results/{path}`"
        return f"[{text}]({self.url(path)})"

    def url(self, path: str) -> str:
        """The relative address of docs/results/<path> from this page (a link's or an image's target)."""
        return f"{'docs/results' if len(self.path.parts) == 1 else 'results'}/{path}"


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


def labels() -> dict:
    """docs/results/labels.json: what the results files do not say of themselves (the folder of each run, a machine
    that no file of a run names, the code each measurement ran, when each adapter shipped)."""
    return load("labels.json")


def run_folder(run: str) -> str:
    """The folder under docs/results/ that holds `run` (a key of labels.json's `runs`)."""
    return labels()["runs"][run]["folder"]


def run_machine(run: str) -> str:
    """The machine of `run`, as labels.json names it where none of its files does."""
    return labels()["runs"][run]["machine"]


def shipped_when(adapter: str) -> str:
    """When an adapter (its run name) was the package's, as labels.json says: `until <date>`, `<date> to <date>` or
    `since <date>`."""
    return labels()["shipped"][adapter]


def gpu_model(device: str) -> str:
    """The card's model in a device or machine description ("NVIDIA X (CUDA 13.0), torch ..." -> "X")."""
    return device.removeprefix("NVIDIA ").split()[0]


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


def heldout_curve(path: str) -> list[dict]:
    """The held-out figures a training run logged (`HeldOutSpeedCallback`), step by step, each step once (a run
    resumed at a measured step used to log that step a second time, with the same model)."""
    from hf_jacobi.training.heldout import heldout_curve as logged_curve

    entries = [e for e in logged_curve(load(path)["log_history"]) if "heldout/plain_tokens_per_forward" in e]
    return [e for i, e in enumerate(entries) if all(e["step"] != f["step"] for f in entries[:i])]


def bold_if(label: str, text: str) -> str:
    return f"**{text}**" if label.startswith("**") else text


# the shipped adapter and the rounds before it, each with the evaluation files that hold its held-out figures: the CPU
# campaign's point, the GPU-trained fresh adapter it replaced, then the CPU chain (when each shipped: `shipped_when`)
SHIPPED = "lora-r16-kl30-n9999"
PREVIOUS = "lora-r16-base-scale-kl10-step250"
REPAIR = "lora-r16-base-targets-step100"
ROUND4 = "lora-r16-round4-w16"
ROUND3 = "lora-r16-onpolicy-kl1-anchor300"
ROUND2 = "lora-r16-round2-kl1"
