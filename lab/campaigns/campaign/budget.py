"""The campaign's clock and its record: one time budget shared by the stages, and campaign.json written as it goes.

Why: a lent GPU comes for one call of at most ten minutes and returns only what lies in the output folder when the
call ends. Every stage therefore gets a deadline out of one budget, and the record of what has been done (settings,
counts, timings, measurements) is rewritten after every step, so that a call cut short still returns a readable record
and the next call can resume from it.

Deadlines are shares of the time left: when a stage starts, it gets `share / sum of the shares still to run` of what is
left of the budget. A stage that finishes early (or is skipped, its results resumed) hands its time to the later ones.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAGES = ("prompts", "trajectories", "training", "judging", "bundle")
DEFAULT_SHARES: dict[str, float] = {
    "prompts": 0.14,
    "trajectories": 0.24,
    "training": 0.32,
    "judging": 0.28,
    "bundle": 0.02,
}
"""Each stage's share of the budget; training and judging also run side by side (the base is judged while the
variants train), so their shares are what they need beyond that. Judging gets more than a first guess would give it:
each variant's judge decodes a few hundred requests in float32 with the speed runs after them, the earlier sweep's
judges did not all finish in the time it gave them, and without a finished judge no weights come back."""


@dataclass
class Budget:
    """A wall-clock budget split into stage deadlines (monotonic seconds)."""

    seconds: float
    shares: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"the budget must be > 0 seconds, got {self.seconds}")
        unknown = sorted(set(self.shares) - set(STAGES))
        if unknown or any(not share >= 0 for share in self.shares.values()):
            raise ValueError(f"stage shares must be >= 0 and name stages of {STAGES}, got {dict(self.shares)}")

    @property
    def end(self) -> float:
        return self.started + self.seconds

    def left(self, now: float | None = None) -> float:
        """Seconds left of the whole budget (0 when spent)."""
        return max(0.0, self.end - (time.monotonic() if now is None else now))

    def deadline(self, stage: str, remaining: list[str]) -> float:
        """The monotonic time by which `stage` must end, given the stages still to run (itself first)."""
        total = sum(self.shares.get(name, 0.0) for name in remaining)
        if total <= 0:
            return self.end
        return time.monotonic() + self.left() * self.shares.get(stage, 0.0) / total


def parse_shares(pairs: list[str]) -> dict[str, float]:
    """STAGE=SHARE pairs over the default shares (e.g. `training=0.6`)."""
    shares = dict(DEFAULT_SHARES)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in STAGES:
            raise ValueError(f"--shares takes STAGE=SHARE with a stage of {STAGES}, got {pair!r}")
        shares[name] = float(value)
    return shares


@dataclass
class Manifest:
    """campaign.json in the output folder: everything the campaign decided and measured, rewritten atomically after
    every change, so that whatever a cut call returns is a complete file."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    def update(self, *keys: str, value: Any) -> None:
        """Sets data[k1][k2]... = value (creating the dicts on the way) and rewrites the file."""
        node = self.data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        self.write()

    def write(self) -> None:
        # a temporary file renamed over the record: a call killed while writing leaves the previous record whole
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(self.data, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(temporary, path)

    @classmethod
    def read(cls, path: Path) -> dict[str, Any]:
        """An earlier call's campaign.json ({} when there is none)."""
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


@dataclass
class StageTimer:
    """Start, deadline and end of one stage, as the manifest records them (seconds since the campaign started)."""

    budget: Budget
    name: str
    deadline: float
    start: float = field(default_factory=time.monotonic)

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def record(self, **extra: Any) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "started_s": round(self.start - self.budget.started, 1),
            "deadline_s": round(self.deadline - self.budget.started, 1),
            "ended_s": round(now - self.budget.started, 1),
            "seconds": round(now - self.start, 1),
            **extra,
        }
