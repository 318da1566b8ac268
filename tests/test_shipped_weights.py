"""The Jacobi Forcing adapter that ships with the package: exported within the size limit, merged with its defaults."""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model

from hf_jacobi.adapters import MAX_SHIPPED_BYTES, apply_adapter, export_adapter
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.gguf_cache import ModelNotAvailableError
from tiny_models import fresh_tiny_model, random_prompts


@pytest.fixture
def trained_adapter(tmp_path):
    modules = ["v_proj", "q_proj", "o_proj", "k_proj"]
    peft_model = get_peft_model(fresh_tiny_model("llama"), LoraConfig(r=4, target_modules=modules))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    peft_model.save_pretrained(tmp_path / "adapter")
    return tmp_path / "adapter", peft_model.merge_and_unload()


def test_export_then_apply_gives_the_merged_model_and_its_jacobi_defaults(tmp_path, trained_adapter):
    adapter, merged_reference = trained_adapter
    shipped = export_adapter(adapter, tmp_path / "weights", JacobiConfig(block_size=8, ngram_pool_size=4))
    assert sorted(p.name for p in shipped.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "generation_config.json"
    ]  # fmt: skip
    export_adapter(adapter, shipped, JacobiConfig(block_size=4))  # exporting again replaces the old export
    assert (
        '"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"'
        in (shipped / "adapter_config.json").read_text()
    )
    # in a stable order, whatever order PEFT's set wrote them in
    assert json.loads((shipped / "adapter_config.json").read_text())["target_modules"] == sorted(
        ["v_proj", "q_proj", "o_proj", "k_proj"]
    )
    model = apply_adapter(fresh_tiny_model("llama"), shipped)
    ids, mask = random_prompts(2, 6, seed=3)
    with torch.no_grad():
        assert torch.allclose(
            model(ids, attention_mask=mask).logits, merged_reference(ids, attention_mask=mask).logits
        )
    assert JacobiConfig.from_generation_config(model.generation_config).block_size == 4
    # the settings travel; plain generate() stays greedy, so greedy references stay greedy
    assert model.generation_config.decoding == "greedy" and not model.training


def test_bad_adapters_are_refused(tmp_path, trained_adapter, monkeypatch):
    with pytest.raises(ModelNotAvailableError, match="no Jacobi Forcing adapter"):
        apply_adapter(fresh_tiny_model("llama"), tmp_path / "nothing")
    with pytest.raises(ValueError, match="is not a PEFT adapter folder"):
        export_adapter(tmp_path, tmp_path / "w", JacobiConfig())
    monkeypatch.setattr("hf_jacobi.adapters.MAX_SHIPPED_BYTES", 10)
    with pytest.raises(ValueError, match="over the 0 MiB allowed as package data"):
        export_adapter(trained_adapter[0], tmp_path / "w", JacobiConfig())
    assert MAX_SHIPPED_BYTES == 25 * 2**20


def test_the_export_command_and_the_flag_outside_the_embedded_model(tmp_path, trained_adapter, capsys):
    from hf_jacobi.cli import main

    assert (
        main(["export-weights", str(trained_adapter[0]), "--output-dir", str(tmp_path / "w"), "--block-size", "8"])
        == 0
    )
    assert "Jacobi defaults: block 8" in capsys.readouterr().out
    assert (tmp_path / "w" / "adapter_model.safetensors").is_file()
    narrow = ["--block-size", "8", "--ngram-pool-size", "4", "--verify-size", "2", "--ngram-size", "3"]
    assert main(["export-weights", str(trained_adapter[0]), "--output-dir", str(tmp_path / "w"), *narrow]) == 0
    assert "block 8, pool 4, 2 verified per step, 3-token candidates" in capsys.readouterr().out
    written = JacobiConfig.from_generation_config(
        apply_adapter(fresh_tiny_model("llama"), tmp_path / "w").generation_config
    )
    assert (written.candidates_per_step, written.candidate_length) == (2, 3)
    assert (
        main(["export-weights", str(trained_adapter[0]), "--output-dir", str(tmp_path / "w"), "--verify-size", "2"])
        == 1
    )
    assert "jacobi_verify_size=2 has no effect without recycling" in capsys.readouterr().err
    assert main(["export-weights", str(tmp_path / "missing"), "--output-dir", str(tmp_path / "w2")]) == 1
    assert "is not a PEFT adapter folder" in capsys.readouterr().err
    fresh_tiny_model("llama").save_pretrained(tmp_path / "ck")
    assert main(["generate", "hi", "--model", str(tmp_path / "ck"), "--jacobi-forcing"]) == 1
    assert "--jacobi-forcing applies the adapter shipped for the embedded model" in capsys.readouterr().err


def test_an_adapter_of_another_model_is_named_and_other_load_errors_are_not_blamed_on_it(tmp_path, monkeypatch):
    """Module names another base model has: one line naming the adapter; an error that says nothing of the adapter's
    fit (out of memory, a broken file) keeps its own type and message."""
    get_peft_model(fresh_tiny_model("llama"), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    (tmp_path / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["no_such_proj"]}))
    with pytest.raises(ModelNotAvailableError, match=r"does not fit this model.*no_such_proj.*not found"):
        apply_adapter(fresh_tiny_model("llama"), tmp_path)
    import peft

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(peft.PeftModel, "from_pretrained", out_of_memory)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="Tried to allocate"):
        apply_adapter(fresh_tiny_model("llama"), tmp_path)
