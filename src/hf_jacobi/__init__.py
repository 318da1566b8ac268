"""hf_jacobi: lossless Jacobi parallel decoding and Jacobi Forcing training for Hugging Face causal language models.

Names are imported on first use: a user who only decodes never pays for trl, peft or datasets (several seconds), and
`import hf_jacobi` itself stays instant.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__ as __version__

_EXPORTS = {
    ".decoding.config": ("JacobiConfig",),
    ".decoding.outputs": ("JacobiDecoderOnlyOutput",),
    ".decoding.generate": ("disable_jacobi", "enable_jacobi"),
    ".loading": ("load_default_model", "load_model", "resolve_model_path"),
    ".decoding.cpu_info": ("auto_dtype", "cpu_description"),
    ".adapters": ("JACOBI_FORCING_WEIGHTS",),
    ".training.collator": ("JacobiForcingCollator",),
    ".training.config": ("JacobiForcingConfig",),
    ".training.trainer": ("JacobiForcingTrainer",),
    ".training.probe": ("ProbeResult", "probe_acceptance"),
    ".data.trajectories": ("TrajectoryRecorder",),
    ".data.trajectory_schema": ("TrajectoryDataError",),
    ".data.collection": ("collect_trajectories", "load_trajectories"),
    ".data.shards": ("collected_answers", "collection_settings"),
    ".data.anchor_texts": ("encode_anchor_texts", "load_anchor_texts"),
    ".data.prompts": ("encode_prompts", "load_prompts"),
    ".data.chat": ("encode_chat",),
    ".data.magpie": ("InstructionFilter", "evaluation_texts", "magpie_prompts"),
    ".data.function_prompts": ("FUNCTION_PROMPT_INSTRUCTION", "prompt_dataset", "stdlib_prompts"),
    ".data.decontamination": ("find_overlaps", "prompt_texts"),
    ".hub.push": ("publish_checkpoint",),
}
"""The public API, listed once: the module that defines each public name. `__all__` and the lazy lookup derive from it
(type checkers read the names through `__getattr__`; `help(hf_jacobi.NAME)` and IDEs resolve them on first use)."""

_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_MODULE_OF, "__version__"])


TRAINING_EXTRA = ("trl", "peft", "datasets", "accelerate")
"""What `pip install hf-jacobi[train]` adds to a decoding-only install: collection, training and evaluation need them,
`generate(decoding="jacobi")`, the embedded model (with the shipped adapter) and the vLLM proposer do not."""


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'hf_jacobi' has no attribute {name!r}")
    try:
        imported = importlib.import_module(module, __name__)
    except ModuleNotFoundError as error:
        if error.name not in TRAINING_EXTRA:
            raise
        raise ModuleNotFoundError(
            f"hf_jacobi.{name} needs {error.name}, which a decoding-only install leaves out: pip install "
            "'hf-jacobi[train]'",
            name=error.name,
        ) from error
    value = getattr(imported, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])
