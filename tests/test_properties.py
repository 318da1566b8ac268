"""Property test: over random tiny models, prompts, batch sizes, left padding, block sizes (huge ones included), blocks
in flight, recycling pools, budgets, EOS placements, stop strings and caches (dynamic, static, static with a compiled
verify forward), Jacobi equals greedy.

`make test` runs a fresh random sample of a few dozen cases; `make fuzz` runs the same property over
HF_JACOBI_FUZZ_EXAMPLES cases (1000 by default).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import CompileConfig

from hf_jacobi import enable_jacobi
from tiny_models import FAMILIES, random_prompts, tiny_model, tiny_tokenizer

FAMILY_NAMES = sorted(FAMILIES)
EOS_PLACEMENTS = ("model's own", "first token", "middle", "last token", "two ids")
"""Where the EOS id is taken from in a row's free-running greedy output, so that rows finish mid-block at different
steps ("model's own" keeps the tiny models' EOS, which they rarely emit)."""
STOP_STRINGS = (None, "one token", "across tokens")
FIRST_WORD = 3
"""The tiny tokenizer's first word ("t3"); lower ids are pad, BOS and EOS."""
FUZZ_EXAMPLES = int(os.environ.get("HF_JACOBI_FUZZ_EXAMPLES", "1000"))


CACHES = ["dynamic"] * 5 + ["static"] * 4 + ["compiled"]
"""The caches `make fuzz` draws from: the compiled path compiles every new shape (dynamo with the eager backend, the
same graph inductor would get, built faster), so it is drawn less often; `make test` checks it on a few cases apart."""


@st.composite
def decoding_cases(draw, caches=tuple(CACHES)):
    return {
        "family": draw(st.sampled_from(FAMILY_NAMES)),
        "model_seed": draw(st.integers(0, 3)),
        "batch": draw(st.integers(1, 4)),
        "prompt_len": draw(st.integers(2, 12)),
        "pad_rows": draw(st.booleans()),
        "prompt_seed": draw(st.integers(0, 10_000)),
        # huge values must cost nothing: blocks are capped by the budget
        "block_size": draw(st.integers(1, 32) | st.sampled_from([100, 100_000])),
        "budget": draw(st.integers(0, 64)),
        "budget_as_max_length": draw(st.booleans()),
        "eos": draw(st.sampled_from(EOS_PLACEMENTS)),
        "eos_row": draw(st.integers(0, 3)),
        "stop_string": draw(st.sampled_from(STOP_STRINGS)),
        "repetition_penalty": draw(st.sampled_from([None, None, 1.3])),
        "num_blocks": draw(st.integers(1, 4) | st.just(1000)),
        "spawn_ratio": draw(st.sampled_from([0.25, 0.5, 0.85, 1.0])),
        "pool_size": draw(st.integers(0, 8)),
        "verify_size": draw(st.sampled_from([None, None, 1, 3])),
        "ngram_size": draw(st.sampled_from([None, 1, 2, 5])),
        "key_size": draw(st.integers(1, 3)),
        "cache": draw(st.sampled_from(caches)),
    }


@functools.cache
def stop_string_tokenizer():
    """The tiny tokenizer, plus the probe text StopStringCriteria reads every token's string with (its word-level
    vocabulary would turn the probe into an unknown token)."""
    tokenizer = tiny_tokenizer()
    tokenizer.add_tokens(["abcdef"])
    return tokenizer


def _jacobi_settings(case) -> dict:
    settings = {
        "jacobi_block_size": case["block_size"],
        "jacobi_num_blocks": case["num_blocks"],
        "jacobi_spawn_ratio": case["spawn_ratio"],
        "jacobi_ngram_pool_size": case["pool_size"],
        "jacobi_ngram_key_size": case["key_size"],
    }
    if case["pool_size"]:
        settings["jacobi_ngram_size"] = case["ngram_size"]
        settings["jacobi_verify_size"] = case["verify_size"]
    if case["cache"] != "dynamic":
        settings["cache_implementation"] = "static"
    if case["cache"] == "compiled":
        compile_config = CompileConfig(backend="eager", mode=None, fullgraph=True)
        compile_config._compile_all_devices = True
        settings["compile_config"] = compile_config
    return settings


def _stops(case, new: torch.Tensor) -> dict:
    """EOS ids and stop strings taken from one row's free-running output, so that they do fire."""
    kwargs: dict = {}
    tokens = new[case["eos_row"] % new.shape[0]].tolist()
    eos = case["eos"]
    if eos != "model's own":
        picks = {"first token": [0], "middle": [len(tokens) // 2], "last token": [-1], "two ids": [1, -2]}[eos]
        ids = [tokens[i % len(tokens)] for i in picks]
        kwargs["eos_token_id"] = ids if eos == "two ids" else ids[0]
    tokens = [t for t in tokens if t >= FIRST_WORD] or [FIRST_WORD]  # special ids have no text to stop on
    if case["stop_string"] is not None:
        middle = len(tokens) // 2
        if case["stop_string"] == "one token" or len(tokens) < 2:
            stop = f"t{tokens[middle]}"
        else:  # the last digit of one token, the space, the start of the next
            stop = f"{tokens[middle - 1]}"[-1] + f" t{tokens[middle]}"[:3]
        kwargs.update(stop_strings=[stop], tokenizer=stop_string_tokenizer())
    return kwargs


def _check(case) -> None:
    model = enable_jacobi(tiny_model(case["family"], case["model_seed"]))
    prompt_len = case["prompt_len"]
    ids, mask = random_prompts(case["batch"], prompt_len, case["prompt_seed"], pad_rows=case["pad_rows"])
    if case["budget_as_max_length"]:
        budget = {"max_length": prompt_len + case["budget"]}
    else:
        budget = {"max_new_tokens": case["budget"]}
    kwargs = {"attention_mask": mask, "do_sample": False, **budget}
    if case["repetition_penalty"]:
        kwargs["repetition_penalty"] = case["repetition_penalty"]
    if case["budget"] == 0:
        # generate() rejects a zero budget; Jacobi must reject it the same way rather than return something.
        with pytest.raises(ValueError, match=next(iter(budget))):
            model.generate(ids, **kwargs)
        with pytest.raises(ValueError, match=next(iter(budget))):
            model.generate(ids, decoding="jacobi", **_jacobi_settings(case), **kwargs)
        return
    if case["eos"] != "model's own" or case["stop_string"] is not None:
        free = model.generate(ids, **kwargs)
        kwargs.update(_stops(case, free[:, prompt_len:]))
    greedy = model.generate(ids, **kwargs)
    try:
        jacobi = model.generate(ids, decoding="jacobi", **_jacobi_settings(case), **kwargs)
    finally:
        if case["cache"] == "compiled":  # every example has new shapes: start each from a clean compile cache
            torch._dynamo.reset()
    assert torch.equal(greedy, jacobi), case


@pytest.mark.fuzz
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
@given(case=decoding_cases())
def test_jacobi_equals_greedy_property(case):
    """`make fuzz`: a fresh random sample each run (a failure prints how to reproduce it)."""
    _check(case)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=decoding_cases(caches=("dynamic", "static")))
def test_jacobi_equals_greedy_property_quick(case):
    """A smaller random sample on every run (not derandomized), to keep looking for new counterexamples."""
    _check(case)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=decoding_cases(caches=("compiled",)))
def test_compiled_jacobi_equals_greedy_property_quick(case):
    """The compiled static path on a few random cases of every run (each compiles its own shapes)."""
    _check(case)
