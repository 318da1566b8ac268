"""Grouped-query attention in place (`cpu_gqa`): the same outputs as transformers' repeated heads, set only where it is
asked for and restored after."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from hf_jacobi.decoding.sdpa_gqa import FORCE_GQA, cpu_gqa
from tiny_models import fresh_tiny_model, random_prompts


@pytest.fixture
def no_user_setting(monkeypatch):
    monkeypatch.delenv(FORCE_GQA, raising=False)


def test_it_sets_the_flag_on_a_cpu_only_and_restores_it_even_after_an_error(no_user_setting):
    with cpu_gqa(torch.device("cpu")) as active:
        assert active and os.environ[FORCE_GQA] == "1"
    assert FORCE_GQA not in os.environ
    with pytest.raises(RuntimeError), cpu_gqa("cpu"):
        raise RuntimeError("a failed forward")
    assert FORCE_GQA not in os.environ
    for device in ("cuda", torch.device("meta")):
        with cpu_gqa(device) as active:
            assert not active and FORCE_GQA not in os.environ


def test_a_users_own_setting_is_left_as_it_is(monkeypatch):
    monkeypatch.setenv(FORCE_GQA, "0")
    with cpu_gqa("cpu") as active:
        assert not active and os.environ[FORCE_GQA] == "0"
    assert os.environ[FORCE_GQA] == "0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_masked_forward_of_several_queries_gives_the_repeated_heads_output_without_repeating_them(
    no_user_setting, monkeypatch, dtype
):
    """A padded prefill (several queries, a mask) on a model of 4 query heads over 2 key/value heads: bitwise the
    logits transformers computes by repeating the heads, and SDPA is handed the 2 shared heads with `enable_gqa`."""
    model = fresh_tiny_model("llama").to(dtype)
    ids, mask = random_prompts(3, 12, seed=5)
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):
        seen.append((key.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(query, key, value, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        repeated = model(input_ids=ids, attention_mask=mask).logits
        assert set(seen) == {(4, False)}  # transformers' own choice: the heads repeated
        seen.clear()
        with cpu_gqa(model.device):
            grouped = model(input_ids=ids, attention_mask=mask).logits
    assert set(seen) == {(2, True)}
    assert torch.equal(grouped, repeated)


def test_the_jacobi_loop_verifies_on_the_shared_heads_and_stays_greedy(no_user_setting, monkeypatch):
    from hf_jacobi import enable_jacobi

    model = enable_jacobi(fresh_tiny_model("llama"))
    ids, mask = random_prompts(2, 10, seed=3)
    with torch.no_grad():
        greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(query, key, value, *args, **kwargs):
        seen.append((query.shape[2] > 1, key.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(query, key, value, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, decoding="jacobi", jacobi_block_size=4
        )
    assert torch.equal(out, greedy)
    assert seen and all(heads == 2 and gqa for wide, heads, gqa in seen if wide)
    assert FORCE_GQA not in os.environ
