"""Jacobi decoding returns exactly what greedy decoding returns, across families and generate() features."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from hf_jacobi import JacobiDecoderOnlyOutput, enable_jacobi
from hf_jacobi.decoding import cache as kv_cache
from tiny_models import EAGER_ONLY, FAMILIES, MORE_FAMILIES, PAD, random_prompts, tiny_model


def greedy_and_jacobi(model, ids, mask, block_size=6, **kwargs):
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    jacobi = model.generate(
        ids, attention_mask=mask, do_sample=False, decoding="jacobi", jacobi_block_size=block_size, **kwargs
    )
    return greedy, jacobi


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("batch", [1, 3])
def test_matches_greedy_across_families(family, attn, batch):
    if family in EAGER_ONLY and attn == "sdpa":
        pytest.skip(f"{family} has no sdpa implementation in transformers")
    model = enable_jacobi(tiny_model(family, 0, attn))
    ids, mask = random_prompts(batch, 9, seed=batch)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=40)
    for block_size in (1, 2, 5, 16):
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=40,
            decoding="jacobi",
            jacobi_block_size=block_size,
            return_dict_in_generate=True,
        )
        assert torch.equal(out.sequences, greedy), f"block_size={block_size}"


OUTPUT_DICT = {"do_sample": False, "return_dict_in_generate": True}


@pytest.mark.parametrize("family", sorted(MORE_FAMILIES))
def test_matches_greedy_on_more_architectures(family):
    """Jacobi relies on the model taking a 4D additive mask, per-token position ids and a cache it can crop and
    reorder; every architecture below does, on both caches, with 2 blocks in flight and recycling."""
    import transformers

    if not all(hasattr(transformers, name) for name in MORE_FAMILIES[family][:2]):
        pytest.skip(f"this transformers has no {MORE_FAMILIES[family][1]}")
    model = enable_jacobi(tiny_model(family))
    ids, mask = random_prompts(3, 9, seed=5)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=32)
    jacobi = dict(decoding="jacobi", jacobi_block_size=4, jacobi_num_blocks=2, jacobi_ngram_pool_size=2)
    runs = [
        model.generate(ids, attention_mask=mask, max_new_tokens=32, cache_implementation=c, **jacobi, **OUTPUT_DICT)
        for c in (None, "static")
    ]
    assert all(torch.equal(out.sequences, greedy) for out in runs), family
    forwards = [out.forward_passes.tolist() for out in runs]
    # drafts were accepted (fewer forwards than tokens), and both caches took the same steps
    assert sum(forwards[0]) < 3 * 31 and forwards[0] == forwards[1]


def test_sliding_window_is_exercised():
    """The Mistral fixture's window is shorter than the text generated, so the test above checks real windowing."""
    model = tiny_model("mistral")
    ids, _ = random_prompts(1, 9, seed=0)
    assert model.config.sliding_window < ids.shape[1] + 40


def test_eos_inside_an_accepted_run_ends_the_row_and_pads_like_greedy():
    model = enable_jacobi(tiny_model("llama", 1))
    ids, mask = random_prompts(3, 8, seed=4)
    free_run = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30, eos_token_id=None)
    # A token that row 0 emits mid-way becomes EOS: rows now stop at different steps.
    eos = int(free_run[0, 8 + 6])
    greedy, jacobi = greedy_and_jacobi(
        model, ids, mask, block_size=8, max_new_tokens=30, eos_token_id=eos, pad_token_id=PAD
    )
    assert torch.equal(greedy, jacobi)
    assert (jacobi[0, 8 + 7 :] == PAD).all()


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7, 33])
@pytest.mark.parametrize("block_size", [1, 4, 32])
def test_max_new_tokens_budget(max_new_tokens, block_size):
    model = enable_jacobi(tiny_model("qwen2", 0))
    ids, mask = random_prompts(2, 6, seed=2)
    greedy, jacobi = greedy_and_jacobi(model, ids, mask, block_size=block_size, max_new_tokens=max_new_tokens)
    assert torch.equal(greedy, jacobi)


def test_max_length_budget():
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(2, 6, seed=3)
    greedy, jacobi = greedy_and_jacobi(model, ids, mask, block_size=8, max_length=19)
    assert torch.equal(greedy, jacobi)
    assert jacobi.shape[1] <= 19


def test_zero_new_tokens_is_rejected_like_greedy():
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(1, 6, seed=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(ids, attention_mask=mask, max_new_tokens=0, do_sample=False)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(ids, attention_mask=mask, max_new_tokens=0, do_sample=False, decoding="jacobi")


@pytest.mark.parametrize(
    "processor_kwargs",
    [
        {"repetition_penalty": 1.8},
        {"min_new_tokens": 12},
        {"bad_words_ids": [[5], [7, 8]]},
        {"no_repeat_ngram_size": 2},
        {"suppress_tokens": [10, 11, 12]},
        {"sequence_bias": {(20,): 4.0}},
        {"prefix_allowed_tokens_fn": lambda batch_id, sent: list(range(3 + 10 * batch_id, 70 + 10 * batch_id))},
    ],
    ids=lambda kw: next(iter(kw)),
)
def test_logits_processors_greedy_honours(processor_kwargs):
    model = enable_jacobi(tiny_model("llama", 2))
    ids, mask = random_prompts(3, 9, seed=5)
    greedy, jacobi = greedy_and_jacobi(model, ids, mask, block_size=6, max_new_tokens=30, **processor_kwargs)
    assert torch.equal(greedy, jacobi)


class StopOnMultipleOf(StoppingCriteria):
    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] % self.k == 0


def test_custom_stopping_criteria_with_eos():
    model = enable_jacobi(tiny_model("gemma", 0))
    ids, mask = random_prompts(3, 7, seed=6)
    criteria = StoppingCriteriaList([StopOnMultipleOf(9)])
    greedy, jacobi = greedy_and_jacobi(model, ids, mask, max_new_tokens=40, stopping_criteria=criteria)
    assert torch.equal(greedy, jacobi)


def test_a_deep_copy_of_an_enabled_model_decodes_with_its_own_weights():
    """Copies are how users keep a base model beside a fine-tuned one; the copy's generate must not run the original."""
    model = enable_jacobi(tiny_model("llama", 0))
    copy_ = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in copy_.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    ids, mask = random_prompts(2, 6, seed=3)
    kwargs = {"attention_mask": mask, "max_new_tokens": 12, "do_sample": False}
    greedy = copy_.generate(ids, **kwargs)
    assert torch.equal(greedy, copy_.generate(ids, **kwargs, decoding="jacobi", jacobi_block_size=4))
    assert not torch.equal(greedy, model.generate(ids, **kwargs))  # the copy really is another model


def test_without_eos_finished_rows_keep_generating_like_greedy():
    """With no EOS anywhere, greedy never pads: rows finished by other criteria keep producing tokens."""
    model = tiny_model("llama", 3)
    enable_jacobi(model)
    ids, mask = random_prompts(3, 7, seed=7)
    criteria = StoppingCriteriaList([StopOnMultipleOf(7)])
    config = GenerationConfig(max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=PAD)
    saved = model.config.eos_token_id, model.generation_config.eos_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = None
    try:
        greedy = model.generate(ids, attention_mask=mask, generation_config=config, stopping_criteria=criteria)
        jacobi = model.generate(
            ids,
            attention_mask=mask,
            generation_config=config,
            stopping_criteria=criteria,
            decoding="jacobi",
            jacobi_block_size=5,
        )
    finally:
        model.config.eos_token_id, model.generation_config.eos_token_id = saved
    assert torch.equal(greedy, jacobi)


class RecordingStreamer(BaseStreamer):
    def __init__(self) -> None:
        self.puts: list[list[int]] = []
        self.ended = 0

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ended += 1


@pytest.mark.parametrize("batch", [1, 3])
def test_streamer_receives_what_greedy_sends(batch):
    model = enable_jacobi(tiny_model("qwen2", 1))
    ids, mask = random_prompts(batch, 7, seed=8)
    greedy_stream, jacobi_stream = RecordingStreamer(), RecordingStreamer()
    model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=25, streamer=greedy_stream)
    model.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=25,
        streamer=jacobi_stream,
        decoding="jacobi",
        jacobi_block_size=7,
    )
    assert jacobi_stream.puts == greedy_stream.puts
    assert jacobi_stream.ended == greedy_stream.ended == 1


def test_return_dict_reports_forward_passes():
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(2, 6, seed=9)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=20, eos_token_id=None, pad_token_id=PAD)
    greedy = model.generate(ids, return_dict_in_generate=True, **kwargs)
    one = model.generate(ids, return_dict_in_generate=True, decoding="jacobi", jacobi_block_size=1, **kwargs)
    wide = model.generate(ids, return_dict_in_generate=True, decoding="jacobi", jacobi_block_size=8, **kwargs)
    assert isinstance(one, JacobiDecoderOnlyOutput) and isinstance(wide, JacobiDecoderOnlyOutput)
    assert torch.equal(one.sequences, greedy.sequences) and torch.equal(wide.sequences, greedy.sequences)
    # A block of one is autoregressive decoding: the prefill gives token 1, each forward one more.
    assert one.forward_passes.tolist() == [19, 19]
    assert one.forward_passes.dtype == torch.long and one.forward_passes.shape == (2,)
    assert all(1 <= f <= 19 for f in wide.forward_passes.tolist())


def test_settings_come_from_generation_config_and_survive_save(tmp_path):
    model = enable_jacobi(tiny_model("llama", 4))
    ids, mask = random_prompts(1, 6, seed=10)
    config = GenerationConfig(
        max_new_tokens=16, do_sample=False, decoding="jacobi", jacobi_block_size=4, return_dict_in_generate=True
    )
    config.save_pretrained(tmp_path)
    reloaded = GenerationConfig.from_pretrained(tmp_path)
    assert reloaded.decoding == "jacobi" and reloaded.jacobi_block_size == 4
    out = model.generate(ids, attention_mask=mask, generation_config=reloaded)
    assert isinstance(out, JacobiDecoderOnlyOutput)
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
    assert torch.equal(out.sequences, greedy)
    # A call kwarg overrides the config: decoding="greedy" goes through stock generate.
    plain = model.generate(ids, attention_mask=mask, generation_config=reloaded, decoding="greedy")
    assert not isinstance(plain, JacobiDecoderOnlyOutput)
    assert torch.equal(plain.sequences, greedy)


def test_model_generation_config_default_makes_jacobi_the_default():
    model = tiny_model("qwen2", 5)
    enable_jacobi(model)
    ids, mask = random_prompts(1, 6, seed=11)
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    model.generation_config.decoding = "jacobi"
    model.generation_config.jacobi_block_size = 3
    try:
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=12, do_sample=False, return_dict_in_generate=True
        )
    finally:
        del model.generation_config.decoding, model.generation_config.jacobi_block_size
    assert isinstance(out, JacobiDecoderOnlyOutput)
    assert torch.equal(out.sequences, greedy)


def test_greedy_calls_are_untouched():
    model = tiny_model("llama", 6)
    ids, mask = random_prompts(2, 6, seed=12)
    before = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False)
    enable_jacobi(model)
    enable_jacobi(model)  # idempotent
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False), before)
    assert torch.equal(
        model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, decoding="greedy"), before
    )


def test_works_through_peft():
    peft = pytest.importorskip("peft")
    base = tiny_model("llama", 7)
    lora = peft.get_peft_model(
        base.__class__(base.config).eval(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # a non-trivial adapter, so its effect is visible in the output
    lora.eval()
    enable_jacobi(lora)
    ids, mask = random_prompts(2, 6, seed=13)
    greedy, jacobi = greedy_and_jacobi(lora, ids, mask, block_size=5, max_new_tokens=20)
    assert torch.equal(greedy, jacobi)
    with lora.disable_adapter():
        assert not torch.equal(lora.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False), greedy)


def test_cache_compaction_changes_nothing(monkeypatch):
    """Compacting after every step (moving every row's valid slots together) keeps outputs identical."""
    calls = []
    original = kv_cache.KVSlots.maybe_compact

    def always(self, cache, min_holes=32, fraction=0.25):
        calls.append(self.holes())
        return original(self, cache, min_holes=0, fraction=0.0)

    monkeypatch.setattr(kv_cache.KVSlots, "maybe_compact", always)
    for family in ("llama", "mistral", "qwen3"):
        model = enable_jacobi(tiny_model(family, 0))
        ids, mask = random_prompts(3, 9, seed=14)
        greedy, jacobi = greedy_and_jacobi(model, ids, mask, block_size=6, max_new_tokens=30)
        assert torch.equal(greedy, jacobi), family
    assert any(h > 0 for h in calls), "rows never accepted different counts: the test proves nothing"
