"""jacobi_cache_implementation="auto": the compiled static path where generate would compile, the dynamic cache
elsewhere; the shipped adapter's generation config uses it."""

from __future__ import annotations

import pytest
import torch
from transformers import CompileConfig, GenerationConfig

from hf_jacobi import JacobiConfig, enable_jacobi
from hf_jacobi.bench.settings import COMPILED, EAGER, Setting
from hf_jacobi.decoding.cache_choice import resolve_cache
from hf_jacobi.decoding.static_cache import CACHE_ATTRIBUTE
from tiny_models import fresh_tiny_model, random_prompts, tiny_model

AUTO = JacobiConfig(block_size=4, num_blocks=2, ngram_pool_size=2, cache_implementation="auto")


@pytest.fixture
def on_a_gpu(monkeypatch: pytest.MonkeyPatch):
    """The model reports a CUDA device to transformers' compile rule (nothing runs on it)."""
    model = tiny_model("llama", 0)
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    return model


def test_auto_is_the_static_cache_where_generate_compiles(on_a_gpu) -> None:
    config = resolve_cache(AUTO.replace(static_widths=2), on_a_gpu, GenerationConfig())
    assert (config.cache_implementation, config.compile, config.static_widths) == ("static", "auto", 2)
    # what keeps generate from compiling keeps the loop on the dynamic cache too
    for generation_config in (GenerationConfig(disable_compile=True),):
        assert resolve_cache(AUTO, on_a_gpu, generation_config).cache_implementation == "dynamic"
    assert resolve_cache(AUTO.replace(compile="never"), on_a_gpu, GenerationConfig()).cache_implementation == "dynamic"


def test_auto_is_the_dynamic_cache_on_a_cpu_unless_compiling_is_asked_for() -> None:
    model = tiny_model("llama", 0)
    dynamic = resolve_cache(AUTO.replace(static_widths=3), model, GenerationConfig())
    assert (dynamic.cache_implementation, dynamic.static_widths) == ("dynamic", None)  # the static path's widths go
    assert resolve_cache(AUTO.replace(compile="always"), model, GenerationConfig()).cache_implementation == "static"
    everywhere = CompileConfig()
    everywhere._compile_all_devices = True
    asked = GenerationConfig(compile_config=everywhere)
    assert resolve_cache(AUTO, model, asked).cache_implementation == "static"
    assert resolve_cache(AUTO.replace(cache_implementation="dynamic"), model, asked).cache_implementation == "dynamic"


def test_auto_decodes_as_greedy_on_the_dynamic_cache_here() -> None:
    model = enable_jacobi(fresh_tiny_model("llama", 0))  # a model no other test has decoded on a static cache
    ids, mask = random_prompts(3, 7, seed=4)
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, decoding="greedy")
    kwargs = {**AUTO.replace(static_widths=2).to_generate_kwargs(), "compile_config": CompileConfig()}
    out = model.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, **kwargs)
    assert torch.equal(out, greedy)
    assert getattr(model, CACHE_ATTRIBUTE, None) is None  # no static cache was built: the dynamic path ran


def test_an_auto_setting_benchmarks_eagerly_on_the_dynamic_cache_and_compiled_as_its_twin() -> None:
    generation_config = AUTO.write_to(GenerationConfig())
    eager = Setting.model_defaults(generation_config, EAGER)
    compiled = Setting.model_defaults(generation_config, COMPILED)
    assert (eager.config.cache_implementation, eager.path, eager.compiled) == ("dynamic", EAGER, False)
    assert (compiled.config.cache_implementation, compiled.path, compiled.compiled) == ("static", COMPILED, True)
    assert "static cache where compiled" in AUTO.describe()


def test_the_shipped_adapter_leaves_the_cache_to_the_device() -> None:
    from hf_jacobi.adapters import JACOBI_FORCING_WEIGHTS

    shipped = JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(JACOBI_FORCING_WEIGHTS))
    assert shipped.cache_implementation == "auto"
