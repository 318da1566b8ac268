"""`jacobi_greedy_devices`: a checkpoint whose Jacobi settings were measured slower than greedy on some device decodes
greedily there under `decoding="jacobi"`, says so once, and returns greedy's tokens; a call can still ask for Jacobi,
and collection and the project's measurements always run it."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import GenerationConfig

from hf_jacobi import JacobiConfig, enable_jacobi
from hf_jacobi.data.trajectories import TrajectoryRecorder
from hf_jacobi.measurement import decode
from tiny_models import fresh_tiny_model, random_prompts

NEW = 12


@pytest.fixture
def model():
    model = enable_jacobi(fresh_tiny_model("llama"))
    JacobiConfig(block_size=4, ngram_pool_size=2, greedy_devices=("cpu",)).write_to(model.generation_config)
    return model


def inputs():
    ids, mask = random_prompts(2, 6, seed=1)
    return {"input_ids": ids, "attention_mask": mask}


def test_a_listed_device_decodes_greedily_says_so_and_a_call_can_still_ask_for_jacobi(model):
    greedy = model.generate(**inputs(), max_new_tokens=NEW, do_sample=False, decoding="greedy")
    with pytest.warns(
        UserWarning, match=r"decodes greedily on cpu in float32: .* 'cpu' in jacobi_greedy_devices"
    ) as said:
        fallback = model.generate(**inputs(), max_new_tokens=NEW, return_dict_in_generate=True)
    assert len([w for w in said if "decodes greedily" in str(w.message)]) == 1
    assert torch.equal(fallback.sequences, greedy) and not hasattr(fallback, "forward_passes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for explicitly: no warning, the Jacobi loop runs
        jacobi = model.generate(**inputs(), max_new_tokens=NEW, return_dict_in_generate=True, jacobi_greedy_devices=[])
    assert torch.equal(jacobi.sequences, greedy) and jacobi.forward_passes.shape == (2,)
    other = model.generate(
        **inputs(), max_new_tokens=NEW, return_dict_in_generate=True, jacobi_greedy_devices=["cuda"]
    )
    assert torch.equal(other.sequences, greedy) and hasattr(other, "forward_passes")


def test_collection_and_measurements_run_jacobi_on_a_listed_device(model):
    recorder = TrajectoryRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.generate(**inputs(), max_new_tokens=NEW, trajectory_recorder=recorder, jacobi_ngram_pool_size=0)
        measured = decode(
            model, inputs(), NEW, JacobiConfig.from_generation_config(model.generation_config), eos_ids=set()
        )
    assert recorder.steps and hasattr(measured.output, "forward_passes")


def test_the_setting_travels_in_a_generation_config_and_is_checked(tmp_path):
    JacobiConfig(greedy_devices=["CPU ", "mps"]).write_to(GenerationConfig()).save_pretrained(tmp_path)
    loaded = JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(tmp_path))
    assert loaded.greedy_devices == ("cpu", "mps")
    assert JacobiConfig(greedy_devices=[]).greedy_devices == ()
    for bad in ("cpu", [""], [1], "cuda,cpu"):
        with pytest.raises(
            ValueError, match=r"jacobi_greedy_devices must be a list of device types such as \['cpu'\]"
        ):
            JacobiConfig(greedy_devices=bad)
    for bad, why in (
        ("cpu:int8", r"its dtype must be one of \['float32', 'bfloat16', 'float16'\]"),
        ("cuda:bfloat16:amx", "only a 'cpu' entry names the CPU's bfloat16 units"),
        ("cpu:bfloat16:sse", "only a 'cpu' entry names the CPU's bfloat16 units, one of"),
        ("cpu:float32:none:x", "it must read 'device', 'device:dtype' or 'cpu:dtype:units'"),
        (":float32", "it must read"),
    ):
        with pytest.raises(ValueError, match=rf"jacobi_greedy_devices entry '{bad}' is not understood: {why}"):
            JacobiConfig(greedy_devices=[bad])


@pytest.mark.parametrize(
    ("entries", "dtype", "units", "greedy"),
    [
        (["cpu:float32"], torch.float32, "amx", True),
        (["cpu:float32"], torch.bfloat16, "amx", False),
        (["cpu:bfloat16:none"], torch.bfloat16, None, True),
        (["cpu:bfloat16:none"], torch.bfloat16, "avx512_bf16", False),
        (["cpu:bfloat16:avx512_bf16"], torch.bfloat16, "avx512_bf16", True),
        (["cuda", "cpu:float16"], torch.bfloat16, None, False),
        (["cpu"], torch.bfloat16, "amx", True),
    ],
)
def test_an_entry_can_name_the_dtype_and_the_cpus_bfloat16_units(monkeypatch, entries, dtype, units, greedy):
    """On a CPU, whether a block's verify pays depends on the dtype and on bfloat16 matrix units: the fallback keys on
    both, and a model outside every entry runs Jacobi."""
    import hf_jacobi.decoding.generate as generate_module

    monkeypatch.setattr(generate_module, "bfloat16_units", lambda: units)
    model = enable_jacobi(fresh_tiny_model("llama").to(dtype))
    JacobiConfig(block_size=4, greedy_devices=entries).write_to(model.generation_config)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        out = model.generate(**inputs(), max_new_tokens=NEW, return_dict_in_generate=True)
    fell_back = [str(w.message) for w in said if "decodes greedily" in str(w.message)]
    assert bool(fell_back) == greedy and hasattr(out, "forward_passes") != greedy
    if greedy:
        name = str(dtype).removeprefix("torch.")
        assert f"decodes greedily on cpu in {name}" in fell_back[0]
