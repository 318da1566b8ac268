"""`ReservedCache`, the cache the parallel collection generates greedy answers into and iterates on: it must hold
exactly what a `DynamicCache` holds after any sequence of writes, crops and row selections, growing past its
reservation when a write overflows it."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from hf_jacobi import enable_jacobi
from hf_jacobi.data.answer_cache import ReservedCache, greedy_answers
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
