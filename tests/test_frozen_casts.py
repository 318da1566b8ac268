"""Frozen weights cast once per run (`training.frozen_casts`): what is cast, that the swap is undone, and that a
trainer with the cache trains bitwise as one without it."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from hf_jacobi import JacobiForcingConfig, JacobiForcingTrainer
from hf_jacobi.training.frozen_casts import FrozenWeightCasts, cached_cast_dtype
from test_training import config
from tiny_models import fresh_tiny_model, tiny_tokenizer

LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"], task_type="CAUSAL_LM")


def lora_model(family: str = "gemma"):
    return get_peft_model(fresh_tiny_model(family), LoraConfig(**LORA))


def test_only_frozen_float32_linear_weights_not_shared_with_an_embedding_are_cast():
    model = lora_model("gemma")  # gemma ties its LM head to the input embedding
    casts = FrozenWeightCasts.for_models([model, None], torch.bfloat16)
    cast = {id(param) for param, _, _ in casts.entries}
    linear = {
        id(param)
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
        for param in module.parameters(recurse=False)
        if not param.requires_grad
    }
    embedding = model.get_input_embeddings().weight
    assert embedding is model.get_output_embeddings().weight and id(embedding) not in cast
    assert cast == linear - {id(embedding)} and len(casts) > 0
    assert all(not param.requires_grad for param, _, _ in casts.entries)  # the adapter is never cast
    untied = lora_model("qwen2")
    head = untied.get_output_embeddings().weight
    assert head is not untied.get_input_embeddings().weight
    assert id(head) in {id(param) for param, _, _ in FrozenWeightCasts.for_models([untied], torch.bfloat16).entries}
    assert len(FrozenWeightCasts.for_models([model], None)) == 0  # no autocast: nothing to cast


def test_the_swap_puts_the_casts_in_and_the_very_float32_tensors_back():
    model = lora_model()
    casts = FrozenWeightCasts.for_models([model], torch.bfloat16)
    param, original, _ = casts.entries[0]
    pointer = original.data_ptr()
    with pytest.raises(RuntimeError, match="inside"), casts.swapped():
        assert {p.dtype for p, _, _ in casts.entries} == {torch.bfloat16}
        assert param.data_ptr() != pointer
        raise RuntimeError("inside")
    assert {p.dtype for p, _, _ in casts.entries} == {torch.float32}
    assert param.data_ptr() == pointer
    ids = torch.tensor([[5, 9, 13, 21]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(ids).logits
        with casts.swapped():
            swapped = model(ids).logits
    assert torch.equal(plain, swapped)


def test_the_cast_dtype_follows_mixed_precision_and_never_a_sharded_run(tmp_path):
    bf16 = JacobiForcingConfig(output_dir=str(tmp_path), use_cpu=True, bf16=True, report_to=[])
    assert cached_cast_dtype(bf16, sharded=False) is torch.bfloat16
    assert cached_cast_dtype(bf16, sharded=True) is None
    off = JacobiForcingConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=True, cache_frozen_weights=False, report_to=[]
    )
    assert cached_cast_dtype(off, sharded=False) is None
    plain = JacobiForcingConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    assert cached_cast_dtype(plain, sharded=False) is None


def bf16_trainer(tmp_path, trajectories, lora: bool, cache: bool = True, steps: int = 3) -> JacobiForcingTrainer:
    """A bf16 run on the CPU with the KL anchor: a LoRA run's base is its adapter switched off, a full fine-tune's a
    frozen copy of the model."""
    args = config(tmp_path, bf16=True, base_kl_weight=10.0, gradient_accumulation_steps=2, max_steps=steps)
    args.cache_frozen_weights = cache
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=args,
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(**LORA) if lora else None,
    )
    trainer.train()
    return trainer


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_bf16_training_with_the_cache_is_bitwise_the_run_without_it(tmp_path, trajectories, lora):
    """The same losses at every step and the same trained weights, and float32 weights after training. A LoRA run
    casts its frozen base; a full fine-tune trains every weight and casts its anchor's frozen copy."""
    cached = bf16_trainer(tmp_path / "cached", trajectories, lora)
    plain = bf16_trainer(tmp_path / "plain", trajectories, lora, cache=False)
    assert len(cached._frozen_casts) > 0 and len(plain._frozen_casts) == 0
    if not lora:
        copy = {id(param) for param in cached._frozen_base.parameters()}
        assert all(id(param) in copy for param, _, _ in cached._frozen_casts.entries)
    losses = [(h["loss"], h["base_kl"]) for h in cached.state.log_history if "loss" in h]
    assert losses == [(h["loss"], h["base_kl"]) for h in plain.state.log_history if "loss" in h] and len(losses) == 3
    trained, reference = cached.model.state_dict(), plain.model.state_dict()
    assert trained.keys() == reference.keys()
    assert all(torch.equal(value, reference[name]) for name, value in trained.items())
    assert {value.dtype for value in trained.values()} == {torch.float32}


def test_a_full_fine_tunes_anchor_runs_under_the_models_autocast(tmp_path, trajectories):
    """At the first step the model is its base, and both runs compute the anchor's base forward alike: a LoRA run
    through the prepared model (autocast), a full fine-tune through its frozen copy, which accelerate does not wrap.
    The two first anchors agree only if the copy runs under the same autocast (in float32 it drifted from the
    bfloat16 model before any training)."""
    lora = bf16_trainer(tmp_path / "lora", trajectories, lora=True, steps=1)
    full = bf16_trainer(tmp_path / "full", trajectories, lora=False, steps=1)
    first = [next(h["base_kl"] for h in t.state.log_history if "base_kl" in h) for t in (lora, full)]
    assert first[1] == pytest.approx(first[0], rel=1e-5, abs=1e-9)
