"""`greedy_choice`, the index every greedy column and every parallel-collection query takes: the same as `argmax`.

It replaces `argmax(dim=-1)` because torch's CPU argmax over bfloat16 is a slow scalar loop; losslessness needs the
same index everywhere, ties (frequent in bfloat16 logits) and non-finite scores included.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_jacobi.decoding.verify import greedy_choice


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 300)),
    levels=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    special=st.sampled_from([None, float("nan"), float("inf"), float("-inf")]),
)
def test_greedy_choice_is_argmax_ties_and_non_finite_included(dtype, shape, levels, seed, special):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, shape, generator=generator).to(dtype)  # few levels: many tied maxima
    if special is not None:
        where = torch.rand(shape, generator=generator) < 0.05
        scores = scores.masked_fill(where, special)
    assert torch.equal(greedy_choice(scores), scores.argmax(dim=-1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_greedy_choice_on_a_vocabulary_of_logits(dtype):
    logits = torch.randn(2, 7, 49_152, generator=torch.Generator().manual_seed(0)).to(dtype)
    chosen = greedy_choice(logits)
    assert chosen.dtype == torch.long and chosen.shape == (2, 7)
    assert torch.equal(chosen, logits.argmax(dim=-1))
