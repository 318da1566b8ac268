"""What Jacobi decoding refuses, checked before the prefill: settings it could not honour losslessly.

Each refusal names the value and what is accepted, so that a user never gets a silently different decoding.
"""

from __future__ import annotations

from typing import Any

from transformers import GenerationConfig, StaticCache

SUPPORTED_ATTENTION = ("sdpa", "eager")


def check_generation_config(model, generation_config: GenerationConfig, model_kwargs: dict[str, Any]) -> None:
    """Rejects settings that Jacobi decoding cannot honour losslessly, naming the value and what is accepted."""
    if model.config.is_encoder_decoder:
        raise ValueError("decoding='jacobi' supports decoder-only models; this model is an encoder-decoder.")
    attn = getattr(model.config, "_attn_implementation", None) or "eager"
    if attn not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"decoding='jacobi' needs an attention implementation that takes 4D masks, one of {list(SUPPORTED_ATTENTION)};"
            f" the model uses {attn!r}. Load it with attn_implementation='sdpa' or call model.set_attn_implementation('sdpa')."
        )
    if generation_config.num_beams != 1:
        raise ValueError(
            f"decoding='jacobi' replaces greedy decoding or sampling, not beam search: num_beams must be 1, "
            f"got {generation_config.num_beams}."
        )
    if generation_config.num_return_sequences not in (None, 1):
        raise ValueError(
            f"decoding='jacobi' returns one sequence per prompt: num_return_sequences must be 1, "
            f"got {generation_config.num_return_sequences}."
        )
    if generation_config.penalty_alpha is not None and generation_config.top_k not in (None, 1):
        raise ValueError("decoding='jacobi' cannot be combined with contrastive search (penalty_alpha).")
    if not generation_config.use_cache:
        raise ValueError("decoding='jacobi' needs the KV cache: use_cache must be True.")
    for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
        if getattr(generation_config, flag, False):
            raise ValueError(f"decoding='jacobi' does not return per-step tensors: {flag} must be False.")
    cache = model_kwargs.get("past_key_values")
    if generation_config.cache_implementation not in (None, "dynamic") or isinstance(cache, StaticCache):
        raise ValueError(
            "decoding='jacobi' needs a dynamic cache that can roll back rejected drafts; got "
            f"cache_implementation={generation_config.cache_implementation!r}. Accepted: None or 'dynamic'."
        )
    if cache is not None and getattr(cache, "_is_user_defined", False):
        raise ValueError("decoding='jacobi' builds its own cache: do not pass past_key_values.")
