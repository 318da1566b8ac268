"""Checking a re-run against the committed outputs it should reproduce, one stage of the recipe at a time.

The shipped weights come out of a chain (trajectories -> training -> the next round's trajectories -> ...) that takes
many hours on a CPU. Every stage's input and output is committed, so each stage can be re-run on
its own from the committed input and checked here against the committed output: trajectory folders row by row,
training logs step by step, adapters tensor by tensor, evaluation reports figure by figure. A stage that reproduces,
fed by inputs that reproduce, makes the chain reproduce without running it in one go.

What counts as equal is `figure_diff`'s rule: integers exactly, floats within a relative tolerance, wall-clock
figures and paths not compared.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hf_jacobi.data.shards import SETTINGS_FILE as COLLECTION_SETTINGS
from lab.figure_diff import count_figures, differences, read_json
from lab.study import STATE_FILE as TRAINER_STATE
from lab.study import state_file

ADAPTER_WEIGHTS = "adapter_model.safetensors"
PROMPT_FILE_SUFFIXES = (".parquet", ".jsonl")
PROMPT_FILE_COLUMNS = (("prompt_id", "messages"), ("text_id", "text"))
"""The columns of a prompt set (`hf-jacobi magpie`, the `packages` snapshot) and of an anchor text set; the id first."""
MAX_LISTED = 10
"""Differences listed in full; the rest are counted."""


@dataclass
class Comparison:
    """What a re-run matched: `checked` items of one kind, and a line for each that differs."""

    kind: str
    reproduced: str
    reference: str
    checked: int = 0
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.checked > 0 and not self.differences

    def differ(self, line: str) -> None:
        self.differences.append(line)

    def markdown(self) -> str:
        verdict = "**reproduced**" if self.equal else "**differs**"
        if self.checked == 0:
            verdict = "**nothing compared**"
        lines = [
            f"{verdict} ({self.kind}): {self.reproduced} against {self.reference}: {self.checked} compared, "
            f"{len(self.differences)} differ"
        ]
        lines += [f"- {note}" for note in self.notes]
        lines += [f"- differs: {line}" for line in self.differences[:MAX_LISTED]]
        if len(self.differences) > MAX_LISTED:
            lines.append(f"- ... and {len(self.differences) - MAX_LISTED} more")
        return "\n".join(lines)


def detect_kind(path: str | os.PathLike[str]) -> str:
    """Which kind of output a committed path is ("prompts", "trajectories", "adapter", "training log" or
    "evaluation"), from what it holds; refused with the accepted forms otherwise."""
    path = Path(path)
    if path.is_file() and path.suffix in PROMPT_FILE_SUFFIXES:
        return "prompts"
    if path.is_dir():
        if (path / COLLECTION_SETTINGS).is_file() or any(path.glob("trajectories-r*.parquet")):
            return "trajectories"
        if (path / ADAPTER_WEIGHTS).is_file():
            return "adapter"
        if (path / TRAINER_STATE).is_file() or any(path.glob(f"checkpoint-*/{TRAINER_STATE}")):
            return "training log"
    elif path.is_file() and path.suffix == ".json":
        return "training log" if path.name == TRAINER_STATE else "evaluation"
    raise ValueError(
        f"cannot tell what {path} is: expected a prompt or anchor text file (.parquet or .jsonl), a "
        f"trajectory folder (hf-jacobi collect), an adapter folder "
        f"({ADAPTER_WEIGHTS}), a training run folder or its {TRAINER_STATE}, or an evaluation report (.json)"
    )


def compare(
    reproduced: str | os.PathLike[str], reference: str | os.PathLike[str], *, rtol: float = 1e-4, atol: float = 1e-4
) -> Comparison:
    """Compares a re-run's output with the committed one, whichever kind the reference is (see `detect_kind`)."""
    if rtol < 0 or atol < 0:
        raise ValueError(f"tolerances must be >= 0, got rtol={rtol}, atol={atol}")
    kind = detect_kind(reference)
    if not Path(reproduced).exists():
        raise FileNotFoundError(f"{reproduced} does not exist: run the stage first (the reference is {kind})")
    if kind == "prompts":
        return compare_prompt_files(reproduced, reference)
    if kind == "trajectories":
        return compare_trajectories(reproduced, reference)
    if kind == "adapter":
        return compare_adapters(reproduced, reference, atol=atol)
    if kind == "training log":
        return compare_training_logs(reproduced, reference, rtol=rtol)
    return compare_evaluations(reproduced, reference, rtol=rtol)


def compare_prompt_files(reproduced: str | os.PathLike[str], reference: str | os.PathLike[str]) -> Comparison:
    """A rebuilt prompt set (or anchor text set) against the frozen one, row by row in order, every column equal.

    Order counts, unlike for trajectories: a prompt set's splits are taken by position (its first rows are held out),
    so the same prompts in another order would move prompts between training and evaluation. The two files may be
    of either format (`hf-jacobi magpie` writes .jsonl, the package ships .parquet).
    """
    result = Comparison("prompts", str(reproduced), str(reference))
    (new, _), (old, id_column) = _prompt_rows(Path(reproduced)), _prompt_rows(Path(reference))
    if len(new) != len(old):
        result.differ(f"{len(new)} rows against {len(old)}")
    for index, (mine, theirs) in enumerate(zip(new, old, strict=False)):
        result.checked += 1
        differing = [name for name in theirs if mine.get(name) != theirs[name]]
        differing += [f"{name} (not in the reference)" for name in mine if name not in theirs]
        if differing:
            result.differ(f"row {index} ({theirs[id_column]!r}): {', '.join(differing)}")
    result.notes.append(f"{result.checked} of the reference's {len(old)} rows compared, in order")
    if result.differences:
        result.notes.extend(_set_changes(new, old, id_column))
    return result


def _set_changes(new: list[dict[str, Any]], old: list[dict[str, Any]], id_column: str) -> list[str]:
    """What differs regardless of order: ids only one side holds and ids whose row changed. A rebuilt `packages` walk
    on other package versions gains or loses a few functions, and its shuffle then moves every row; these lines tell
    that apart from a changed build."""
    mine = {row.get(id_column): row for row in new}
    theirs = {row[id_column]: row for row in old}

    def listed(ids: list[Any]) -> str:
        shown = ", ".join(repr(i) for i in ids[:MAX_LISTED])
        return shown + (f" and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else "")

    lines = []
    if added := sorted(set(mine) - set(theirs), key=str):
        lines.append(f"{len(added)} ids in the re-run only: {listed(added)}")
    if gone := sorted(set(theirs) - set(mine), key=str):
        lines.append(f"{len(gone)} ids in the reference only: {listed(gone)}")
    changed = sorted((i for i in set(mine) & set(theirs) if mine[i] != theirs[i]), key=str)
    if changed:
        lines.append(f"{len(changed)} ids in both with other content: {listed(changed)}")
    return lines


def _prompt_rows(path: Path) -> tuple[list[dict[str, Any]], str]:
    """A prompt file's rows in file order (`prompt_id`, `messages`; or an anchor text file's `text_id`, `text`) and
    the name of its id column, read as `--prompts FILE` reads one (errors name the file and line)."""
    from hf_jacobi.data.local_files import LOCAL_BUILDERS, load_local_dataset

    if path.suffix not in PROMPT_FILE_SUFFIXES:
        raise ValueError(f"{path} is not a prompt file: expected one of {', '.join(PROMPT_FILE_SUFFIXES)}")
    dataset = load_local_dataset([path], LOCAL_BUILDERS[path.suffix], str(path))
    columns = next((c for c in PROMPT_FILE_COLUMNS if set(c) <= set(dataset.column_names)), None)
    if columns is None:
        raise ValueError(
            f"{path} holds columns {sorted(dataset.column_names)}: a prompt file holds {list(PROMPT_FILE_COLUMNS[0])}, "
            f"an anchor text file {list(PROMPT_FILE_COLUMNS[1])}"
        )
    return dataset.to_list(), columns[0]


def compare_trajectories(reproduced: str | os.PathLike[str], reference: str | os.PathLike[str]) -> Comparison:
    """Every re-collected prompt's row against the committed row of the same prompt, every column exactly.

    The re-run may hold fewer prompts than the reference (a spot check of the first N); a prompt the reference lacks
    is a difference. The collection settings (block size, budget, the model it came from) must match too.
    """
    from hf_jacobi.data.collection import load_trajectories

    result = Comparison("trajectories", str(reproduced), str(reference))
    mine, theirs = _settings(reproduced), _settings(reference)
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            result.differ(f"{COLLECTION_SETTINGS} {key}: {mine.get(key)!r} against {theirs.get(key)!r}")
    new, old = load_trajectories(reproduced), load_trajectories(reference)
    rows = {prompt_id: index for index, prompt_id in enumerate(old["prompt_id"])}
    columns = [name for name in new.column_names if name in old.column_names]
    missing_columns = sorted(set(new.column_names) ^ set(old.column_names))
    if missing_columns:
        result.differ(f"columns in one folder only: {missing_columns}")
    per_column: collections.Counter[str] = collections.Counter()
    for row in new:
        prompt_id = row["prompt_id"]
        if prompt_id not in rows:
            result.differ(f"prompt {prompt_id!r} is not in the reference")
            continue
        result.checked += 1
        committed = old[rows[prompt_id]]
        differing = [name for name in columns if row[name] != committed[name]]
        per_column.update(differing)
        if differing:
            result.differ(f"prompt {prompt_id!r}: {', '.join(differing)}")
    result.notes.append(f"{result.checked} of the reference's {len(old)} prompts re-collected")
    if per_column:
        counts = ", ".join(f"{name} in {count}" for name, count in per_column.most_common())
        result.notes.append(f"prompts whose column differs: {counts}")
    return result


def compare_adapters(
    reproduced: str | os.PathLike[str], reference: str | os.PathLike[str], *, atol: float = 1e-4
) -> Comparison:
    """The adapters' tensors within `atol` of each other, and their JSON configs equal (paths aside)."""
    from safetensors.numpy import load_file

    reproduced, reference = Path(reproduced), Path(reference)
    result = Comparison("adapter", str(reproduced), str(reference))
    new, old = load_file(reproduced / ADAPTER_WEIGHTS), load_file(reference / ADAPTER_WEIGHTS)
    for name in sorted(set(new) ^ set(old)):
        result.differ(f"tensor {name} is in {'the re-run' if name in new else 'the reference'} only")
    largest, where = 0.0, ""
    for name in sorted(set(new) & set(old)):
        result.checked += 1
        if new[name].shape != old[name].shape:
            result.differ(f"tensor {name}: shape {new[name].shape} against {old[name].shape}")
            continue
        gap = float(abs(new[name].astype("float64") - old[name].astype("float64")).max(initial=0.0))
        if gap > largest:
            largest, where = gap, name
        if not gap <= atol:
            result.differ(f"tensor {name}: largest difference {gap:.3g} > {atol:g}")
    result.notes.append(
        f"largest difference over {result.checked} tensors: {largest:.3g}" + (f" ({where})" * bool(where))
    )
    for config in sorted({p.name for p in (*reproduced.glob("*.json"), *reference.glob("*.json"))}):
        if not (reproduced / config).is_file() or not (reference / config).is_file():
            result.differ(f"{config} is in one folder only")
            continue
        result.checked += 1
        for line in differences(read_json(reproduced / config), read_json(reference / config), 0.0, config):
            result.differ(line)
    return result


def compare_training_logs(
    reproduced: str | os.PathLike[str], reference: str | os.PathLike[str], *, rtol: float = 1e-4
) -> Comparison:
    """The logged figures (losses, grad norms, held-out tokens per forward, tokens seen) at every step both logged.

    The re-run may have stopped early (a check of a run's first steps): only the steps it logged are compared, and
    the notes say how far it got.
    """
    result = Comparison("training log", str(reproduced), str(reference))
    new, old = _log_by_step(reproduced), _log_by_step(reference)
    for step in sorted(new):
        if step not in old:
            result.differ(f"step {step} is not in the reference's log")
            continue
        result.checked += 1
        for line in differences(new[step], old[step], rtol, f"step {step}", shared_keys_only=True):
            result.differ(line)
    last = max(new, default=0)
    result.notes.append(
        f"{result.checked} logged steps compared, up to step {last} of the reference's {max(old, default=0)}"
    )
    return result


def compare_evaluations(
    reproduced: str | os.PathLike[str], reference: str | os.PathLike[str], *, rtol: float = 1e-4
) -> Comparison:
    """Every figure of two evaluation reports (`hf-jacobi evaluate`'s JSON): counts exactly, floats within rtol."""
    result = Comparison("evaluation", str(reproduced), str(reference))
    new, old = read_json(Path(reproduced)), read_json(Path(reference))
    result.checked = count_figures(old)
    extra: list[str] = []
    for line in differences(new, old, rtol, Path(reference).name, extra=extra):
        result.differ(line)
    if extra:
        result.notes.append(f"recorded by the re-run only (not compared): {', '.join(extra)}")
    return result


def _settings(folder: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(folder) / COLLECTION_SETTINGS
    return read_json(path) if path.is_file() else {}


def _log_by_step(path: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """trainer_state.json's log history merged per step (the trainer logs losses and held-out figures apart)."""
    path = Path(path)
    if path.is_dir():
        path = state_file(path)
    state = read_json(path)
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise ValueError(f"{path} has no log_history: expected a {TRAINER_STATE} written by a training run")
    merged: dict[int, dict[str, Any]] = {}
    for entry in state["log_history"]:
        merged.setdefault(int(entry.get("step", 0)), {}).update(entry)
    return merged
