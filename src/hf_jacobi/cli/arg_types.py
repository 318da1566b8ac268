"""Argument types of the `hf-jacobi` commands: bad values are rejected at the boundary, naming the value and what
is accepted, before any model loads."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def _parsed(value: str, convert: Callable[[str], float], accepted: str, ok: Callable[[float], bool]):
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise argparse.ArgumentTypeError(f"{value!r} is not {accepted}")
    return number


def positive_int(value: str) -> int:
    return _parsed(value, int, "an integer >= 1", lambda n: n >= 1)


def optional_positive_int(value: str) -> int | None:
    """An integer >= 1, or 'default' (None: the setting's own default)."""
    if value == "default":
        return None
    return _parsed(value, int, "an integer >= 1 or 'default'", lambda n: n >= 1)


def non_negative_int(value: str) -> int:
    return _parsed(value, int, "an integer >= 0", lambda n: n >= 0)


def probability(value: str) -> float:
    return _parsed(value, float, "a number in (0, 1]", lambda p: 0 < p <= 1)


def positive_float(value: str) -> float:
    return _parsed(value, float, "a number > 0", lambda x: x > 0)


def model_name(value: str) -> Path | str:
    """A model to load: a local save_pretrained folder (returned as a Path) or a Hub model id (returned as a str, for
    from_pretrained to download, or to read from the cache alone under HF_HUB_OFFLINE=1). A folder's config.json is
    checked here, before anything loads; a Hub id only for its form, as the Hub alone knows whether it exists."""
    from ..loading import model_name_problem

    problem = model_name_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{value!r} {problem}")
    path = Path(value).expanduser()
    return path if path.exists() else value


AUTO_DTYPE = "auto"
"""`--dtype auto`: bfloat16 on a CPU with bfloat16 units (where Jacobi decoding pays: a block's verify costs little
more than a one-token forward), float32 elsewhere (exact: Jacobi's answers are greedy's token for token)."""


def resolve_dtype(dtype: str) -> str:
    """`dtype`, with "auto" resolved for the device the CLI loads models on."""
    if dtype != AUTO_DTYPE:
        return dtype
    from ..decoding.cpu_info import auto_dtype

    return auto_dtype()
