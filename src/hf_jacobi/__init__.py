"""hf_jacobi: lossless Jacobi parallel decoding and Jacobi Forcing training for Hugging Face causal language models.

Names are imported on first use: a user who only decodes never pays for trl, peft or datasets (several seconds), and
`import hf_jacobi` itself stays instant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "JacobiConfig": ".decoding.config",
    "JacobiDecoderOnlyOutput": ".decoding.outputs",
    "disable_jacobi": ".decoding.generate",
    "enable_jacobi": ".decoding.generate",
    "load_default_model": ".loading",
    "load_model": ".loading",
    "JacobiForcingCollator": ".training.collator",
    "TrajectoryRecorder": ".data.trajectories",
    "TrajectoryDataError": ".data.trajectory_schema",
    "collect_trajectories": ".data.collection",
    "load_trajectories": ".data.collection",
    "encode_anchor_texts": ".data.anchor_texts",
    "encode_prompts": ".data.prompts",
    "load_anchor_texts": ".data.anchor_texts",
    "load_prompts": ".data.prompts",
    "magpie_prompts": ".data.magpie",
    "stdlib_prompts": ".data.function_prompts",
    "JacobiForcingConfig": ".training.config",
    "JacobiForcingTrainer": ".training.trainer",
    "publish_checkpoint": ".hub.push",
}
"""Public name -> the module that defines it."""

__all__ = [
    "JacobiConfig",
    "JacobiDecoderOnlyOutput",
    "JacobiForcingCollator",
    "JacobiForcingConfig",
    "JacobiForcingTrainer",
    "TrajectoryDataError",
    "TrajectoryRecorder",
    "__version__",
    "collect_trajectories",
    "disable_jacobi",
    "enable_jacobi",
    "encode_anchor_texts",
    "encode_prompts",
    "load_anchor_texts",
    "load_default_model",
    "load_model",
    "load_prompts",
    "load_trajectories",
    "magpie_prompts",
    "publish_checkpoint",
    "stdlib_prompts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hf_jacobi' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # static type checkers and IDEs see the real names
    from .data.anchor_texts import encode_anchor_texts, load_anchor_texts
    from .data.collection import collect_trajectories, load_trajectories
    from .data.function_prompts import stdlib_prompts
    from .data.magpie import magpie_prompts
    from .data.prompts import encode_prompts, load_prompts
    from .data.trajectories import TrajectoryRecorder
    from .data.trajectory_schema import TrajectoryDataError
    from .decoding.config import JacobiConfig
    from .decoding.generate import disable_jacobi, enable_jacobi
    from .decoding.outputs import JacobiDecoderOnlyOutput
    from .hub.push import publish_checkpoint
    from .loading import load_default_model, load_model
    from .training.collator import JacobiForcingCollator
    from .training.config import JacobiForcingConfig
    from .training.trainer import JacobiForcingTrainer
