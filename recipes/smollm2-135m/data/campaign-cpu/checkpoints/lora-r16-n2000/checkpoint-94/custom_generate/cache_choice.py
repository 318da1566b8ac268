"""Which cache a Jacobi call runs on when its settings say "auto".

On a GPU, Jacobi decoding beats CUDA-graph greedy only on the static cache with its verify forward compiled: the
eager loop on a dynamic cache pays per-step host work that a captured graph does not (docs/results.md, "On a GPU");
on a CPU the compile costs minutes before the first token and gains little. So "auto" takes the static cache exactly where that forward would be compiled, by the rule transformers'
generate applies to its own static cache, and the dynamic one elsewhere. A checkpoint can thus ship one setting that
is right on both.
"""

from __future__ import annotations

import dataclasses

from transformers import GenerationConfig

from .config import AUTO_CACHE, JacobiConfig


class _CompileableCache:
    """Stands for the static cache a call would build, for transformers' compile criteria, which ask the cache whether
    it can be compiled, before that cache exists."""

    is_compileable = True


def generate_would_compile(model, generation_config: GenerationConfig, cache=None) -> bool:
    """Whether transformers' generate would compile a decoding forward over `cache` (a static one by default) for this
    model and generation config: on an accelerator, or where `compile_config` asks for every device; never with
    `disable_compile`, a quantizer that cannot compile, or offloaded weights."""
    criteria = getattr(model, "_valid_auto_compile_criteria", None)
    if criteria is None:
        return False
    return bool(criteria({"cache": cache if cache is not None else _CompileableCache()}, generation_config))


def resolve_cache(config: JacobiConfig, model, generation_config: GenerationConfig) -> JacobiConfig:
    """`config` with "auto" replaced by the cache this call runs on; any other choice is returned as it is.

    The static path keeps the call's `compile` and `static_widths`; the dynamic path drops them (they describe the
    static one)."""
    if config.cache_implementation != AUTO_CACHE:
        return config
    if config.compile == "always" or (config.compile == "auto" and generate_would_compile(model, generation_config)):
        return dataclasses.replace(config, cache_implementation="static")
    return on_dynamic_cache(config)


def on_dynamic_cache(config: JacobiConfig) -> JacobiConfig:
    """`config` on the dynamic cache, without the settings that describe the static one."""
    return dataclasses.replace(config, cache_implementation="dynamic", compile="auto", static_widths=None)
