"""Two records of a run's figures compared leaf by leaf: which keys are not compared, and when two numbers are equal.

Token ids, forward counts and other integers must match exactly; floats within a relative tolerance, because CPU
kernels may sum in another order on another machine (a re-run of rounds 1-2 differed slightly in weights and not at
all in tokens: docs/results/jacobi-forcing-cpu/reproduction/README.md). Wall-clock figures (runtimes, tokens per
second) and paths are not compared: they say where and how fast a run went, not what it computed. `reproduction`
applies this to evaluation reports, training logs and configs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

IGNORED_KEYS = frozenset({"adapter", "output_file", "output_dir", "trained_model", "init_adapter", "model"})
"""Keys whose values are paths or names of where a run read or wrote, which a re-run chooses freely. (`model` names
the model in an evaluation report; a training log has no such key.)"""

RESUME_COUNTERS = frozenset({"num_tokens", "train_loss"})
"""Figures a process keeps for itself and starts again when a run resumes (TRL's `num_tokens`, the Trainer's final
`train_loss`, a mean over the steps that process ran); `num_input_tokens_seen` and every step's loss are saved in
checkpoints and still compared."""

TIMING_MARKERS = ("runtime", "per_second", "seconds", "wall", "elapsed")
"""A key holding one of these is a clock reading, not a computed figure."""


def read_json(path: Path) -> Any:
    """A JSON file's content; invalid JSON is a ValueError naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from error


def is_ignored(key: str) -> bool:
    """Whether a key holds a path, a clock reading or a per-process counter, which a re-run may change freely."""
    return key in IGNORED_KEYS or key in RESUME_COUNTERS or any(marker in key for marker in TIMING_MARKERS)


def count_figures(value: Any) -> int:
    """The figures of a report that `differences` compares (paths and clock readings aside)."""
    if isinstance(value, dict):
        return sum(count_figures(item) for key, item in value.items() if not is_ignored(str(key)))
    if isinstance(value, list):
        return sum(count_figures(item) for item in value)
    return 1


def differences(
    new: Any, old: Any, rtol: float, where: str, *, shared_keys_only: bool = False, extra: list[str] | None = None
) -> Iterator[str]:
    """Lines naming each leaf that differs; a float within `rtol` (relative) of the other is equal.

    `shared_keys_only` compares only the keys both hold: a training log's reference may come from a checkpoint,
    saved before the run logged its summary, and a re-run stopped early never logs one. With `extra`, a key only the
    re-run holds (a field a later version of the package records) is listed there instead of counted as a difference.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys(), key=str):
            if is_ignored(str(key)):
                continue
            if key in old and key in new:
                yield from differences(
                    new[key], old[key], rtol, f"{where}.{key}", shared_keys_only=shared_keys_only, extra=extra
                )
            elif shared_keys_only:
                continue
            elif key in old:
                yield f"{where}.{key}: missing from the re-run"
            elif extra is not None:
                extra.append(f"{where}.{key}")
            else:
                yield f"{where}.{key}: not in the reference"
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            yield f"{where}: {len(new)} items against {len(old)}"
        for index, (a, b) in enumerate(zip(new, old, strict=False)):
            yield from differences(a, b, rtol, f"{where}[{index}]", shared_keys_only=shared_keys_only, extra=extra)
    elif not _close(new, old, rtol):
        yield f"{where}: {new!r} against {old!r}"


def _close(new: Any, old: Any, rtol: float) -> bool:
    if (
        isinstance(new, bool)
        or isinstance(old, bool)
        or not isinstance(new, (int, float))
        or not isinstance(old, (int, float))
    ):
        return new == old
    if isinstance(new, int) and isinstance(old, int):
        return new == old
    if math.isnan(new) or math.isnan(old):
        return math.isnan(new) and math.isnan(old)
    return math.isclose(new, old, rel_tol=rtol, abs_tol=0.0)
