"""The KL anchor's cheap adapter switch gives exactly what PEFT's `disable_adapter()` gives, and restores the adapter."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from hf_jacobi.training.adapter_switch import AdapterSwitch
from tiny_models import fresh_tiny_model


def _lora_model(**extra):
    model = get_peft_model(fresh_tiny_model("llama"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], **extra))
    with torch.no_grad():  # a trained adapter: B is no longer zero, so switching it off changes the logits
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    return model.eval()


@pytest.mark.parametrize("extra", [{}, {"modules_to_save": ["lm_head"]}], ids=["lora", "modules_to_save"])
def test_switched_off_model_is_the_base_and_the_adapter_comes_back(extra):
    model = _lora_model(**extra)
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        switch = AdapterSwitch(model)
        assert switch.flip == (not extra)  # modules_to_save swaps modules: PEFT's own switch is used
        with switch.off() as off:
            assert torch.equal(off(input_ids=ids).logits, base)
        assert torch.equal(model(input_ids=ids).logits, adapted)
    assert not torch.equal(adapted, base)


def test_a_layer_switched_off_before_stays_off():
    model = _lora_model()
    switch = AdapterSwitch(model)
    switch.layers[0]._disable_adapters = True
    with switch.off():
        pass
    assert switch.layers[0]._disable_adapters and not switch.layers[1]._disable_adapters
