"""The one check of a `limit` argument (how many prompts, problems or rows to read), shared by every reader.

It imports nothing, so readers that must stay light (the bench tasks, the HumanEval reader) can use it.
"""

from __future__ import annotations


def check_limit(limit: int | None) -> None:
    """None means everything; 0 or a negative number would silently mean nothing (or everything), so it raises."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be an integer >= 1 or None, got {limit!r}")
