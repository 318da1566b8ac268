"""What Jacobi decoding refuses, checked before the prefill: settings it could not honour losslessly, and forwards
that would not fit in memory.

Each refusal names the value and what is accepted (or what to lower), so that a user never gets a silently different
decoding, nor a machine brought down by one oversized allocation.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from transformers import GenerationConfig

from .cache import CACHE_ARGUMENTS
from .config import CACHE_IMPLEMENTATIONS, JACOBI_PREFIX, JacobiConfig
from .masks import SLIDING, AttentionLayout

GIB = 1024**3

SUPPORTED_ATTENTION = ("sdpa", "eager")


def check_generation_config(
    model, generation_config: GenerationConfig, model_kwargs: dict[str, Any], config: JacobiConfig
) -> None:
    """Rejects settings that Jacobi decoding cannot honour losslessly, naming the value and what is accepted.

    `config` is the call's resolved Jacobi configuration (its cache implementation included)."""
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
    cache = next((model_kwargs[name] for name in CACHE_ARGUMENTS if model_kwargs.get(name) is not None), None)
    if generation_config.cache_implementation not in (None, *CACHE_IMPLEMENTATIONS):
        raise ValueError(
            "decoding='jacobi' runs on a cache it can roll back rejected drafts in, a dynamic or its own static one; "
            f"got cache_implementation={generation_config.cache_implementation!r}. Accepted: None, "
            f"{', '.join(repr(name) for name in CACHE_IMPLEMENTATIONS)}."
        )
    if cache is not None and getattr(cache, "_is_user_defined", False):
        raise ValueError("decoding='jacobi' builds its own cache: do not pass `cache` (or `past_key_values`).")
    if config.cache_implementation == "dynamic" and getattr(generation_config, "compile_config", None) is not None:
        raise ValueError(
            "decoding='jacobi' compiles only the static cache's verify forward: compile_config needs "
            "cache_implementation='static'."
        )


def widest_forward(config: JacobiConfig, prompt_len: int, capacity: int) -> tuple[int, int]:
    """(chain columns, candidate columns) of the widest forward a call with a budget of `capacity` tokens can make."""
    chain, count, length = _forward_parts(config, prompt_len, capacity)
    return chain, count * length


def forward_widths(config: JacobiConfig, prompt_len: int, capacity: int, how_many: int) -> tuple[int, ...]:
    """The widths, narrowest first, that the static path pads its forwards to: the chain and `k` candidate branches for
    `how_many` counts `k` spread evenly from none to all (the widest forward last, so every step fits).

    Candidates come a whole branch at a time, so a step that verifies few of them (an empty pool early on, a key the
    pool has not seen) fits a narrower width; compiled, the widths share one graph with the width dynamic (on a GPU
    each is one recorded CUDA graph).
    """
    chain, count, length = _forward_parts(config, prompt_len, capacity)
    if how_many == 1 or count == 0:
        return (chain + count * length,)
    spread = min(how_many, count + 1) - 1
    return tuple(sorted({chain + round(count * step / spread) * length for step in range(spread + 1)}))


def _forward_parts(config: JacobiConfig, prompt_len: int, capacity: int) -> tuple[int, int, int]:
    """(chain columns, candidate branches, columns per branch) of the widest forward.

    The prefill commits the first token and no branch is given more drafts than the tokens left (`RowState.propose`),
    so huge settings are bounded by the budget. Candidates are bounded by what the pool can return: per key length, at
    most `ngram_pool_size` n-grams, and no more than were ever filed (one per prompt position, then per step one per
    committed token and one per draft of the chain's rejected tail).
    """
    drafts = max(capacity - 1, 0)
    chain = 1 + min(config.block_size * config.num_blocks - 1, drafts)
    filed = prompt_len + capacity * (chain + 1)
    count = min(config.candidates_per_step, config.ngram_key_size * min(config.ngram_pool_size, filed))
    return chain, count, min(config.candidate_length, drafts)


def forward_bytes(model, batch: int, width: int, context: int) -> dict[str, int]:
    """Estimated bytes of one Jacobi forward of `width` columns for `batch` rows over `context` slots (KV included).

    Logits come out in the model's dtype and, where logits processors run, are copied to float32 and processed (both
    copies counted: a bound); the additive masks are built per layer kind from a boolean and (for sliding windows) an
    int64 distance; eager and sdpa's math path materialize the float32 scores of one layer at a time; the KV cache
    holds the whole context on every layer.
    """
    text = model.config.get_text_config()
    itemsize = model.dtype.itemsize
    heads = getattr(text, "num_attention_heads", 0) or 0
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or (text.hidden_size // heads if heads else 0)
    layout = AttentionLayout.from_config(model.config)
    cells = batch * width * context
    return {
        "logits": batch * width * text.vocab_size * (itemsize + 8),
        "attention masks": cells * (len(layout.kinds) * itemsize + 1 + (8 if SLIDING in layout.kinds else 0)),
        "attention scores": cells * heads * 4,
        "KV cache": 2 * text.num_hidden_layers * batch * kv_heads * head_dim * context * itemsize,
    }


def free_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device`, or None where this cannot be told (the check is then skipped).

    CUDA: what the driver reports free plus what torch's caching allocator holds unused. CPU: the kernel's
    MemAvailable (page cache it can drop included), lowered to a cgroup v2 memory limit when a container sets one.
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type != "cpu":
        return None
    available = None
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as current:
            maximum = limit.read().strip()
            if maximum != "max":
                available = min(available, int(maximum) - int(current.read()))
    except (OSError, ValueError):
        pass
    return available


def model_positions(model) -> int | None:
    """The positions the model can address (`max_position_embeddings` of its text config), or None where unsaid."""
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return positions if isinstance(positions, int) and positions > 0 else None


def warn_unusable_block_size(model, config: JacobiConfig, capacity: int) -> None:
    """Warns, once per call, when `jacobi_block_size` is larger than any request to this model can use: over the
    positions the model addresses and over this call's token budget `capacity` (where the config does not say its
    positions, over the budget alone). The loop caps a block at the budget (`loop._proposers`), so such a setting
    runs as the cap makes it, but it is almost surely a mistake (a typo, a unit slip) that would otherwise pass
    unseen. A block size larger than one short call's budget but usable by longer calls is normal: no warning.
    Decoding is not changed."""
    positions = model_positions(model)
    if config.block_size <= max(positions or 0, capacity):
        return
    what = f"any request can use (the model addresses {positions} positions)" if positions else "this call can use"
    warnings.warn(
        f"{JACOBI_PREFIX}block_size={config.block_size} is larger than {what}; capped at {capacity}, the tokens this "
        "call may generate (max_new_tokens). Decoding is unchanged; set a block size within them.",
        UserWarning,
        stacklevel=3,
    )


def check_memory(
    model, config: JacobiConfig, batch: int, prompt_len: int, capacity: int, device: torch.device
) -> None:
    """Refuses, before the prefill allocates anything, a call whose widest forward would not fit in the free memory of
    `device`, naming the settings that widen it (the most costly first) and the batch size."""
    chain, candidates = widest_forward(config, prompt_len, capacity)
    width = chain + candidates
    context = prompt_len + capacity + width
    needed = forward_bytes(model, batch, width, context)
    free = free_memory(device)
    if free is None or sum(needed.values()) <= free:
        return
    levers = [f"jacobi_block_size ({config.block_size})"]
    if config.num_blocks > 1:
        levers.append(f"jacobi_num_blocks ({config.num_blocks})")
    if candidates:
        verify = f"jacobi_verify_size ({config.candidates_per_step})"
        levers.insert(0 if candidates > chain else len(levers), verify)
    levers.append(f"the batch size ({batch})")
    if needed["KV cache"] > needed["logits"]:
        levers.append(f"max_new_tokens ({capacity})")
    parts = ", ".join(f"{name} {size / GIB:.2f} GiB" for name, size in needed.items())
    raise ValueError(
        f"decoding='jacobi' would need about {sum(needed.values()) / GIB:.2f} GiB for its widest forward (batch "
        f"{batch} x {width} tokens over a context of {context}: {parts}), but only {free / GIB:.2f} GiB is free on "
        f"{device}. Lower {', '.join(levers[:-1])} or {levers[-1]}."
    )
