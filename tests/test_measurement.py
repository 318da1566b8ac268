"""The one measuring rule every command and benchmark uses: answers cut at the first EOS (batch padding dropped),
greedy's forwards one per token after the first, Jacobi's its own count, identity on the output tensors."""

from __future__ import annotations

import pytest
import torch

from hf_jacobi import JacobiConfig, enable_jacobi
from hf_jacobi.measurement import Decoded, decode, generated_tokens
from tiny_models import EOS, PAD, random_prompts, tiny_model


def test_generated_tokens_stop_at_the_first_eos_and_drop_trailing_padding() -> None:
    assert generated_tokens(torch.tensor([5, 2, 0, 0]), {2}, pad_id=0) == [5, 2]
    assert generated_tokens(torch.tensor([5, 6, 0, 0]), {2}, pad_id=0) == [5, 6]
    assert generated_tokens(torch.tensor([5, 6, 0, 0]), {2}) == [5, 6, 0, 0]  # without a pad id nothing is dropped
    assert generated_tokens(torch.tensor([2, 7]), {2}) == [2]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_greedy_and_jacobi_measured_alike_on_a_padded_batch(family: str) -> None:
    model = enable_jacobi(tiny_model(family, 0))
    ids, mask = random_prompts(3, 7, seed=4)
    inputs = {"input_ids": ids, "attention_mask": mask}
    model.generation_config.eos_token_id = EOS
    greedy = decode(model, inputs, 12, eos_ids={EOS}, pad_id=PAD)
    jacobi = decode(model, inputs, 12, JacobiConfig(block_size=4, ngram_pool_size=2), eos_ids={EOS}, pad_id=PAD)
    assert isinstance(greedy, Decoded) and greedy.seconds > 0 and jacobi.seconds > 0
    assert jacobi.same_as(greedy) == [True, True, True] and jacobi.answers == greedy.answers
    assert greedy.forwards == [max(n - 1, 0) for n in greedy.new_tokens] and greedy.forward_tokens == greedy.forwards
    assert jacobi.forwards == jacobi.output.forward_passes.tolist() and sum(jacobi.forwards) <= sum(greedy.forwards)
    assert all(f >= n for f, n in zip(jacobi.forward_tokens, jacobi.forwards, strict=True))
    shorter = decode(model, inputs, 5, eos_ids={EOS}, pad_id=PAD)
    assert shorter.same_as(greedy) == [False] * 3  # another shape is never identical
