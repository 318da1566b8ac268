"""The static path's verify forward, compiled on a torch.compile frame of its own.

Dynamo keeps its compiled graphs per Python code object, and transformers compiles greedy's decoding forward as
`model.__call__` (`get_compiled_call`). Were the Jacobi forward compiled through that same call, whichever of the two
compiled second would count as a recompile of the first, and dynamo's automatic dynamic shapes would trace it with
symbolic sizes: a user who runs greedy and Jacobi in one process (every benchmark does) would get a dynamic-shape
Jacobi graph, where a Jacobi-only user gets a static one, and the benchmark would time another program than users run.
Here the Jacobi forward enters through `_verify_call`, a frame no other compile shares. Its width is marked too, since
settings of different widths share the frame as well: with one forward width per call (an accelerator's default) the
width is marked static, so that each setting keeps a static graph of its own however many settings take turns (as in
a benchmark); with several (a CPU's default) it is marked dynamic from the first call, so that one graph, compiled once
on the first call, serves every width (left to dynamo, the second width would compile a dynamic graph in whichever
later call first met it, in a benchmark possibly a timed one). `compile_config.dynamic`, when set, is left to decide.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial

import torch
from transformers import CompileConfig, GenerationConfig

from .cache_choice import generate_would_compile
from .config import JacobiConfig

COMPILED_ATTRIBUTE = "_hf_jacobi_compiled_verify"
"""Set on the model: the compile settings of its last compiled verify forward and the compiled function, so that later
calls with the same settings reuse it (as transformers keeps `_compiled_call`)."""


def verify_forward(model, config: JacobiConfig, generation_config: GenerationConfig, cache, widths: int) -> Callable:
    """The callable that runs the static path's verify forwards over `widths` forward widths: compiled where
    `config.compile` (and, for "auto", transformers' own criteria for its static cache) says so, else the model
    itself. The prefill never goes through it."""
    if config.compile == "never":
        return model
    compile_config = getattr(generation_config, "compile_config", None)
    if compile_config is None:
        compile_config = _default_compile_config(model)
    if config.compile == "always":
        compile_config = copy.deepcopy(compile_config)
        compile_config._compile_all_devices = True
        return compiled_verify_call(model, compile_config, widths)
    if generate_would_compile(model, generation_config, cache):  # generate's own rule (device, quantizer, offload)
        return compiled_verify_call(model, compile_config, widths)
    return model


def _default_compile_config(model) -> CompileConfig:
    """What transformers compiles with when the call names no `compile_config`: the model's own default (it differs
    by device, e.g. static shapes with a TPU's backend), else `CompileConfig()`."""
    default = getattr(model, "_default_compile_config", None)
    return default() if callable(default) else CompileConfig()


def compiled_verify_call(model, compile_config: CompileConfig, widths: int) -> Callable:
    """`model`'s forward compiled with `compile_config`'s settings, entered through `_verify_call`; over several
    `widths`, with the width marked dynamic, over one static (see the module's docstring).

    Families that transformers does not compile for generation (its `get_compiled_call` hands llama4 back eagerly)
    stay eager here too.
    """
    if "llama4" in getattr(model.config, "model_type", ""):
        return model
    settings = compile_config.to_dict()
    kept = getattr(model, COMPILED_ATTRIBUTE, None)
    if kept is None or kept[0] != settings:
        kept = (settings, torch.compile(_verify_call, **settings))
        setattr(model, COMPILED_ATTRIBUTE, kept)
    if compile_config.dynamic is None:
        return partial(_with_marked_width, kept[1], model, widths > 1)
    return partial(kept[1], model)


def _verify_call(model, *args, **kwargs):
    """The one frame every compiled Jacobi verify forward is traced from (see the module's docstring)."""
    return model(*args, **kwargs)


def _with_marked_width(compiled: Callable, model, dynamic: bool, **inputs):
    """Calls `compiled` with the forward's width (the columns of its tokens, positions and mask rows) marked dynamic
    or static.

    `maybe_mark_dynamic` lets a model that needs a fixed width specialize it (a static graph per width, as without the
    mark) instead of failing."""
    mark = torch._dynamo.maybe_mark_dynamic if dynamic else torch._dynamo.mark_static
    masks = inputs["attention_mask"]
    for tensor, dim in (
        (inputs["input_ids"], 1),
        (inputs["position_ids"], 1),
        *((mask, 2) for mask in (masks.values() if isinstance(masks, dict) else (masks,))),
    ):
        mark(tensor, dim)
    return compiled(model, **inputs)
