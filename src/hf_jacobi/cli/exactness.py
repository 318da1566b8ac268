"""When an output that departs from greedy's is an error: the one rule every command that checks Jacobi against greedy
(`demo`, `generate --compare`, `bench`, `evaluate`, `quality`) applies to its exit code.

In float32 Jacobi decoding is greedy decoding token for token, so a departure is a defect and the command exits 1. In a
reduced precision a forward over a block rounds otherwise than a forward over one token, so a near-tie may go the other
way and an answer depart from greedy's in that dtype: expected, documented, counted and explained, never a failure, so
that a script or CI job that benchmarks in bfloat16 does not fail on what the docs call expected.
"""

from __future__ import annotations

EXACT_DTYPES = frozenset({"float32", "float64"})

ROUNDING_NOTE = (
    "in a reduced precision a forward over a block rounds differently from a forward over one token, so a near-tie "
    "may go the other way and an answer depart from greedy's; in float32 every answer is greedy's: --dtype float32"
)


def is_exact(dtype: str) -> bool:
    """Whether every Jacobi output must equal greedy's in `dtype` ("float32", "torch.bfloat16", ...)."""
    return str(dtype).removeprefix("torch.") in EXACT_DTYPES


def greedy_verdict(dtype: str, identical: int, total: int, what: str = "outputs") -> tuple[str, int]:
    """The closing line of a comparison with greedy and the command's exit code: 1 only where a departure is an error
    (an exact dtype); in a reduced precision the departures are counted against greedy in that same dtype."""
    name = str(dtype).removeprefix("torch.")
    if identical == total:
        return f"all {total} {what} identical to {name} greedy: yes", 0
    if is_exact(name):
        return f"error: {total - identical} of {total} {what} differ from greedy in {name}, where none may", 1
    return f"{identical} of {total} {what} identical to {name} greedy ({ROUNDING_NOTE})", 0
