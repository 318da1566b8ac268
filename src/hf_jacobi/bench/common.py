"""Pieces every benchmark and the demo share: the Jacobi variants and the ratios of forward counts (timing and
token counting are `hf_jacobi.measurement`'s)."""

from __future__ import annotations

from typing import Any

from ..decoding.config import JacobiConfig

__all__ = [
    "VARIANTS",
    "ForwardCounts",
    "variant_config",
]

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
