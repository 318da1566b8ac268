"""The answer cache of the parallel collection: `ReservedCache` must hold exactly what a `DynamicCache` holds after any
sequence of writes, crops and row selections, growing past its reservation when a write overflows it; prompts
prefilled in runs of like length (`length_runs`) must give stock greedy generation's answers and cache."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from hf_jacobi import enable_jacobi
from hf_jacobi.data.answer_cache import ReservedCache, greedy_answers, length_runs
from hf_jacobi.decoding.cache import CACHE_ARGUMENT
from tiny_models import EOS, PAD, random_prompts, tiny_model

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.integers(1, 6)),
        st.tuples(st.just("crop"), st.integers(1, 3)),
        st.tuples(st.just("select"), st.integers(0, 2**16)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 12), operations=OPERATIONS, seed=st.integers(0, 2**16))
def test_a_reserved_cache_holds_what_a_dynamic_cache_holds(capacity, operations, seed):
    generator = torch.Generator().manual_seed(seed)
    reserved, dynamic, rows = ReservedCache(capacity), DynamicCache(), 4
    for kind, amount in operations:
        length = dynamic.get_seq_length()
        if kind == "update":
            for layer in range(2):
                keys = torch.randn(rows, 2, amount, 3, generator=generator)
                values = torch.randn(rows, 2, amount, 3, generator=generator)
                got = reserved.update(keys, values, layer)
                want = dynamic.update(keys, values, layer)
                assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        elif kind == "crop" and length > amount:
            reserved.crop(-amount)
            dynamic.crop(-amount)
        elif kind == "select" and length and rows > 1:
            keep = torch.tensor(sorted({amount % rows, (amount // rows) % rows}))
            reserved.batch_select_indices(keep)
            dynamic.batch_select_indices(keep)
            rows = len(keep)
        assert reserved.get_seq_length() == dynamic.get_seq_length()
        for mine, theirs in zip(reserved.layers, dynamic.layers, strict=True):
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)


def test_greedy_generation_into_a_reserved_cache_is_greedy_generation():
    model = enable_jacobi(tiny_model("llama"))
    ids, mask = random_prompts(3, 7, seed=4)
    prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
    answers, filled = greedy_answers(model, prompts, 9, PAD, {EOS})
    reference = DynamicCache()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=9, do_sample=False, **{CACHE_ARGUMENT: reference})
    assert isinstance(filled.cache, ReservedCache)
    for row, answer in enumerate(answers):
        assert answer == out[row, ids.shape[1] :].tolist()[: len(answer)]
    for mine, theirs in zip(filled.cache.layers, reference.layers, strict=True):
        assert mine.keys.shape == theirs.keys.shape
        torch.testing.assert_close(mine.keys, theirs.keys)


def test_length_runs_keep_padding_within_its_bound():
    lengths = [40, 0, 400, 38, 41, 390, 100, 1]
    runs = length_runs(lengths, max_padding=0.25)
    assert sorted(r for run in runs for r in run) == [0, 2, 3, 4, 5, 6, 7]  # the empty row is in none
    assert runs == [[7], [3, 0, 4], [6], [5, 2]]
    for run in runs:
        assert max(lengths[r] for r in run) * len(run) <= 1.25 * sum(lengths[r] for r in run)


def test_prompts_of_unlike_lengths_prefilled_in_runs_give_greedy_answers_and_cache():
    model = enable_jacobi(tiny_model("qwen2"))
    generator = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 60, (n,), generator=generator).tolist() for n in (1, 2, 30, 3, 28, 2, 31)]
    answers, filled = greedy_answers(model, prompts, 6, PAD, {EOS})
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), PAD)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :], mask[row, width - len(prompt) :] = torch.tensor(prompt), 1
    reference = DynamicCache()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, **{CACHE_ARGUMENT: reference})
    for row, answer in enumerate(answers):
        assert answer == out[row, width:].tolist()[: len(answer)]
    real = torch.cat([mask, torch.ones(len(prompts), 5, dtype=torch.long)], dim=1).bool()[:, None, :, None]
    for mine, theirs in zip(filled.cache.layers, reference.layers, strict=True):
        assert mine.keys.shape == theirs.keys.shape
        torch.testing.assert_close(torch.where(real, mine.keys, 0), torch.where(real, theirs.keys, 0))
        assert not mine.keys.masked_select(~real).any()  # padding holds zeros
