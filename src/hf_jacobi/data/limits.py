"""The checks of the arguments every reader shares: a `limit` (how many prompts, problems or rows to read) and a
`split` (which part of a set).

It imports nothing, so readers that must stay light (the bench tasks, the HumanEval reader) can use it.
"""

from __future__ import annotations


def check_limit(limit: int | None) -> None:
    """None means everything; 0 or a negative number would silently mean nothing (or everything), so it raises."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be an integer >= 1 or None, got {limit!r}")


def check_split(what: str, split: str, splits: tuple[str, ...], note: str = "") -> None:
    """Refuses a split that `what` (e.g. "the stdlib prompt set") does not have, naming the accepted ones and why
    (`note`): read as another split or as the whole set, training prompts would pass for held-out ones."""
    if split in splits:
        return
    why = f" ({note})" if note else ""
    have = f"one split, {splits[0]!r}{why}" if len(splits) == 1 else f"splits {sorted(splits)}{why}"
    raise ValueError(f"{what} has {have}, got split={split!r}")
