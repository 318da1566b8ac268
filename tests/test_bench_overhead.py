"""The overhead benchmark's measurement and summary, on a tiny model (figures are checked for sense, not speed)."""

from __future__ import annotations

from transformers import BatchEncoding

from hf_jacobi import enable_jacobi
from hf_jacobi.bench.common import humaneval_prompts
from hf_jacobi.bench.overhead import markdown_table, measure_prompt, summarize
from tiny_models import random_prompts, tiny_model


def fake_tokenizer(text, return_tensors="pt"):
    ids, mask = random_prompts(1, 10, seed=len(text))
    return BatchEncoding({"input_ids": ids, "attention_mask": mask})


def test_measure_and_summarize_on_a_tiny_model():
    model = enable_jacobi(tiny_model("llama", 0))
    results = [
        measure_prompt(model, fake_tokenizer, f"t/{i}", "x" * (i + 1), block_size=4, max_new_tokens=16, repeats=2)
        for i in range(2)
    ]
    for r in results:
        assert r.identical
        assert 1 <= r.forwards <= r.new_tokens - 1
        assert r.tokens_per_forward >= 1.0
        assert r.iteration_s > 0 and r.bare_forward_s > 0
    (row,) = summarize(results)
    assert row["block_size"] == 4 and row["prompts"] == 2
    assert row["new_tokens"] == sum(r.new_tokens for r in results)
    assert row["tokens_per_forward"] == row["new_tokens"] / row["forwards"]
    assert row["all_identical"] is True
    table = markdown_table([row])
    assert table.count("\n") == 2 and "| 4 | 2 |" in table and "| yes |" in table


def test_humaneval_prompts_come_from_the_package():
    prompts = humaneval_prompts(3)
    assert [task for task, _ in prompts] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert all(prompt.lstrip().startswith(("from", "def", "import")) for _, prompt in prompts)
