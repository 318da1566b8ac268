"""Jacobi decoding settings: where they come from and what values they accept.

The settings live on `GenerationConfig` as `decoding` and `jacobi_*` attributes, so a checkpoint can carry its own
defaults in generation_config.json; per-call keyword arguments to `generate()` override them. Everything is checked
here, at the public boundary, so that the decoding loop can trust its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from transformers import GenerationConfig

DECODING_MODES = ("greedy", "jacobi")
"""Values accepted by `generate(decoding=...)`. "greedy" means "whatever stock generate does"."""

JACOBI_PREFIX = "jacobi_"


@dataclass(frozen=True)
class JacobiConfig:
    """Settings of one Jacobi decoding call.

    Args:
        block_size: Tokens per Jacobi block (n). The first token of a block is always the committed greedy token, so a
            block of 1 is plain autoregressive decoding through the Jacobi loop. Larger blocks can accept more tokens
            per forward but make each forward wider.
        draft_seed: Seed of the generator that draws the initial draft tokens from the prompt. Fixed by default so that
            two identical calls spend the same number of forwards; it never changes the output.
    """

    block_size: int = 16
    draft_seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"jacobi_block_size must be an integer >= 1, got {self.block_size!r}.")
        if isinstance(self.draft_seed, bool) or not isinstance(self.draft_seed, int):
            raise ValueError(f"jacobi_draft_seed must be an integer, got {self.draft_seed!r}.")

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The `jacobi_*` keyword names accepted by generate() and GenerationConfig."""
        return tuple(JACOBI_PREFIX + f.name for f in fields(cls))


def validate_decoding(value: Any) -> str:
    """Returns the decoding mode, defaulting to "greedy", or raises naming the accepted values."""
    if value is None:
        return "greedy"
    if value not in DECODING_MODES:
        raise ValueError(f"decoding must be one of {list(DECODING_MODES)} (or None), got {value!r}.")
    return value


def split_jacobi_kwargs(kwargs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Removes `decoding` and `jacobi_*` keys from generate() kwargs (in place) and returns them.

    Unknown `jacobi_*` names are rejected here: stock generate would otherwise report them as unused model kwargs,
    which hides the typo behind a less helpful message.
    """
    decoding = kwargs.pop("decoding", None)
    known = set(JacobiConfig.setting_names())
    settings: dict[str, Any] = {}
    for key in [k for k in kwargs if k.startswith(JACOBI_PREFIX)]:
        if key not in known:
            raise ValueError(f"Unknown Jacobi setting {key!r}; accepted settings are {sorted(known)}.")
        settings[key[len(JACOBI_PREFIX) :]] = kwargs.pop(key)
    return decoding, settings


def resolve_jacobi_config(
    generation_config: GenerationConfig | None,
    model_generation_config: GenerationConfig | None,
    overrides: dict[str, Any],
) -> JacobiConfig:
    """Builds a JacobiConfig: call kwargs win over the passed generation_config, which wins over the model's."""
    values: dict[str, Any] = {}
    for f in fields(JacobiConfig):
        for source in (model_generation_config, generation_config):
            if source is not None and getattr(source, JACOBI_PREFIX + f.name, None) is not None:
                values[f.name] = getattr(source, JACOBI_PREFIX + f.name)
        if f.name in overrides and overrides[f.name] is not None:
            values[f.name] = overrides[f.name]
    return JacobiConfig(**values)


def resolve_decoding(
    call_value: str | None,
    generation_config: GenerationConfig | None,
    model_generation_config: GenerationConfig | None,
) -> str:
    """The decoding mode of one call: the kwarg, else the passed generation_config, else the model's default."""
    for value in (
        call_value,
        getattr(generation_config, "decoding", None),
        getattr(model_generation_config, "decoding", None),
    ):
        if value is not None:
            return validate_decoding(value)
    return "greedy"
