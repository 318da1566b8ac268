"""What `hf-jacobi bench` runs: the greedy baselines and the Jacobi settings, each eager or on the compiled static path.

The runner (`bench.runner`) decodes them; the report (`bench.report`) reads their kinds and paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import CompileConfig

from ..decoding.cache_choice import on_dynamic_cache
from ..decoding.config import AUTO_CACHE, JacobiConfig
from .common import VARIANTS, variant_config

AR = "ar"
AR_STATIC = "ar-static"
AR_COMPILED = "ar-compiled"
JACOBI = "jacobi"
DEFAULT_VARIANT = "default"
AR_COMPILE_MODE = "reduce-overhead"
"""torch.compile mode of the compiled greedy baseline: transformers' own default for a compiled static cache, which on
CUDA replays the decoding step as a CUDA graph (mode "default" does not), i.e. the strongest greedy a user gets from
`generate`. Recorded in bench.json and the notes, since figures against another mode do not compare."""
EAGER = "eager"
STATIC = "static"
COMPILED = "compiled"
JACOBI_PATHS = (EAGER, STATIC, COMPILED)
"""How a Jacobi setting runs its verify forwards: eagerly on the dynamic cache (the default path), eagerly on the
static cache (what the compiled path costs without its compilation), or on the static cache with the forward compiled
on any device (`JacobiConfig` cache "static", compile "always": transformers' default `CompileConfig`, mode
"reduce-overhead", i.e. a CUDA graph on a GPU), so that both compiled paths compare."""


@dataclass(frozen=True)
class Setting:
    """One way of decoding: a greedy AR baseline or a Jacobi configuration."""

    name: str
    kind: str
    block_size: int | None = None
    variant: str | None = None
    config: JacobiConfig | None = None  # a Jacobi setting given whole (the model's defaults), not as a variant

    @classmethod
    def model_defaults(cls, generation_config, path: str = EAGER, static_widths: int | None = None) -> Setting:
        """The Jacobi settings `generate(decoding="jacobi")` uses for this model with no other argument: what a user
        of a tuned or shipped checkpoint gets, and so the setting a speed claim about it must time; on a static path,
        the same settings on the static cache, its forward compiled or not (padded to `static_widths` widths, else the
        device's default)."""
        config = _on_path(JacobiConfig.from_generation_config(generation_config), path, static_widths)
        devices = config.greedy_devices
        fallback = f"; greedy where the model falls back: {', '.join(devices)}" if devices else ""
        return cls(
            f"Jacobi default ({config.describe()}{fallback})", JACOBI, config.block_size, DEFAULT_VARIANT, config
        )

    @classmethod
    def jacobi(cls, variant: str, block_size: int, path: str = EAGER, static_widths: int | None = None) -> Setting:
        """One benchmarked variant at one block size, on one of `JACOBI_PATHS`."""
        config = _on_path(variant_config(variant, block_size), path, static_widths)
        suffix = "" if path == EAGER else f" ({config.describe_cache()})"
        return cls(f"Jacobi {variant} n={block_size}{suffix}", JACOBI, block_size, variant, config)

    @property
    def path(self) -> str:
        """Which of `JACOBI_PATHS` a Jacobi setting runs on (EAGER for the greedy baselines)."""
        if self.config is None or self.config.cache_implementation != "static":
            return EAGER
        return COMPILED if self.config.compile == "always" else STATIC

    @property
    def compiled(self) -> bool:
        """Whether its first call compiles a graph (which the warm-up must pay for, at the shapes the timing uses)."""
        return self.kind == AR_COMPILED or (self.config is not None and self.config.compile == "always")

    def generate_kwargs(self, device: torch.device) -> dict[str, Any]:
        if self.kind == AR:
            return {"decoding": "greedy"}
        if self.kind == AR_STATIC:
            return {"decoding": "greedy", "cache_implementation": "static"}
        if self.kind == AR_COMPILED:
            config = CompileConfig(fullgraph=False, mode=AR_COMPILE_MODE)
            # generate only auto-compiles on accelerators; on other devices it has to be asked explicitly
            config._compile_all_devices = device.type not in ("cuda", "xpu")
            return {"decoding": "greedy", "cache_implementation": "static", "compile_config": config}
        config = self.config if self.config is not None else variant_config(self.variant, self.block_size)
        if self.variant != DEFAULT_VARIANT:
            # an explicit setting runs Jacobi on every device: the model's generation config may list this device in
            # jacobi_greedy_devices, which would time greedy decoding under a Jacobi label; the model-defaults row
            # keeps the fallback (what a user of the checkpoint gets) and its label names it
            config = config.replace(greedy_devices=())
        return config.to_generate_kwargs()

    @property
    def is_ar(self) -> bool:
        return self.kind in (AR, AR_STATIC, AR_COMPILED)


def compiled_path(config: JacobiConfig, static_widths: int | None = None) -> JacobiConfig:
    """`config` on the compiled path: the static cache with the verify forward compiled on any device, padded to
    `static_widths` widths (None: the device's default). Its tokens and forwards are the eager path's; only its timing
    differs (bench and tune both time it as a twin)."""
    return _on_path(config, COMPILED, static_widths)


def _on_path(config: JacobiConfig, path: str, static_widths: int | None = None) -> JacobiConfig:
    if path not in JACOBI_PATHS:
        raise ValueError(f"unknown Jacobi path {path!r}; accepted: {list(JACOBI_PATHS)}")
    if path == EAGER:  # an "auto" cache runs eagerly on the dynamic cache here on every device; COMPILED is its twin
        return on_dynamic_cache(config) if config.cache_implementation == AUTO_CACHE else config
    compile_mode = "always" if path == COMPILED else "never"
    return config.replace(cache_implementation="static", compile=compile_mode, static_widths=static_widths)


def bench_settings(
    block_sizes: list[int],
    variants: list[str],
    compiled_baseline: bool = True,
    paths: tuple[str, ...] | list[str] = (EAGER,),
    static_widths: tuple[int | None, ...] | list[int | None] = (None,),
) -> list[Setting]:
    """Plain AR first (the reference every other setting is checked against), then the compiled AR, then Jacobi on
    each of `paths` (eager once; static and compiled once per entry of `static_widths`)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown Jacobi variants {unknown}; accepted: {list(VARIANTS)}")
    settings = [Setting("AR (generate)", AR)]
    if compiled_baseline:
        settings.append(Setting("AR (static cache + compile)", AR_COMPILED))
    for path, widths in path_variants(paths, static_widths):
        for variant in variants:
            for block in block_sizes:
                settings.append(Setting.jacobi(variant, block, path, widths))
    return settings


def path_variants(
    paths: tuple[str, ...] | list[str], static_widths: tuple[int | None, ...] | list[int | None] = (None,)
) -> list[tuple[str, int | None]]:
    """(path, static widths) of every way a Jacobi setting is timed: eager once, the static paths once per width
    count."""
    return [(path, widths) for path in paths for widths in ((None,) if path == EAGER else static_widths)]
