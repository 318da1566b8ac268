"""Bad settings fail at the generate() boundary with a message naming the value and what is accepted."""

from __future__ import annotations

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, DynamicCache, GenerationConfig

from hf_jacobi import JacobiConfig, enable_jacobi
from hf_jacobi.decoding.cache import CACHE_ARGUMENT
from tiny_models import random_prompts, tiny_model


@pytest.fixture
def model():
    return enable_jacobi(tiny_model("llama", 0))


@pytest.fixture
def prompt():
    return random_prompts(1, 6, seed=0)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_block_size_must_be_a_positive_int(model, prompt, bad):
    ids, mask = prompt
    with pytest.raises(ValueError, match=r"jacobi_block_size must be an integer >= 1, got"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", jacobi_block_size=bad)


def test_block_size_is_checked_even_for_greedy_calls(model, prompt):
    ids, mask = prompt
    with pytest.raises(ValueError, match="jacobi_block_size"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, jacobi_block_size=0)


def test_block_size_from_generation_config_is_checked(model, prompt):
    ids, mask = prompt
    config = GenerationConfig(max_new_tokens=4, decoding="jacobi", jacobi_block_size=-1)
    with pytest.raises(ValueError, match="got -1"):
        model.generate(ids, attention_mask=mask, generation_config=config)


def test_unknown_decoding_name(model, prompt):
    ids, mask = prompt
    with pytest.raises(ValueError, match=r"decoding must be one of \['greedy', 'jacobi'\].*'jacobian'"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobian")


def test_unknown_jacobi_setting(model, prompt):
    ids, mask = prompt
    with pytest.raises(ValueError, match=r"Unknown Jacobi setting 'jacobi_blocksize'.*jacobi_block_size"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", jacobi_blocksize=4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_beams": 2}, "num_beams must be 1, got 2"),
        ({"do_sample": True, "num_beams": 2}, "num_beams must be 1, got 2"),
        ({"cache_implementation": "offloaded_static"}, "cache_implementation='offloaded_static'"),
        ({"output_scores": True, "return_dict_in_generate": True}, "output_scores must be False"),
        ({"output_hidden_states": True, "return_dict_in_generate": True}, "output_hidden_states must be False"),
        ({"use_cache": False}, "use_cache must be True"),
        ({"prompt_lookup_num_tokens": 3}, "prompt_lookup_num_tokens"),
        ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive search"),
    ],
)
def test_incompatible_generation_settings(model, prompt, kwargs, message):
    ids, mask = prompt
    with pytest.raises(ValueError, match=message):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", **kwargs)


@pytest.mark.parametrize("name", sorted({"past_key_values", CACHE_ARGUMENT}))
def test_user_cache_is_rejected(model, prompt, name):
    """Under either name the installed transformers accepts (5.24 renamed `past_key_values` to `cache`)."""
    ids, mask = prompt
    with pytest.raises(ValueError, match=r"do not pass `cache` \(or `past_key_values`\)"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", **{name: DynamicCache()})


def test_attention_backend_without_4d_masks_is_rejected(prompt):
    model = enable_jacobi(tiny_model("qwen2", 9))
    ids, mask = prompt
    original = model.config._attn_implementation
    model.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ValueError, match=r"one of \['sdpa', 'eager'\].*'flash_attention_2'"):
            model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi")
    finally:
        model.config._attn_implementation = original


def test_encoder_decoder_is_rejected():
    config = BartConfig(
        vocab_size=64,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
    )
    model = enable_jacobi(BartForConditionalGeneration(config).eval())
    ids = torch.randint(4, 64, (1, 5))
    with pytest.raises(ValueError, match="decoder-only"):
        model.generate(ids, max_new_tokens=4, decoding="jacobi")


def test_stop_strings_need_a_tokenizer(model, prompt):
    ids, mask = prompt
    with pytest.raises(ValueError, match=r"tokenizer=\.\.\."):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", stop_strings=["x"])


def test_config_is_a_frozen_validated_dataclass():
    assert JacobiConfig().block_size == 16
    assert JacobiConfig.setting_names() == (
        "jacobi_block_size",
        "jacobi_num_blocks",
        "jacobi_spawn_ratio",
        "jacobi_ngram_pool_size",
        "jacobi_verify_size",
        "jacobi_ngram_size",
        "jacobi_ngram_key_size",
        "jacobi_draft_seed",
        "jacobi_cache_implementation",
        "jacobi_compile",
        "jacobi_static_widths",
        "jacobi_greedy_devices",
    )
    with pytest.raises(ValueError, match="jacobi_draft_seed must be an integer"):
        JacobiConfig(draft_seed="x")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"jacobi_num_blocks": 0}, r"jacobi_num_blocks must be an integer >= 1, got 0"),
        ({"jacobi_num_blocks": 1.5}, r"jacobi_num_blocks must be an integer >= 1, got 1.5"),
        ({"jacobi_spawn_ratio": 0}, r"jacobi_spawn_ratio must be a number in \(0, 1\], got 0"),
        ({"jacobi_spawn_ratio": 1.2}, r"jacobi_spawn_ratio must be a number in \(0, 1\], got 1.2"),
        ({"jacobi_spawn_ratio": "high"}, r"jacobi_spawn_ratio must be a number in \(0, 1\], got 'high'"),
        ({"jacobi_ngram_pool_size": -1}, r"jacobi_ngram_pool_size must be an integer >= 0, got -1"),
        ({"jacobi_ngram_pool_size": 4, "jacobi_verify_size": 0}, r"jacobi_verify_size must be an integer >= 1"),
        ({"jacobi_verify_size": 2}, r"jacobi_verify_size=2 has no effect without recycling.*jacobi_ngram_pool_size"),
        ({"jacobi_ngram_pool_size": 2, "jacobi_ngram_size": 0}, r"jacobi_ngram_size must be an integer >= 1, got 0"),
        ({"jacobi_ngram_key_size": 0}, r"jacobi_ngram_key_size must be an integer >= 1, got 0"),
    ],
)
def test_multi_block_and_recycling_settings_are_validated(model, prompt, kwargs, message):
    ids, mask = prompt
    with pytest.raises(ValueError, match=message):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", **kwargs)


def test_recycling_defaults_follow_the_block():
    config = JacobiConfig(block_size=8, ngram_pool_size=3)
    assert (config.candidates_per_step, config.candidate_length) == (3, 7)
    assert JacobiConfig(block_size=1, ngram_pool_size=2, verify_size=1, ngram_size=4).candidates_per_step == 1
    assert JacobiConfig().candidates_per_step == 0


def test_settings_travel_in_generation_config(model, prompt):
    ids, mask = prompt
    config = GenerationConfig(
        max_new_tokens=12, decoding="jacobi", jacobi_block_size=3, jacobi_num_blocks=2, jacobi_ngram_pool_size=2
    )
    out = model.generate(ids, attention_mask=mask, generation_config=config, return_dict_in_generate=True)
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert torch.equal(out.sequences, greedy)
    assert out.forward_tokens is not None and out.recycled_tokens is not None


def test_a_call_turning_recycling_off_drops_the_verify_size_the_checkpoint_tuned():
    """A checkpoint whose defaults verify 2 candidates per step must still run plain Jacobi when a call (or a later
    generation config) sets the pool to 0; a verify size given together with pool 0 is still refused."""
    tuned = GenerationConfig(jacobi_block_size=16, jacobi_ngram_pool_size=4, jacobi_verify_size=2)
    plain = JacobiConfig.from_generation_config(tuned, block_size=8, ngram_pool_size=0)
    assert (plain.block_size, plain.ngram_pool_size, plain.verify_size) == (8, 0, None)
    later = GenerationConfig(jacobi_ngram_pool_size=0)
    assert JacobiConfig.from_generation_config(tuned, later).verify_size is None
    assert JacobiConfig.from_generation_config(tuned).candidates_per_step == 2  # kept while the pool is on
    with pytest.raises(ValueError, match="jacobi_verify_size=2 has no effect without recycling"):
        JacobiConfig.from_generation_config(tuned, ngram_pool_size=0, verify_size=2)


def test_inputs_embeds_alone_is_refused_before_any_forward(model, prompt):
    ids, mask = prompt
    embeds = model.get_input_embeddings()(ids)
    with pytest.raises(ValueError, match="pass input_ids, not inputs_embeds alone"):
        model.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=4, decoding="jacobi")
