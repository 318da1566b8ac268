"""Plugging Jacobi decoding into `model.generate`.

transformers has no registry of decoding modes, so `enable_jacobi` sets an instance-level `generate` that reads
`decoding` and the `jacobi_*` settings (from the call or the generation config), and hands everything else to the
model's own generate with the Jacobi loop as its `custom_generate` callable. That keeps all of generate's preparation
(generation config, special tokens, masks, processors, stopping criteria) and leaves the class, its
`config.architectures` and every other instance untouched. Greedy calls go straight through, unchanged.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable
from typing import Any

from transformers import StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from .call_settings import resolve_decoding, resolve_jacobi_config, split_jacobi_kwargs
from .config import JACOBI_PREFIX, JacobiConfig
from .cpu_info import bfloat16_units
from .greedy_devices import greedy_entry
from .loop import JacobiRuntime, jacobi_decode
from .sdpa_gqa import with_cpu_gqa

_ENABLED_FLAG = "_hf_jacobi_original_generate"


def enable_jacobi(model):
    """Makes `model.generate(..., decoding="jacobi")` run Jacobi decoding; returns the same model.

    Works on any transformers causal LM and on a peft `PeftModel`. Calling it twice is harmless. Both the Jacobi-aware
    generate and the saved original are methods bound to the instance, so `copy.deepcopy(model)` gives a copy whose
    generate runs the copy's weights (a closure over the model would keep calling the original).
    """
    if getattr(model, _ENABLED_FLAG, None) is not None:
        return model
    setattr(model, _ENABLED_FLAG, model.generate)
    model.generate = types.MethodType(_jacobi_aware_generate, model)
    return model


def _jacobi_aware_generate(self, *args: Any, **kwargs: Any):
    return generate_with_jacobi(getattr(self, _ENABLED_FLAG), self, args, kwargs)


def generate(*args: Any, model, **kwargs: Any):
    """Entry point of a Hub checkpoint's `custom_generate/` folder, where this module is shipped as `generate.py`.

    transformers calls it with `model=` and the raw generate() arguments, both for
    `model.generate(custom_generate=REPO, trust_remote_code=True)` and for a model loaded with
    `from_pretrained(REPO, trust_remote_code=True)`, whose `generate` it replaces; so users without hf_jacobi
    installed get the same loop. Here Jacobi is the default mode; `decoding="greedy"` still reaches stock generate.
    """
    original = functools.partial(type(model).generate, model)
    return generate_with_jacobi(original, model, args, kwargs, default_decoding="jacobi")


def generate_with_jacobi(
    original: Callable[..., Any],
    model,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    default_decoding: str = "greedy",
):
    """Routes one generate() call: greedy calls go to `original` unchanged, Jacobi calls go to it with the Jacobi loop
    as its `custom_generate` callable."""
    recorder = kwargs.pop("trajectory_recorder", None)
    decoding, settings = split_jacobi_kwargs(kwargs)
    passed_config = kwargs.get("generation_config")
    model_config = getattr(model, "generation_config", None)
    # Settings are validated even when decoding greedily, so a typo never passes silently.
    jacobi_config = resolve_jacobi_config(passed_config, model_config, settings, kwargs.get("cache_implementation"))
    if resolve_decoding(decoding, passed_config, model_config, default=default_decoding) == "greedy":
        if recorder is not None:
            raise ValueError("trajectory_recorder records Jacobi iterations: it needs decoding='jacobi'.")
        return original(*args, **kwargs)
    if recorder is None and _greedy_on_this_device(model, jacobi_config):
        return original(*args, **kwargs)
    if kwargs.get("custom_generate") is not None:
        raise ValueError("decoding='jacobi' cannot be combined with custom_generate.")
    if kwargs.get("assistant_model") is not None or kwargs.get("prompt_lookup_num_tokens") is not None:
        raise ValueError(
            "decoding='jacobi' drafts by itself: assistant_model and prompt_lookup_num_tokens must be unset."
        )
    if kwargs.get("inputs_embeds") is not None and not args and kwargs.get("input_ids", kwargs.get("inputs")) is None:
        raise ValueError(
            "decoding='jacobi' drafts from the prompt's token ids: pass input_ids, not inputs_embeds alone."
        )
    if kwargs.get("synced_gpus"):
        raise ValueError("decoding='jacobi' does not support synced_gpus=True (FSDP/ZeRO-3 sharded generation).")
    _route_stop_strings(kwargs, passed_config, model_config)
    kwargs["jacobi_runtime"] = JacobiRuntime(config=jacobi_config, streamer=kwargs.get("streamer"), recorder=recorder)
    kwargs.pop("custom_generate", None)
    # the loop's wide masked forwards use the shared key/value heads in place on a CPU (`sdpa_gqa`)
    return original(*args, custom_generate=with_cpu_gqa(jacobi_decode), **kwargs)


def _greedy_on_this_device(model, config: JacobiConfig) -> bool:
    """Whether the settings list the model's device type in `greedy_devices` (Jacobi measured not to pay there), in
    which case the call decodes greedily; a warning says so, once per device type and message."""
    device_type = getattr(getattr(model, "device", None), "type", None)
    setting = f"{JACOBI_PREFIX}greedy_devices"
    if not config.greedy_devices:
        return False
    dtype = getattr(model, "dtype", None)
    units = bfloat16_units() if device_type == "cpu" else None
    entry = greedy_entry(config.greedy_devices, device_type, dtype, units)
    if entry is None:
        return False
    warnings.warn(
        f"decoding='jacobi' decodes greedily on {device_type} in {str(dtype).removeprefix('torch.')}: this model's "
        f"Jacobi settings list {entry!r} in {setting}, where they were measured slower than greedy decoding (the "
        f"tokens are the same). Pass {setting}=[] to run Jacobi decoding anyway.",
        UserWarning,
        stacklevel=4,
    )
    return True


def disable_jacobi(model):
    """Restores the model's own generate."""
    original = getattr(model, _ENABLED_FLAG, None)
    if original is not None:
        del model.generate
        setattr(model, _ENABLED_FLAG, None)
    return model


def _route_stop_strings(kwargs: dict[str, Any], passed_config, model_config) -> None:
    """Builds stop-string criteria here, where the tokenizer is still at hand.

    generate() does not pass `tokenizer` to a callable custom_generate's preparation, so stop strings set there would
    fail to find one; the equivalent criterion is passed in `stopping_criteria` instead.
    """
    tokenizer = kwargs.pop("tokenizer", None)
    stop_strings = kwargs.get("stop_strings")
    if stop_strings is None:
        for source in (passed_config, model_config):
            if source is not None and getattr(source, "stop_strings", None) is not None:
                stop_strings = source.stop_strings
                break
    if stop_strings is None:
        return
    if tokenizer is None:
        raise ValueError("stop_strings need the tokenizer: pass tokenizer=... to generate().")
    criteria = StoppingCriteriaList(kwargs.get("stopping_criteria") or [])
    criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings))
    kwargs["stopping_criteria"] = criteria
    kwargs["stop_strings"] = None
