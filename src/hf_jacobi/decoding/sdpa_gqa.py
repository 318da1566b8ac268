"""Grouped-query attention without copying the cache, in the wide masked forwards hf_jacobi runs on a CPU.

Why: transformers' SDPA attention repeats every key/value head once per query head it serves (`repeat_kv`: a copy of
the layer's whole cache, three times over for SmolLM2's 9 query heads on 3 key/value heads) whenever a forward holds
more than one query and an attention mask, because CUDA's kernels fall back to the math kernel when SDPA's
`enable_gqa` meets a mask. Every forward that Jacobi decoding and the parallel collection method run is such a forward
(a block of queries under a 4D mask), and so is a padded batch's prefill. On a CPU, SDPA's flash kernel takes
`enable_gqa` with a mask, reads the shared heads in place and gives bitwise the output of the repeated heads
(tests/test_sdpa_gqa.py); transformers takes that path when `TRANSFORMERS_SDPA_FORCE_GQA` is "1", which it reads at
each attention call. `cpu_gqa` sets it for the duration of hf_jacobi's own forwards on a CPU and restores it after,
so that a user's other forwards, and every accelerator, keep transformers' choice.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"
"""The environment variable transformers' `use_gqa_in_sdpa` reads at each call (transformers 5.x)."""


@contextmanager
def cpu_gqa(device) -> Iterator[bool]:
    """Within the block, SDPA attention on `device` (a torch device or its type) runs grouped-query attention with
    `enable_gqa` instead of repeating the key/value heads, where `device` is a CPU; yields whether it does. A value
    the user set for the variable is left alone."""
    kind = getattr(device, "type", device)
    if kind != "cpu" or FORCE_GQA in os.environ:
        yield os.environ.get(FORCE_GQA) == "1" and kind == "cpu"
        return
    os.environ[FORCE_GQA] = "1"
    try:
        yield True
    finally:
        os.environ.pop(FORCE_GQA, None)


def with_cpu_gqa(decode: Callable) -> Callable:
    """`decode(model, input_ids, ...)` run within `cpu_gqa` on `input_ids`' device (its signature kept, as generate()
    reads a custom decoding function's)."""

    @functools.wraps(decode)
    def wrapped(model, input_ids, *args, **kwargs):
        with cpu_gqa(input_ids.device):
            return decode(model, input_ids, *args, **kwargs)

    return wrapped
