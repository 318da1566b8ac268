"""What one forward costs against the number of tokens in it, measured on the model at hand.

Jacobi decoding trades wider forwards for fewer of them, so whether it pays depends on this curve: nearly flat up to a
knee on a GPU at batch 1 (memory-bound), close to linear on a small CPU (compute-bound). `hf-jacobi tune` and the
project's overhead study both time bare forwards the same way, here, so their figures compare.
"""

from __future__ import annotations

import itertools
import statistics

import torch
from transformers import DynamicCache

from ..decoding.cache import CACHE_ARGUMENT
from ..measurement import timed

DEFAULT_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@torch.inference_mode()
def timed_prefill(model, inputs: dict[str, torch.Tensor]) -> tuple[DynamicCache, float]:
    """A fresh cache filled with the prompt, and the seconds that took."""
    cache = DynamicCache()
    _, seconds = timed(lambda: model(**inputs, **{CACHE_ARGUMENT: cache}, use_cache=True, logits_to_keep=1))
    return cache, seconds


def prefill_seconds(model, inputs: dict[str, torch.Tensor], repeats: int = 3) -> float:
    """Median time of the prompt's forward alone, with a fresh cache each time: the part of every setting's wall
    time that decoding speed cannot change."""
    return statistics.median(timed_prefill(model, inputs)[1] for _ in range(repeats))


@torch.inference_mode()
def block_forward_seconds(model, context: torch.Tensor, width: int, repeats: int) -> float:
    """Median seconds of one bare forward of `width` tokens on a cache holding `context` (cropped back each time)."""
    cache, _ = timed_prefill(model, {"input_ids": context})
    block = context.repeat(1, width // context.shape[1] + 1)[:, :width]
    times = []
    for _ in range(repeats):
        _, seconds = timed(lambda: model(input_ids=block, **{CACHE_ARGUMENT: cache}, use_cache=True, logits_to_keep=0))
        cache.crop(-width)
        times.append(seconds)
    return statistics.median(times)


def measure_roofline(model, context: torch.Tensor, widths=DEFAULT_WIDTHS, repeats: int = 5) -> dict[int, float]:
    """Median seconds of a bare forward of each width on a cache holding `context` (batch 1)."""
    return {w: block_forward_seconds(model, context, w, repeats) for w in sorted(set([1, *widths]))}


def interpolate_cost(curve: dict[int, float], width: float) -> float:
    """Seconds of a forward of `width` tokens, linear between measured widths and beyond the widest two."""
    points = sorted(curve.items())
    if len(points) == 1:
        return points[0][1] * max(width, 1.0) / points[0][0]
    if width <= points[0][0]:
        return points[0][1]
    for (w0, c0), (w1, c1) in itertools.pairwise(points):
        if width <= w1:
            return c0 + (c1 - c0) * (width - w0) / (w1 - w0)
    (w0, c0), (w1, c1) = points[-2], points[-1]
    return c1 + (c1 - c0) * (width - w1) / (w1 - w0)


def roofline_knee(curve: dict[int, float], tolerance: float = 1.5) -> int:
    """The widest measured forward that costs at most `tolerance` times a one-token forward."""
    one = interpolate_cost(curve, 1)
    return max((w for w, c in curve.items() if c <= tolerance * one), default=1)
