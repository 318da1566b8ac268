"""Pieces every benchmark and the demo share: the Jacobi variants, timing and token counting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..decoding.config import JacobiConfig

__all__ = [
    "VARIANTS",
    "ForwardCounts",
    "generated_tokens",
    "timed",
    "variant_config",
]

T = TypeVar("T")

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "recycling": {"ngram_pool_size": 4},
    "multi-block": {"num_blocks": 2},
    "both": {"ngram_pool_size": 4, "num_blocks": 2},
}
"""JacobiConfig fields each benchmarked variant adds to the block size."""


def variant_config(variant: str, block_size: int) -> JacobiConfig:
    """The Jacobi settings of one benchmarked variant at one block size."""
    return JacobiConfig(block_size=block_size, **VARIANTS[variant])


class ForwardCounts:
    """Ratios every measurement of a Jacobi run reports, for dataclasses with `new_tokens`, `forwards` and
    `forward_tokens` fields."""

    new_tokens: int
    forwards: int
    forward_tokens: int

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)

    @property
    def mean_width(self) -> float:
        """Tokens fed per forward (chain and candidate branches)."""
        return self.forward_tokens / max(self.forwards, 1)


def generated_tokens(row: torch.Tensor, eos_ids: set[int], pad_id: int | None = None) -> list[int]:
    """The tokens a row really generated: up to and including its first EOS, without the padding a finished row gets
    while others in its batch go on (stripped from the end when `pad_id` is given and no EOS came)."""
    tokens = row.tolist()
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    while tokens and pad_id is not None and tokens[-1] == pad_id:
        tokens.pop()
    return tokens


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """Result and wall seconds of one call; CUDA is synchronized so queued kernels are not left out."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = call()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start
