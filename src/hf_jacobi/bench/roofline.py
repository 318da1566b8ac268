"""What one forward costs against the number of tokens in it, measured on the model at hand.

Jacobi decoding trades wider forwards for fewer of them, so whether it pays depends on this curve: nearly flat up to a
knee on a GPU at batch 1 (memory-bound), close to linear on a small CPU (compute-bound). The overhead benchmark and
`hf-jacobi tune` both time bare forwards the same way, here, so their figures compare.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable

import torch
from transformers import DynamicCache, StaticCache

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


def static_block_step(
    model, context: torch.Tensor, width: int
) -> tuple[Callable[[], torch.Tensor], Callable[[], None]]:
    """(step, rewind): `step` runs one forward of `width` tokens on a static cache holding `context`, with every
    input preallocated and the mask given as a 4D float tensor, so that nothing is built or read back to the host in
    it and it can be captured as a CUDA graph; `rewind` moves the cache's write position back (each forward advances
    it in place), so that every step writes the same slots and costs what a decoding step of that width costs."""
    batch, length = context.shape
    device = context.device
    cache = StaticCache(config=model.config, max_cache_len=length + width)
    model(
        input_ids=context,
        **{CACHE_ARGUMENT: cache},
        cache_position=torch.arange(length, device=device),
        use_cache=True,
    )
    block = context.repeat(1, width // length + 1)[:, :width].clone()
    cache_position = torch.arange(length, length + width, device=device)
    positions = cache_position[None].expand(batch, -1).clone()
    allowed = torch.ones(width, length + width, dtype=torch.bool, device=device)
    allowed[:, length:] = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = torch.zeros(allowed.shape, dtype=model.dtype, device=device)
    mask = mask.masked_fill(~allowed, torch.finfo(model.dtype).min)[None, None].expand(batch, 1, -1, -1).contiguous()

    def step() -> torch.Tensor:
        return model(
            input_ids=block,
            position_ids=positions,
            cache_position=cache_position,
            attention_mask=mask,
            use_cache=True,
            logits_to_keep=0,
            **{CACHE_ARGUMENT: cache},
        ).logits

    def rewind() -> None:
        for layer in cache.layers:
            layer.cumulative_length.fill_(length)

    return step, rewind


@torch.inference_mode()
def graph_forward_seconds(model, context: torch.Tensor, width: int, repeats: int) -> float:
    """Median seconds of one forward of `width` tokens replayed as a CUDA graph on a static cache holding `context`.

    What compiled decoding pays per step on a GPU: with the kernel launches captured once, a small model's forward is
    no longer bound by the host, and the width at which the curve starts to climb moves in.
    """
    step, rewind = static_block_step(model, context, width)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as CUDA graph capture requires
        for _ in range(2):
            rewind()
            step()
    torch.cuda.current_stream().wait_stream(side)
    rewind()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    times = []
    for _ in range(repeats):
        rewind()  # outside the timed span
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def forward_cost_curve(
    model, context: torch.Tensor, widths: list[int], repeats: int, cuda_graphs: bool = False
) -> list[dict]:
    """Median time of a bare forward of each width on the same cache, and its ratio to a one-token forward; with
    `cuda_graphs`, each forward replayed as a CUDA graph on a static cache (see `graph_forward_seconds`)."""
    timer = graph_forward_seconds if cuda_graphs else block_forward_seconds
    one = timer(model, context, 1, repeats)
    rows = []
    for width in widths:
        seconds = one if width == 1 else timer(model, context, width, repeats)
        rows.append({"tokens": width, "forward_ms": 1000 * seconds, "vs_one_token": seconds / one})
    return rows


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
