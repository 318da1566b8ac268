"""Jacobi decoding served by vLLM: `JacobiProposer`, a speculative proposer for vLLM's `custom_class` method.

    from vllm import LLM
    from hf_jacobi.integrations.vllm import speculative_config

    llm = LLM(model=folder, speculative_config=speculative_config(model=folder), enforce_eager=True)

Each step vLLM verifies the drafts of every request in one forward and keeps the longest prefix its own sampler
agrees with, so the output is vLLM's greedy output whatever the drafts are. The proposer's drafts are the Jacobi
iterate: the target's greedy token at every verified position past the accepted prefix, then fresh tokens drawn from
the prompt, as `generate(decoding="jacobi")` does. Several blocks in flight are one longer chain
(`num_speculative_tokens = num_blocks * block_size - 1`). vLLM verifies one chain per request, so rejection
recycling cannot add branches; instead, by default, the chain's tail is replaced by what followed the request's last
tokens earlier in its own text where that is longer, or expected to have more drafts accepted with the adaptive
length on (prompt lookup), and the positions the iterate does not reach take recycled n-grams
(`vllm_drafts.JacobiDrafter`'s modes, `jacobi_vllm_drafts`). Each row's chain is then cut where its drafts stop
paying for their verification (`vllm_adaptive.ChainBudget`, from each draft source's acceptance so far and
`jacobi_vllm_verify_cost`; 0 proposes every chain whole).

Both options travel in the served folder's generation_config.json beside the other `jacobi_*` settings, as
`write_merged_model(..., vllm_drafts=, vllm_verify_cost=)` writes them; the environment variables
HF_JACOBI_VLLM_DRAFTS and HF_JACOBI_VLLM_VERIFY_COST override them (vLLM's worker processes inherit the environment).

Only `vllm_hook` touches vLLM's internals; this module imports vLLM lazily, so `hf_jacobi` never needs it.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from ..decoding.config import JACOBI_PREFIX, JacobiConfig
from .vllm_adaptive import ChainBudget
from .vllm_drafts import DRAFT_MODES, JacobiDrafter, RowStep, split_iterates
from .vllm_hook import (
    SUPPORTED_RANGE,
    UnsupportedVLLMError,
    check_vllm_version,
    install_argmax_hook,
    take_capture,
)

__all__ = ["SUPPORTED_RANGE", "JacobiProposer", "UnsupportedVLLMError", "check_vllm_version", "speculative_config"]

logger = logging.getLogger(__name__)

PROPOSER_PATH = f"{__name__}.JacobiProposer"
VLLM_PREFIX = f"{JACOBI_PREFIX}vllm_"
"""generation_config.json keys of the vLLM proposer's own options (not settings of `generate`)."""
DRAFT_MODE_KEY = f"{VLLM_PREFIX}drafts"
"""generation_config.json key of `JacobiDrafter`'s mode ("lookup", "fill" or "plain")."""
DRAFT_MODE_VARIABLE = "HF_JACOBI_VLLM_DRAFTS"
"""Environment variable overriding `jacobi_vllm_drafts` in vLLM's worker processes, which inherit the environment."""
DEFAULT_DRAFT_MODE = "lookup"
VERIFY_COST_KEY = f"{VLLM_PREFIX}verify_cost"
"""generation_config.json key of `ChainBudget.verify_cost` (c): the time one more verified token adds to a forward,
over the forward's fixed time; 0 turns the adaptive chain length off."""
VERIFY_COST_VARIABLE = "HF_JACOBI_VLLM_VERIFY_COST"
"""Environment variable overriding `jacobi_vllm_verify_cost`."""
DEFAULT_VERIFY_COST = 0.05
"""c when neither the folder nor the environment sets one: the value measured for the embedded model on a CPU
(docs/serving.md); a GPU, where a wider forward costs little more, wants a smaller one."""


def chain_shape(num_speculative_tokens: int, settings: JacobiConfig | None) -> tuple[int, int]:
    """(block_size, num_blocks) for vLLM's `num_speculative_tokens` (k): the chain is k + 1 tokens long.

    A checkpoint's own `jacobi_block_size` is kept and k chooses how many blocks fit, so k + 1 must be a multiple
    of it; without settings the chain is one block of k + 1 tokens.
    """
    k = num_speculative_tokens
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"num_speculative_tokens must be an integer >= 1, got {k!r}")
    if settings is None:
        return k + 1, 1
    block = settings.block_size
    if (k + 1) % block:
        choices = ", ".join(str(blocks * block - 1) for blocks in (1, 2, 3))
        raise ValueError(
            f"num_speculative_tokens={k} does not fit the checkpoint's Jacobi block size ({block}): the Jacobi chain "
            f"is num_blocks * block_size - 1 speculative tokens, so use one of {choices}, ... (its own setting, "
            f"{settings.num_blocks} block(s), is {settings.num_blocks * block - 1})"
        )
    return block, (k + 1) // block


def default_chain_length(settings: JacobiConfig) -> int:
    """The `num_speculative_tokens` a checkpoint's settings mean in vLLM: its Jacobi chain, lengthened by whole blocks
    until it also holds one recycled candidate.

    generate() verifies a candidate as a branch beside the chain; vLLM verifies one chain per request, so the
    candidate has to fit in the chain, or a setting built on long candidates (a short chain and 14-token n-grams,
    which `hf-jacobi tune` can choose) would be served with its short chain alone. The adaptive length still cuts each
    chain where its drafts stop paying. Settings whose chain already holds their candidate (the pool's default
    n-gram is block size - 1 tokens) keep `num_blocks * block_size - 1`.
    """
    blocks = settings.num_blocks
    if settings.ngram_pool_size:
        blocks = max(blocks, math.ceil((settings.candidate_length + 1) / settings.block_size))
    return blocks * settings.block_size - 1


def checkpoint_settings(generation_config: dict[str, Any] | None) -> JacobiConfig | None:
    """The Jacobi settings a checkpoint's generation config carries (validated), or None when it has none."""
    found = {
        key[len(JACOBI_PREFIX) :]: value
        for key, value in (generation_config or {}).items()
        if key.startswith(JACOBI_PREFIX) and not key.startswith(VLLM_PREFIX) and value is not None
    }
    return JacobiConfig.from_layers([found]) if found else None


def speculative_config(num_speculative_tokens: int | None = None, model: str | os.PathLike[str] | None = None) -> dict:
    """The `speculative_config` that serves a model with `JacobiProposer`, checked before any engine starts.

    Args:
        num_speculative_tokens: drafts verified per step (k); by default the checkpoint's own chain,
            `jacobi_num_blocks * jacobi_block_size - 1` read from `model`'s generation_config.json, in whole blocks
            long enough to hold one recycled candidate (`default_chain_length`).
        model: the local model folder vLLM will serve.
    """
    check_vllm_version()
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0").strip() not in ("", "0"):
        raise UnsupportedVLLMError(
            "VLLM_USE_V2_MODEL_RUNNER is set: vLLM's V2 model runner does not build custom_class proposers; unset it"
        )
    generation_config = None
    if model is not None and (Path(model) / "generation_config.json").is_file():
        generation_config = json.loads((Path(model) / "generation_config.json").read_text())
    settings = checkpoint_settings(generation_config)
    if num_speculative_tokens is None:
        if settings is None:
            raise ValueError(f"{model!r} carries no jacobi_* settings: pass num_speculative_tokens")
        num_speculative_tokens = default_chain_length(settings)
    chain_shape(num_speculative_tokens, settings)
    draft_mode(generation_config)
    verify_cost(generation_config)
    return {"method": "custom_class", "model": PROPOSER_PATH, "num_speculative_tokens": num_speculative_tokens}


def _option(generation_config: dict[str, Any] | None, key: str, variable: str, default: Any) -> tuple[Any, str]:
    """An option's value and where it came from, for errors: the environment variable, else the folder's
    generation_config.json, else the default."""
    if variable in os.environ:
        return os.environ[variable], variable
    value = (generation_config or {}).get(key)
    return (default, "the default") if value is None else (value, f"generation_config.json {key}")


def draft_mode(generation_config: dict[str, Any] | None = None) -> str:
    """The draft mode (`jacobi_vllm_drafts` in `generation_config`, HF_JACOBI_VLLM_DRAFTS overriding it, "lookup" by
    default), refused by name when it is not one."""
    mode, source = _option(generation_config, DRAFT_MODE_KEY, DRAFT_MODE_VARIABLE, DEFAULT_DRAFT_MODE)
    if mode not in DRAFT_MODES:
        raise ValueError(f"{source}={mode!r} is not a draft mode; accepted: {list(DRAFT_MODES)}")
    return mode


def verify_cost(generation_config: dict[str, Any] | None = None) -> float:
    """The verify cost c (`jacobi_vllm_verify_cost` in `generation_config`, HF_JACOBI_VLLM_VERIFY_COST overriding it,
    `DEFAULT_VERIFY_COST` by default), refused by name unless a finite number >= 0: read before the engine starts, so
    that a typo fails in the caller's process rather than in a worker's log, or silently as no adaptive length."""
    value, source = _option(generation_config, VERIFY_COST_KEY, VERIFY_COST_VARIABLE, DEFAULT_VERIFY_COST)
    try:
        cost = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        cost = math.nan
    if not (math.isfinite(cost) and cost >= 0):
        raise ValueError(
            f"{source}={value!r} is not a finite number >= 0; accepted: the verify cost c "
            f"(default {DEFAULT_VERIFY_COST}), or 0 to propose every chain whole"
        )
    return cost


class JacobiProposer:
    """Jacobi decoding as a vLLM 0.32 `custom_class` proposer; vLLM builds it as `JacobiProposer(vllm_config)` in
    the worker process that runs the model, which is where the argmax hook must be installed."""

    def __init__(self, vllm_config: Any) -> None:
        check_vllm_version()
        spec = vllm_config.speculative_config
        if getattr(vllm_config.scheduler_config, "async_scheduling", False):
            raise UnsupportedVLLMError(
                "JacobiProposer needs async_scheduling off (vLLM turns it off for custom_class)"
            )
        generation_config = vllm_config.model_config.try_get_generation_config()
        settings = checkpoint_settings(generation_config)
        block_size, num_blocks = chain_shape(spec.num_speculative_tokens, settings)
        defaults = settings or JacobiConfig()
        self.drafter = JacobiDrafter(
            block_size=block_size,
            num_blocks=num_blocks,
            spawn_ratio=defaults.spawn_ratio,
            draft_seed=defaults.draft_seed,
            mode=draft_mode(generation_config),
            pool_size=defaults.ngram_pool_size,
            ngram_size=defaults.ngram_size,
            ngram_key_size=defaults.ngram_key_size,
            budget=ChainBudget(verify_cost=verify_cost(generation_config)),
        )
        install_argmax_hook()
        logger.info(
            "Jacobi proposer: block %d, up to %d block(s), drafts %r, verify cost %g",
            block_size,
            num_blocks,
            self.drafter.mode,
            self.drafter.budget.verify_cost,
        )

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load: the drafts come from the target's own predictions (vLLM's CPU runner calls this)."""

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: Any,
        token_ids_cpu: Any,
        slot_mappings: Any = None,
        **kwargs: Any,
    ) -> list[list[int]]:
        """One draft list per row of vLLM's batch, from this step's commits and the verify's captured argmax."""
        capture = take_capture()
        iterates: list[list[int] | None] = [None] * len(sampled_token_ids)
        if capture is not None and len(capture.num_draft_tokens) == len(sampled_token_ids):
            iterates = split_iterates(capture.argmax, capture.bonus, capture.num_draft_tokens)
        rows = [
            RowStep(history=token_ids_cpu[i, : int(num_tokens_no_spec[i])], sampled=list(sampled), iterate=iterate)
            for i, (sampled, iterate) in enumerate(zip(sampled_token_ids, iterates, strict=True))
        ]
        return self.drafter.propose(rows)
