"""What a Jacobi call may cost: drafts are capped by the token budget, and a forward that would not fit in memory is
refused before anything is allocated, naming the settings to lower."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from hf_jacobi import JacobiConfig, TrajectoryRecorder, enable_jacobi
from hf_jacobi.decoding import checks, static_cache
from tiny_models import random_prompts, tiny_model


@pytest.fixture
def forward_widths():
    """Records the width of every forward of the tiny Llama (prefill included), and refuses any wider than 2,000
    columns before computing it, so that a missing cap (100,000 columns) fails the test instead of exhausting memory.
    The static path pads every forward to the widest the setting allows: 1,156 columns for the huge pool."""
    model = enable_jacobi(tiny_model("llama"))
    widths: list[int] = []

    def record(module, args, kwargs):
        width = kwargs["input_ids"].shape[1]
        widths.append(width)
        if width > 2000:
            raise AssertionError(f"a forward of {width} columns")

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    yield model, widths
    handle.remove()


@pytest.mark.parametrize(
    "settings",
    [
        {"jacobi_block_size": 100_000},
        {"jacobi_block_size": 4, "jacobi_num_blocks": 100_000, "jacobi_spawn_ratio": 0.25},
        {"jacobi_block_size": 100_000, "jacobi_ngram_pool_size": 100_000, "jacobi_ngram_size": 100_000},
    ],
    ids=["block", "blocks", "pool"],
)
@pytest.mark.parametrize("budget", [{"max_new_tokens": 8}, {"max_length": 18}])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_huge_settings_cost_nothing_beyond_the_budget(forward_widths, settings, budget, cache):
    model, widths = forward_widths
    ids, mask = random_prompts(3, 10, seed=1)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, **budget)
    widths.clear()
    jacobi = model.generate(
        ids, attention_mask=mask, do_sample=False, decoding="jacobi", cache_implementation=cache, **settings, **budget
    )
    assert torch.equal(jacobi, greedy)
    config = JacobiConfig.from_generation_config(**{k.removeprefix("jacobi_"): v for k, v in settings.items()})
    # no forward is wider than the bound the memory check assumes, itself bounded by the budget of 8 tokens; the
    # static path pads every forward to one of its widths, the widest of which is that bound
    bound = sum(checks.widest_forward(config, prompt_len=10, capacity=8))
    assert max(widths[1:]) <= bound
    if cache == "static":
        assert set(widths[1:]) <= set(checks.forward_widths(config, 10, 8, static_cache.CPU_WIDTHS))
        assert checks.forward_widths(config, 10, 8, static_cache.CPU_WIDTHS)[-1] == bound
    if "jacobi_ngram_pool_size" not in settings:
        assert bound == 8


def test_cutting_drafts_to_the_budget_never_changes_what_a_step_commits():
    """Without recycling, a row's steps start where they would with an ample budget (so its forwards are the same),
    and each chain is the ample run's chain cut to what the row has left."""
    model = enable_jacobi(tiny_model("qwen2", seed=1))
    ids, mask = random_prompts(3, 9, seed=4)

    def steps(max_new_tokens: int, num_blocks: int) -> dict[int, list[tuple[int, list[int]]]]:
        recorder = TrajectoryRecorder()
        model.generate(
            ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens, decoding="jacobi",
            jacobi_block_size=6, jacobi_num_blocks=num_blocks, jacobi_spawn_ratio=0.25, trajectory_recorder=recorder,
        )  # fmt: skip
        return recorder.steps

    for num_blocks in (1, 3):
        short, ample = steps(20, num_blocks), steps(60, num_blocks)
        cut = 0
        for row, row_steps in short.items():
            for (start, chain), (ample_start, ample_chain) in zip(row_steps, ample[row], strict=False):
                assert start == ample_start
                assert chain == ample_chain[: len(chain)]
                assert len(chain) == min(len(ample_chain), 20 - start)  # root + one draft per token left
                cut += len(chain) < len(ample_chain)
        assert cut >= 3  # the budget did bind


def test_a_forward_that_would_not_fit_is_refused_before_the_prefill(forward_widths, monkeypatch):
    model, widths = forward_widths
    ids, mask = random_prompts(2, 10, seed=1)
    monkeypatch.setattr(checks, "free_memory", lambda device: 1024)
    widths.clear()
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 32, "decoding": "jacobi"}
    with pytest.raises(ValueError, match="decoding='jacobi' would need about") as error:
        model.generate(ids, jacobi_block_size=16, jacobi_num_blocks=2, **kwargs)
    assert widths == []  # not even the prompt's forward ran
    message = str(error.value)
    assert "batch 2 x 32 tokens" in message and "0.00 GiB is free on cpu" in message
    assert message.endswith("Lower jacobi_block_size (16), jacobi_num_blocks (2) or the batch size (2).")
    # candidates wider than the chain come first among the settings to lower
    with pytest.raises(ValueError, match=r"Lower jacobi_verify_size \(8\), jacobi_block_size \(4\) or the batch"):
        model.generate(ids, jacobi_block_size=4, jacobi_ngram_pool_size=8, jacobi_ngram_size=16, **kwargs)


def test_the_check_is_skipped_where_free_memory_cannot_be_told(monkeypatch):
    assert checks.free_memory(torch.device("meta")) is None
    assert checks.free_memory(torch.device("cpu")) > 0
    model = enable_jacobi(tiny_model("llama"))
    ids, mask = random_prompts(1, 6, seed=2)
    monkeypatch.setattr(checks, "free_memory", lambda device: None)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", do_sample=False)
    assert out.shape == (1, 10)


def test_the_estimate_counts_logits_masks_and_kv_of_the_widest_forward():
    model = tiny_model("qwen3")  # a full-attention layer and a sliding one: two float32 masks, and a distance
    needed = checks.forward_bytes(model, batch=2, width=5, context=30)
    assert needed["logits"] == 2 * 5 * 128 * (4 + 8)
    assert needed["attention masks"] == 2 * 5 * 30 * (2 * 4 + 1 + 8)
    assert needed["KV cache"] == 2 * 2 * 2 * 2 * 8 * 30 * 4  # keys and values, 2 layers, batch 2, 2 heads of 8
    config = JacobiConfig(block_size=16, num_blocks=4, ngram_pool_size=3)
    assert checks.widest_forward(config, prompt_len=10, capacity=100) == (64, 3 * 15)
    assert checks.widest_forward(config, prompt_len=10, capacity=9) == (9, 3 * 8)


def test_the_static_widths_spread_candidate_counts_and_end_at_the_widest_forward():
    config = JacobiConfig(block_size=8, ngram_pool_size=4)  # a chain of 8, up to 4 candidates of 7 tokens
    widths = functools.partial(checks.forward_widths, config, 10, 128)
    assert widths(1) == (8 + 4 * 7,) == (sum(checks.widest_forward(config, 10, 128)),)
    assert widths(2) == (8, 36)
    assert widths(3) == (8, 22, 36)
    assert widths(5) == widths(9) == (8, 15, 22, 29, 36)  # never more widths than candidate counts
    assert checks.forward_widths(JacobiConfig(block_size=8), 10, 128, 5) == (8,)  # no pool: the chain only
    assert checks.forward_widths(config, 10, 4, 5) == (4, 7, 10, 13, 16)  # a 4-token budget cuts chain and candidates


def test_a_block_size_no_request_can_use_is_named_once_per_call_and_decodes_as_before():
    """10**9 runs capped at the call's budget, as it always did; it now says so, once per call (not per row or step),
    naming the cap; a block size any request can use says nothing, even where one short call caps it."""
    model = enable_jacobi(tiny_model("llama"))  # addresses 512 positions
    ids, mask = random_prompts(3, 10, seed=1)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 12, "decoding": "jacobi"}
    kwargs["return_dict_in_generate"] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        huge = model.generate(ids, jacobi_block_size=10**9, **kwargs)
        capped = model.generate(ids, jacobi_block_size=12, **kwargs)
        normal = model.generate(ids, jacobi_block_size=16, **kwargs)  # over this call's 12 tokens, within 512
    named = [str(w.message) for w in caught if "jacobi_block_size" in str(w.message)]
    assert named == [
        "jacobi_block_size=1000000000 is larger than any request can use (the model addresses 512 positions); "
        "capped at 12, the tokens this call may generate (max_new_tokens). Decoding is unchanged; set a block size "
        "within them."
    ]
    assert all(w.category is UserWarning for w in caught if "jacobi_block_size" in str(w.message))
    # the same steps as a block of exactly the budget (the cap), and greedy's tokens
    assert torch.equal(huge.sequences, capped.sequences) and torch.equal(huge.forward_passes, capped.forward_passes)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12)
    assert torch.equal(huge.sequences, greedy) and torch.equal(normal.sequences, greedy)
