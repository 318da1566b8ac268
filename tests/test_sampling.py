"""Jacobi sampling draws from exactly the distribution of ancestral sampling.

The reference distribution is computed exactly: a tiny model with a 6-token vocabulary is run on every prefix of the
first generated tokens, which gives the probability of each of the 6**4 possible 4-token continuations. Thousands of
seeded Jacobi samples are then compared with it by a chi-square goodness-of-fit test, for plain Jacobi, recycling
(several proposals per level, so the recursive rejection is exercised) and multi-block chains. A deliberately wrong
acceptance rule (resampling from the full distribution after a rejection) must fail the same test.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hf_jacobi import enable_jacobi
from hf_jacobi.decoding import acceptance
from hf_jacobi.decoding.step_layout import Branch
from tiny_models import PAD, TINY_CONFIG, random_prompts, tiny_model

VOCAB = 6
NEW_TOKENS = 4
SAMPLES = 4000
TEMPERATURE = 1.5
# Repeated bigrams give recycling pool hits from the prompt itself.
PROMPT = [3, 4, 5, 3, 4, 1, 3, 4]


def small_vocab_model() -> LlamaForCausalLM:
    settings = {
        **TINY_CONFIG,
        "vocab_size": VOCAB,
        "initializer_range": 0.3,
        "bos_token_id": None,
        "eos_token_id": None,
    }
    config = LlamaConfig(**settings)
    config._attn_implementation = "sdpa"
    torch.manual_seed(7)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD
    return enable_jacobi(model)


@torch.no_grad()
def exact_distribution(model) -> dict[tuple[int, ...], float]:
    """P(first NEW_TOKENS tokens) under ancestral sampling at TEMPERATURE, by enumerating every prefix."""
    probs: dict[tuple[int, ...], float] = {(): 1.0}
    for depth in range(NEW_TOKENS):
        prefixes = list(itertools.product(range(VOCAB), repeat=depth))
        ids = torch.tensor([PROMPT + list(p) for p in prefixes])
        logits = model(input_ids=ids).logits[:, -1].double() / TEMPERATURE
        step = torch.softmax(logits, dim=-1)
        probs = {(*p, t): probs[p] * float(step[i, t]) for i, p in enumerate(prefixes) for t in range(VOCAB)}
    return probs


def chi_square_p_value(samples: torch.Tensor, expected: dict[tuple[int, ...], float]) -> float:
    """Goodness of fit of sampled continuations [N, NEW_TOKENS]; cells expected below 5 are pooled into one."""
    total = samples.shape[0]
    counts: dict[tuple[int, ...], int] = {}
    for row in samples.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    observed, predicted = [], []
    pooled_observed, pooled_predicted = 0, 0.0
    for cell, p in expected.items():
        if p * total >= 5:
            observed.append(counts.get(cell, 0))
            predicted.append(p * total)
        else:
            pooled_observed += counts.get(cell, 0)
            pooled_predicted += p * total
    if pooled_predicted > 0:
        observed.append(pooled_observed)
        predicted.append(pooled_predicted)
    observed_t = torch.tensor(observed, dtype=torch.float64)
    predicted_t = torch.tensor(predicted, dtype=torch.float64)
    statistic = float(((observed_t - predicted_t) ** 2 / predicted_t).sum())
    dof = len(observed) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2)))


def draw_samples(model, seed: int, **kwargs) -> torch.Tensor:
    """SAMPLES continuations of PROMPT under seed `seed`: ancestral unless kwargs ask for decoding="jacobi"."""
    torch.manual_seed(seed)
    ids = torch.tensor([PROMPT]).repeat(SAMPLES, 1)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=TEMPERATURE,
        top_k=0,
        max_new_tokens=NEW_TOKENS,
        **kwargs,
    )
    return out[:, len(PROMPT) :]


def jacobi_samples(model, seed: int, **jacobi) -> torch.Tensor:
    return draw_samples(model, seed, decoding="jacobi", **jacobi)


SETTINGS = {
    "plain": {"jacobi_block_size": 4},
    "recycling": {"jacobi_block_size": 3, "jacobi_ngram_pool_size": 4, "jacobi_ngram_size": 3},
    "multi_block": {"jacobi_block_size": 2, "jacobi_num_blocks": 3, "jacobi_spawn_ratio": 0.5},
    # the static cache: fixed-width forwards, finished rows kept as padding
    "static_recycling": {
        "jacobi_block_size": 3,
        "jacobi_ngram_pool_size": 4,
        "jacobi_ngram_size": 3,
        "cache_implementation": "static",
    },
}


@pytest.fixture(scope="module")
def model_and_truth():
    model = small_vocab_model()
    return model, exact_distribution(model)


def test_the_reference_is_not_degenerate(model_and_truth):
    """The test is only sensitive if draft tokens have middling probabilities: no token may be near-certain."""
    _, truth = model_and_truth
    assert max(truth.values()) < 0.2


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_jacobi_sampling_matches_ancestral_distribution(model_and_truth, name):
    model, truth = model_and_truth
    samples = jacobi_samples(model, seed=1, **SETTINGS[name])
    assert samples.shape == (SAMPLES, NEW_TOKENS)
    assert chi_square_p_value(samples, truth) > 0.01


def test_ancestral_sampling_passes_the_same_test(model_and_truth):
    """The exact reference and the test statistic agree with stock generate()'s own sampler."""
    model, truth = model_and_truth
    assert chi_square_p_value(draw_samples(model, seed=2), truth) > 0.01


def resample_without_removing(branches: list[Branch], scores: torch.Tensor) -> acceptance.Verdict:
    """A wrong rule: after rejecting a draft, sample from the full distribution (the draft keeps its mass)."""
    chain = branches[0]
    tokens: list[int] = []
    for level in range(len(chain)):
        probs = torch.softmax(scores[chain.columns[level]].double(), dim=-1)
        if level + 1 < len(chain) and float(torch.rand((), dtype=torch.float64)) < float(
            probs[chain.tokens[level + 1]]
        ):
            tokens.append(chain.tokens[level + 1])
            continue
        tokens.append(int(torch.multinomial(probs, 1)))
        break
    return acceptance.Verdict(tokens, chain.columns[: len(tokens)], 0)


def test_a_wrong_acceptance_rule_fails(model_and_truth, monkeypatch):
    model, truth = model_and_truth
    monkeypatch.setattr(acceptance, "sampled_verdict", resample_without_removing)
    samples = jacobi_samples(model, seed=1, **SETTINGS["plain"])
    assert chi_square_p_value(samples, truth) < 0.01


def test_seeded_sampling_is_reproducible(model_and_truth):
    model, _ = model_and_truth
    first = jacobi_samples(model, seed=5, **SETTINGS["recycling"])
    again = jacobi_samples(model, seed=5, **SETTINGS["recycling"])
    assert torch.equal(first, again)


def test_recursive_rejection_over_several_proposals_keeps_the_distribution():
    """One level, three branches proposing tokens 0, 1 and 0 again: the committed token is still distributed as p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    scores = p.log().float()[None, :].repeat(4, 1)
    branches = [Branch([0, 1], [9, 0]), Branch([0, 2], [9, 1]), Branch([0, 3], [9, 0])]
    torch.manual_seed(0)
    draws = 20000
    counts = torch.zeros(4)
    for _ in range(draws):
        counts[acceptance.sampled_verdict(branches, scores).tokens[0]] += 1
    expected = p * draws
    statistic = float(((counts.double() - expected) ** 2 / expected).sum())
    assert float(torch.special.gammaincc(torch.tensor(1.5, dtype=torch.float64), torch.tensor(statistic / 2))) > 0.01


def test_sampling_in_a_padded_batch_stops_rows_at_eos_and_pads_after():
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(4, 9, seed=3)
    eos = 17
    torch.manual_seed(0)
    out = model.generate(
        ids,
        attention_mask=mask,
        do_sample=True,
        top_k=3,
        max_new_tokens=30,
        eos_token_id=eos,
        pad_token_id=PAD,
        decoding="jacobi",
        jacobi_block_size=4,
        jacobi_ngram_pool_size=3,
        return_dict_in_generate=True,
    )
    new = out.sequences[:, ids.shape[1] :]
    for row, forwards in zip(new.tolist(), out.forward_passes.tolist(), strict=True):
        if eos in row:
            assert all(token == PAD for token in row[row.index(eos) + 1 :])
        # Only a row whose first token (sampled from the prefill) ends it needs no decoding forward.
        assert (forwards == 0) == (row[0] == eos)
