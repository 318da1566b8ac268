"""Real model shapes with random weights, for costing the forwards of models without downloading them.

What a forward costs depends on the shapes and the dtype, not on the weights, so a model built from a real
architecture's configuration with random weights times exactly like the released one. That is what the choice of a
Jacobi width and a projected speedup need for models larger than the embedded one (the tokens per forward, which do
depend on the weights, come from the embedded model and are applied as a labelled projection).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

ARCHITECTURES: dict[str, dict[str, Any]] = {
    # HuggingFaceTB/SmolLM2-135M-Instruct: the embedded model's own shapes
    "smollm2-135m": {
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
    },
    # Qwen/Qwen2.5-Coder-1.5B-Instruct
    "qwen2.5-coder-1.5b": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    # Qwen/Qwen2.5-Coder-7B-Instruct (the paper's model)
    "qwen2.5-coder-7b": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    # a few kilobytes of weights: the same code path, for tests and CPU smoke runs
    "tiny-llama": {
        "model_type": "llama",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 128,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
    },
}
"""Configurations copied from the models' released config.json files (the fields that set a forward's cost)."""


def random_model(name: str, dtype: torch.dtype, device: str | torch.device) -> PreTrainedModel:
    """The architecture `name` with random weights, built directly on `device` in `dtype`, in eval mode."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}; accepted: {list(ARCHITECTURES)}")
    spec = dict(ARCHITECTURES[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def parameter_count(model: PreTrainedModel) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
