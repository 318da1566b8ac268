"""Frozen linear weights cast to the autocast dtype once per run, instead of at every forward.

Under autocast each linear layer casts its float32 weight to bfloat16 (or float16) on every call, and autocast keeps a
cast only for weights that require grad (and only until the autocast region ends). A LoRA run's frozen base weights,
which every forward of every step reads (the KL anchor's base forward too), are therefore recast at each forward (what
that costs a CPU step is in docs/training.md). A frozen weight's cast never changes, so it is made once here and
swapped in for each micro-batch's forward and backward: the matmuls read the very values autocast would have made, so
losses and gradients are bitwise the same.

Outside a step (evaluation, generation in callbacks, saving, merging) the layers hold their float32 weights again: the
swap sets a tensor pointer per weight, and the casts are kept beside the originals, which costs half the frozen
linear weights' memory again (`JacobiForcingConfig.cache_frozen_weights=False` turns it off). Weights that are shared
with a module other than a linear layer (an LM head tied to the input embedding) are left alone: the embedding reads
its float32 weight outside autocast. Sharded runs (DeepSpeed, FSDP) manage their parameters' storage themselves and are
left alone too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .config import JacobiForcingConfig


class FrozenWeightCasts:
    """The frozen float32 weights (and biases) of linear layers, each with its cast to `dtype`, swapped in by
    `swapped()`. Empty (`swapped()` then does nothing) where there is nothing to cast."""

    def __init__(self, modules: Iterable[nn.Module], dtype: torch.dtype) -> None:
        modules = list(modules)
        # a parameter also held by a module that is not a linear layer (a tied embedding) reads its own dtype there
        elsewhere = {
            id(param)
            for module in modules
            if not isinstance(module, nn.Linear)
            for param in module.parameters(recurse=False)
        }
        self.entries: list[tuple[nn.Parameter, torch.Tensor, torch.Tensor]] = []
        for module in modules:
            if not isinstance(module, nn.Linear):
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad or param.dtype != torch.float32 or id(param) in elsewhere:
                    continue
                elsewhere.add(id(param))  # a weight two linear layers share is cast once
                self.entries.append((param, param.data, param.data.to(dtype)))

    @classmethod
    def for_models(cls, models: Iterable[nn.Module | None], dtype: torch.dtype | None) -> FrozenWeightCasts:
        """The casts for the linear layers of `models` (None entries skipped) under autocast to `dtype`; empty when
        `dtype` is None (no autocast: a float32 run reads its weights as they are)."""
        modules = [m for model in models if model is not None for m in model.modules()] if dtype else []
        return cls(modules, dtype or torch.float32)

    def __len__(self) -> int:
        return len(self.entries)

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """The casts in place of the float32 weights for the duration: only under autocast to the casts' dtype
        (outside it a float32 input would meet a cast weight), and over a forward and its backward together (the
        backward reads the weight the forward saved)."""
        for param, _, cast in self.entries:
            param.data = cast
        try:
            yield
        finally:
            for param, original, _ in self.entries:
                param.data = original


def cached_cast_dtype(args: JacobiForcingConfig, sharded: bool) -> torch.dtype | None:
    """The dtype to cache frozen weights in for a run with these settings: the one its mixed precision
    autocasts linear layers to, or None (no cache) without mixed precision, with `cache_frozen_weights` off, or when
    the parameters are sharded (DeepSpeed, FSDP: their storage is the plugin's)."""
    if sharded or not args.cache_frozen_weights:
        return None
    return torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
