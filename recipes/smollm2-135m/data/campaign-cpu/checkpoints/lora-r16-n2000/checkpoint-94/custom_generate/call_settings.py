"""Where one generate() call's Jacobi settings come from: its keyword arguments, the generation config it was passed,
and the model's own, in that order of precedence; `JacobiConfig` (config.py) validates what they add up to."""

from __future__ import annotations

from typing import Any

from transformers import GenerationConfig

from .config import CACHE_IMPLEMENTATIONS, JACOBI_PREFIX, JacobiConfig, validate_decoding


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
    call_cache_implementation: str | None = None,
) -> JacobiConfig:
    """Builds a JacobiConfig: call kwargs win over the passed generation_config, which wins over the model's.

    Each source's own `cache_implementation` (generate's setting; for the call, its `cache_implementation=` kwarg)
    stands for `jacobi_cache_implementation` where that source does not set the latter, so that
    `generate(decoding="jacobi", cache_implementation="static")` runs the static path. Values the Jacobi loop cannot
    run on are left to it to refuse, with generate's own name for them.
    """

    def layer(settings: dict[str, Any], generic: str | None) -> dict[str, Any]:
        settings = {k: v for k, v in settings.items() if v is not None}
        if "cache_implementation" not in settings and generic in CACHE_IMPLEMENTATIONS:
            settings["cache_implementation"] = generic
        return settings

    return JacobiConfig.from_layers(
        [
            layer(JacobiConfig.settings_in(config), getattr(config, "cache_implementation", None))
            for config in (model_generation_config, generation_config)
        ]
        + [layer(overrides, call_cache_implementation)]
    )


def resolve_decoding(
    call_value: str | None,
    generation_config: GenerationConfig | None,
    model_generation_config: GenerationConfig | None,
    default: str = "greedy",
) -> str:
    """The decoding mode of one call: the kwarg, else the passed generation_config, else the model's, else `default`."""
    for value in (
        call_value,
        getattr(generation_config, "decoding", None),
        getattr(model_generation_config, "decoding", None),
    ):
        if value is not None:
            return validate_decoding(value)
    return default
