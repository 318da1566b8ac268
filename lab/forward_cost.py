"""The forward-cost curve of the lab's overhead study and `python -m lab forward-cost`: a bare forward of each width
timed on the same cache, optionally replayed as a CUDA graph on a static cache (what compiled decoding pays per step).
`hf-jacobi tune` times its forwards with the same `block_forward_seconds`, so the figures compare."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from transformers import StaticCache

from hf_jacobi.bench.roofline import block_forward_seconds
from hf_jacobi.decoding.cache import CACHE_ARGUMENT


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
