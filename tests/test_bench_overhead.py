"""The overhead benchmark's measurement and summary, on a tiny model (figures are checked for sense, not speed)."""

from __future__ import annotations

from transformers import BatchEncoding

from hf_jacobi import enable_jacobi
from hf_jacobi.bench.common import humaneval_prompts
from hf_jacobi.bench.overhead import (
    VARIANTS,
    forward_cost_curve,
    markdown_table,
    measure_variant,
    run_greedy,
    summarize,
)
from tiny_models import random_prompts, tiny_model


def fake_tokenizer(text, return_tensors="pt"):
    ids, mask = random_prompts(1, 10, seed=len(text))
    return BatchEncoding({"input_ids": ids, "attention_mask": mask})


def test_measure_and_summarize_on_a_tiny_model():
    model = enable_jacobi(tiny_model("gemma", 0))  # its output repeats, so recycling has something to find
    greedy = [run_greedy(model, fake_tokenizer, f"t/{i}", "x" * (i + 1), max_new_tokens=24) for i in range(2)]
    results = [
        measure_variant(model, reference, variant, block_size=4, max_new_tokens=24, repeats=2)
        for variant in VARIANTS
        for reference in greedy
    ]
    for r in results:
        assert r.identical
        assert 1 <= r.forwards <= r.new_tokens - 1
        assert r.tokens_per_forward >= 1.0
        assert r.iteration_s > 0 and r.bare_forward_s > 0
        assert r.mean_width >= 4
    rows = summarize(results)
    assert [(row["variant"], row["block_size"]) for row in rows] == [(v, 4) for v in VARIANTS]
    plain, recycling = rows[0], rows[1]
    assert plain["vs_plain"] == 1.0 and plain["recycled_tokens"] == 0
    assert recycling["recycled_tokens"] > 0 and recycling["vs_plain"] > 1.0
    for row in rows:
        assert row["new_tokens"] == sum(r.new_tokens for r in results if r.variant == row["variant"])
        assert row["tokens_per_forward"] == row["new_tokens"] / row["forwards"]
        assert row["all_identical"] is True
    table = markdown_table(rows)
    assert table.count("\n") == 1 + len(VARIANTS) and "| plain | 4 |" in table and "| yes |" in table


def test_humaneval_prompts_come_from_the_package():
    prompts = humaneval_prompts(3)
    assert [task for task, _ in prompts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert all(prompt.lstrip().startswith(("from", "def", "import")) for _, prompt in prompts)


def test_forward_cost_curve_is_relative_to_one_token():
    model = tiny_model("llama", 0)
    context, _ = random_prompts(1, 12, seed=0)
    curve = forward_cost_curve(model, context, [1, 4, 20], repeats=2)
    assert [point["tokens"] for point in curve] == [1, 4, 20]
    assert curve[0]["vs_one_token"] == 1.0
    assert all(point["forward_ms"] > 0 for point in curve)
