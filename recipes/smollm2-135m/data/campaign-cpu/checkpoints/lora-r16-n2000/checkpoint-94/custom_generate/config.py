"""Jacobi decoding settings: where they come from and what values they accept.

The settings live on `GenerationConfig` as `decoding` and `jacobi_*` attributes, so a checkpoint can carry its own
defaults in generation_config.json; per-call keyword arguments to `generate()` override them. Everything is checked
here, at the public boundary, so that the decoding loop can trust its inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from transformers import GenerationConfig

from .greedy_devices import device_types

DECODING_MODES = ("greedy", "jacobi")
"""Values accepted by `generate(decoding=...)`. "greedy" means "whatever stock generate does"."""

JACOBI_PREFIX = "jacobi_"

CACHE_IMPLEMENTATIONS = ("dynamic", "static")
"""Caches the Jacobi loop runs on: "dynamic" grows and crops a `DynamicCache`; "static" preallocates a fixed-size cache
and verifies every step with the same forward shape, so that the forward can be compiled (a CUDA graph on a GPU)."""

AUTO_CACHE = "auto"
"""`jacobi_cache_implementation="auto"`: the static cache where its verify forward would be compiled (`compile` "auto"
as transformers' generate decides, i.e. on an accelerator; or "always"), the dynamic cache elsewhere. Each call
resolves it (`cache_choice.resolve_cache`), on the model's device."""

CACHE_CHOICES = (AUTO_CACHE, *CACHE_IMPLEMENTATIONS)

COMPILE_MODES = ("auto", "always", "never")
"""When the static path compiles its verify forward: "auto" follows transformers' generate (on an accelerator, or
where `compile_config` asks for every device, unless `disable_compile`); "always" compiles on any device, the CPU
included; "never" keeps it eager."""


@dataclass(frozen=True)
class JacobiConfig:
    """Settings of one Jacobi decoding call.

    None of them changes the output (greedy stays greedy, sampling keeps its distribution); they trade the width of
    each forward against how many tokens it can commit.

    Args:
        block_size: Tokens per Jacobi block (n). The first token of a block is always the committed greedy token, so a
            block of 1 is plain autoregressive decoding through the Jacobi loop. Larger blocks can accept more tokens
            per forward but make each forward wider.
        num_blocks: Blocks in flight at most (K). Blocks after the first refine drafts for the positions that follow
            it, in the same forward; a run of accepted tokens may cross from one block into the next.
        spawn_ratio: A new block is added once the newest block has this share of its tokens unchanged since the
            previous iteration (converged), so that later blocks start from a nearly settled context.
        ngram_pool_size: Rejection recycling: n-grams kept per key (0 turns recycling off). Rejected draft tails, the
            prompt and the committed text feed the pool; entries keyed on the last committed tokens are verified
            alongside the draft in the same forward.
        verify_size: Candidate n-grams verified per step at most (V); defaults to `ngram_pool_size`.
        ngram_size: Tokens per candidate n-gram; defaults to `block_size - 1` (a candidate plus the committed token
            it follows makes one block).
        ngram_key_size: How many of the last committed tokens key the pool; lookups back off to shorter suffixes
            when the longest finds fewer than `verify_size` candidates.
        draft_seed: Seed of the generator that draws the initial draft tokens from the prompt. Fixed by default so that
            two identical calls spend the same number of forwards; it never changes the output.
        cache_implementation: "dynamic" (a cache that grows and is cropped), "static" (preallocated, every verify
            forward of a call the same width, so it can be compiled) or "auto" (static where that forward would be
            compiled: on an accelerator, where the compiled path is what makes Jacobi faster than compiled greedy;
            dynamic on a CPU, where compiling costs minutes before the first token). A call's or a generation
            config's own `cache_implementation` counts as this setting where this one is not set beside it.
        compile: When the static path compiles its verify forward: "auto" (as transformers' generate decides: on an
            accelerator, or where `compile_config` asks for every device), "always" (any device, the CPU included)
            or "never". Only the static cache can be compiled.
        static_widths: How many forward widths the static path pads to (compiled: one graph with the width dynamic; on a
            GPU one CUDA graph recorded per width): the chain plus
            0..V candidates at evenly spread counts, so a step with few candidates is not padded to the widest.
            None picks by device: up to 5 on a CPU, where every padded column costs; 1 on an accelerator, where one
            CUDA graph of the widest forward costs little more than a narrower one and each graph is a capture.
        greedy_devices: Where these settings do not pay, so that `decoding="jacobi"` decodes greedily there instead
            (the same tokens, stock generate's output) and says so once. Each entry is a device type ("cpu", "cuda",
            "mps", ...), optionally with a dtype ("cpu:float32": greedy on a CPU in float32 only) and on a CPU with
            its bfloat16 units ("cpu:bfloat16:none": in bfloat16 on a CPU without them; "amx" and "avx512_bf16" name
            them, see `hf_jacobi.decoding.cpu_info`): on a CPU the cost of verifying a block depends on both. A
            checkpoint whose settings were measured slower than greedy on some device ships it, as `tune` keeps
            greedy where nothing pays; `jacobi_greedy_devices=[]` in a call runs Jacobi anyway. Collection, which
            records Jacobi states, and the project's own measurements always run Jacobi.
    """

    block_size: int = 16
    num_blocks: int = 1
    spawn_ratio: float = 0.85
    ngram_pool_size: int = 0
    verify_size: int | None = None
    ngram_size: int | None = None
    ngram_key_size: int = 2
    draft_seed: int = 0
    cache_implementation: str = "dynamic"
    compile: str = "auto"
    static_widths: int | None = None
    greedy_devices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_int("block_size", self.block_size, minimum=1)
        _check_int("num_blocks", self.num_blocks, minimum=1)
        ratio = self.spawn_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 < ratio <= 1.0:
            raise ValueError(f"jacobi_spawn_ratio must be a number in (0, 1], got {ratio!r}.")
        _check_int("ngram_pool_size", self.ngram_pool_size, minimum=0)
        if self.verify_size is not None:
            _check_int("verify_size", self.verify_size, minimum=1)
            if self.ngram_pool_size == 0:
                raise ValueError(
                    f"jacobi_verify_size={self.verify_size} has no effect without recycling: set "
                    "jacobi_ngram_pool_size >= 1 as well, or leave jacobi_verify_size unset."
                )
        if self.ngram_size is not None:
            _check_int("ngram_size", self.ngram_size, minimum=1)
        _check_int("ngram_key_size", self.ngram_key_size, minimum=1)
        if isinstance(self.draft_seed, bool) or not isinstance(self.draft_seed, int):
            raise ValueError(f"jacobi_draft_seed must be an integer, got {self.draft_seed!r}.")
        if self.cache_implementation not in CACHE_CHOICES:
            raise ValueError(
                f"jacobi_cache_implementation must be one of {list(CACHE_CHOICES)}, got {self.cache_implementation!r}."
            )
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"jacobi_compile must be one of {list(COMPILE_MODES)}, got {self.compile!r}.")
        if self.static_widths is not None:
            _check_int("static_widths", self.static_widths, minimum=1)
        if self.greedy_devices is not None:
            object.__setattr__(self, "greedy_devices", device_types(self.greedy_devices))
        if self.cache_implementation == "dynamic":
            if self.compile == "always":
                _needs_static("jacobi_compile='always' compiles the static path's verify forward", self)
            if self.static_widths is not None:
                _needs_static(f"jacobi_static_widths={self.static_widths} sets the static path's forward widths", self)

    @property
    def candidates_per_step(self) -> int:
        """V: how many pool candidates a row verifies per forward (0 without recycling)."""
        if self.ngram_pool_size == 0:
            return 0
        return self.verify_size if self.verify_size is not None else self.ngram_pool_size

    @property
    def candidate_length(self) -> int:
        """Tokens per candidate n-gram."""
        return self.ngram_size if self.ngram_size is not None else max(self.block_size - 1, 1)

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The `jacobi_*` keyword names accepted by generate() and GenerationConfig."""
        return tuple(JACOBI_PREFIX + f.name for f in fields(cls))

    def replace(self, **changes: Any) -> JacobiConfig:
        """A copy with some settings changed (None values are ignored, so optional CLI flags can be passed as they
        are); the copy is validated like any new config."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        """The settings by their short names (`block_size`, ...), for reports and JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_generate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments that make `model.generate(...)` run Jacobi decoding with exactly these settings."""
        kwargs: dict[str, Any] = {"decoding": "jacobi"}
        kwargs.update({JACOBI_PREFIX + name: value for name, value in self.to_dict().items() if value is not None})
        return kwargs

    @classmethod
    def from_generation_config(cls, *generation_configs: GenerationConfig | None, **overrides: Any) -> JacobiConfig:
        """The settings the generation configs carry (later ones win; defaults for what none sets), then `overrides`
        (None values ignored). Validated once, on the merged values.

        This is how a checkpoint's generation_config.json, written by `write_to`, becomes the defaults of a call.
        """
        layers = [cls.settings_in(config) for config in generation_configs]
        return cls.from_layers([*layers, {k: v for k, v in overrides.items() if v is not None}])

    @classmethod
    def from_layers(cls, layers: list[dict[str, Any]]) -> JacobiConfig:
        """Merges layers of settings (short names; later layers win) and validates the result once.

        A setting that only means something beside another one goes when a later layer turns that one off: a verify
        size that belongs to an earlier layer's pool is dropped when a later layer sets `ngram_pool_size=0` (a
        checkpoint tuned to recycling must still decode plain Jacobi when a call asks for no pool), and an earlier
        layer's `compile` and `static_widths` are dropped when a later one chooses the dynamic cache.
        """
        values: dict[str, Any] = {}
        set_by: dict[str, int] = {}
        for index, layer in enumerate(layers):
            values.update(layer)
            set_by.update(dict.fromkeys(layer, index))
        if values.get("ngram_pool_size") == 0 and set_by.get("verify_size", -1) < set_by["ngram_pool_size"]:
            values.pop("verify_size", None)
        for name in ("compile", "static_widths"):
            if (
                values.get("cache_implementation") == "dynamic"
                and set_by.get(name, -1) < set_by["cache_implementation"]
            ):
                values.pop(name, None)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"Unknown Jacobi setting(s) {unknown}; accepted settings are {sorted(cls().to_dict())}.")
        return cls(**values)

    @classmethod
    def settings_in(cls, generation_config: GenerationConfig | None) -> dict[str, Any]:
        """The Jacobi settings a generation config sets (short names), without defaults for the rest."""
        if generation_config is None:
            return {}
        found = {f.name: getattr(generation_config, JACOBI_PREFIX + f.name, None) for f in fields(cls)}
        return {name: value for name, value in found.items() if value is not None}

    def write_to(self, generation_config: GenerationConfig, *, decoding: str = "jacobi") -> GenerationConfig:
        """Stores these settings on `generation_config` (in place, and returned) so that `save_pretrained` carries them
        and `model.generate(decoding=...)` with no other argument uses them.

        Settings left at None are removed rather than written, so a later default (e.g. `verify_size` following the
        pool size) keeps applying. `decoding="greedy"` records settings but keeps stock decoding the default.

        The config stops being marked as derived from config.json (`_from_model_config`, true on a model whose
        generation config came from its config): loading a file so marked keeps only the attributes transformers
        knows, which would silently drop every setting written here.
        """
        generation_config._from_model_config = False
        generation_config.decoding = validate_decoding(decoding)
        for name, value in self.to_dict().items():
            key = JACOBI_PREFIX + name
            if value is None:
                if hasattr(generation_config, key):
                    delattr(generation_config, key)
            else:
                setattr(generation_config, key, value)
        return generation_config

    def describe(self) -> str:
        """A short human label, e.g. "block 16, 2 blocks, pool 4", for tables and logs."""
        parts = [f"block {self.block_size}"]
        if self.num_blocks > 1:
            parts.append(f"{self.num_blocks} blocks")
        if self.ngram_pool_size:
            parts.append(f"pool {self.ngram_pool_size}")
            if self.verify_size is not None:
                parts.append(f"{self.verify_size} verified per step")
            if self.ngram_size is not None:
                parts.append(f"{self.ngram_size}-token candidates")
        if self.cache_implementation != "dynamic":
            parts.append(self.describe_cache())
        return ", ".join(parts)

    def describe_cache(self) -> str:
        """The cache part of `describe`, e.g. "compiled static cache in 5 widths" (bench names its paths with it)."""
        if self.cache_implementation == AUTO_CACHE:
            return "static cache where compiled"
        if self.cache_implementation != "static":
            return "dynamic cache"
        names = {"auto": "static cache", "always": "compiled static cache", "never": "eager static cache"}
        widths = self.static_widths
        return names[self.compile] + (f" in {widths} width{'s' * (widths > 1)}" if widths else "")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{JACOBI_PREFIX}{name} must be an integer >= {minimum}, got {value!r}.")


def _needs_static(what: str, config: JacobiConfig) -> None:
    raise ValueError(
        f"{what}: it needs jacobi_cache_implementation='static' (or cache_implementation='static'), "
        f"got {config.cache_implementation!r}."
    )


def validate_decoding(value: Any) -> str:
    """Returns the decoding mode, defaulting to "greedy", or raises naming the accepted values."""
    if value is None:
        return "greedy"
    if value not in DECODING_MODES:
        raise ValueError(f"decoding must be one of {list(DECODING_MODES)} (or None), got {value!r}.")
    return value
