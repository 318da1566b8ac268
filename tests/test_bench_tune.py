"""tune's choice on synthetic cost curves, and end to end on a tiny model."""

from __future__ import annotations

import json

import pytest
from transformers import GenerationConfig

from hf_jacobi import enable_jacobi
from hf_jacobi.bench.roofline import interpolate_cost, roofline_knee
from hf_jacobi.bench.tune import (
    Acceptance,
    Candidate,
    candidate_grid,
    choose,
    predict,
    tune,
    write_generation_config,
)
from hf_jacobi.decoding.config import JacobiConfig
from tiny_models import tiny_model, tiny_tokenizer


def _eager_static(candidate: Candidate) -> JacobiConfig:
    fields = {k: v for k, v in candidate.__dict__.items() if k != "compiled"}
    config = JacobiConfig(**fields)
    return config.replace(cache_implementation="static", compile="never") if candidate.compiled else config


def acceptance(block: int, tpf: float, width: float, blocks: int = 1, pool: int = 0) -> Acceptance:
    return Acceptance(
        Candidate(block, blocks, pool), new_tokens=round(tpf * 100), forwards=100, forward_tokens=round(width * 100)
    )


ACCEPTANCES = [
    acceptance(2, 1.3, 2),
    acceptance(8, 2.0, 8),
    acceptance(16, 2.6, 16),
    acceptance(32, 3.2, 32),
    acceptance(64, 3.6, 64),
    acceptance(64, 3.9, 128, blocks=2),
    acceptance(64, 4.2, 320, blocks=2, pool=4),
]
GPU_CURVE = {1: 10.0, 8: 10.1, 32: 10.4, 64: 10.8, 128: 11.5, 256: 16.0, 512: 30.0}  # flat to a knee at ~128
CPU_CURVE = {1: 10.0, 2: 14.0, 8: 38.0, 32: 110.0, 128: 400.0}  # compute-bound: every token costs


def test_interpolation_and_knee():
    assert interpolate_cost(CPU_CURVE, 1) == 10.0 and interpolate_cost(CPU_CURVE, 5) == pytest.approx(26.0)
    assert interpolate_cost(CPU_CURVE, 256) == pytest.approx(400 + 290 / 96 * 128)
    assert roofline_knee(GPU_CURVE) == 128 and roofline_knee(CPU_CURVE) == 2


def test_on_a_gpu_like_curve_tune_lands_at_the_roofline_knee():
    predictions = predict(GPU_CURVE, ACCEPTANCES, loop_overhead_s=0.5)
    best = predictions[0]
    assert best.candidate == Candidate(64, 2, 0) and best.mean_width == 128  # the widest forward before the knee
    timings = {
        None: 100.0,
        **{p.candidate: 100.0 / (p.tokens_per_s / predictions[-1].tokens_per_s) for p in predictions},
    }
    choice, speedup, verified = choose(predictions, lambda c: timings.get(c, 100.0))
    assert choice == Candidate(64, 2, 0) and speedup > 3 and len(verified) == 2


def test_on_a_cpu_like_curve_tune_keeps_greedy_without_timing_anything():
    predictions = predict(CPU_CURVE, ACCEPTANCES)
    assert predictions[0].candidate is None  # nothing beats one token per 10 units here

    def measure(candidate):
        raise AssertionError("nothing predicted faster than greedy should be timed")

    assert choose(predictions, measure) == (None, None, [])


def test_tune_never_picks_a_setting_measured_slower_than_greedy():
    predictions = predict(GPU_CURVE, ACCEPTANCES)
    measured = {None: 10.0}  # every candidate turns out slower or within the noise margin
    choice, speedup, verified = choose(predictions, lambda c: measured.get(c, 10.2), margin=0.03)
    assert choice is None and speedup is None and all(v["speedup"] < 1 for v in verified)


def test_tune_end_to_end_on_a_tiny_model_writes_a_generation_config(tmp_path):
    model = enable_jacobi(tiny_model("gemma", 0))
    tokenizer = tiny_tokenizer()
    prompts = [dict(tokenizer(f"t{5 + i} t9 t{12 + i} t40", return_tensors="pt")) for i in range(2)]
    grid = candidate_grid([2, 4], [1], [0, 2])
    result = tune(model, prompts, grid, max_new_tokens=12, widths=(1, 4, 8), repeats=1, progress=False)
    assert set(result.curve) == {1, 4, 8} and all(c > 0 for c in result.curve.values())
    assert {a.candidate for a in result.acceptances} == set(grid)
    # blocks near the end are capped by the remaining token budget, so a forward may be narrower than the block
    assert all(a.tokens_per_forward >= 1.0 and a.mean_width > 1.0 for a in result.acceptances)
    report_json = json.loads(json.dumps(result.report()))
    assert report_json["choice"]["decoding"] in ("greedy", "jacobi")
    config = write_generation_config(model.generation_config.__class__(jacobi_num_blocks=3), Candidate(8, 2, 4))
    assert (config.decoding, config.jacobi_block_size, config.jacobi_num_blocks, config.jacobi_ngram_pool_size) == (
        "jacobi",
        8,
        2,
        4,
    )
    assert JacobiConfig.from_generation_config(config) == Candidate(8, 2, 4).config and not config._from_model_config
    greedy = write_generation_config(config, None)
    assert greedy.decoding == "greedy" and not hasattr(greedy, "jacobi_block_size")


def test_candidates_name_bad_settings_before_measuring():
    with pytest.raises(ValueError, match="jacobi_block_size must be an integer >= 1, got 0"):
        candidate_grid([0, 4], [1], [0])
    assert str(Candidate(16, 2, 4)) == "n=16 K=2 pool=4" and Candidate(16, 2, 4).config.num_blocks == 2
    with pytest.raises(ValueError, match="jacobi_verify_size must be an integer >= 1, got 0"):
        candidate_grid([8], [1], [4], verify_sizes=[0])


def test_the_grid_varies_verify_and_ngram_sizes_only_where_the_pool_is_on():
    grid = candidate_grid([8], [1], [0, 2], verify_sizes=[None, 1, 4], ngram_sizes=[None, 3])
    assert grid == [
        Candidate(8, 1, 0),
        Candidate(8, 1, 2, None, None),
        Candidate(8, 1, 2, None, 3),
        Candidate(8, 1, 2, 1, None),
        Candidate(8, 1, 2, 1, 3),
    ]  # V=4 verifies no more than a pool of 2 holds per key: left out
    narrow = Candidate(8, 1, 4, verify_size=2, ngram_size=3)
    assert str(narrow) == "n=8 K=1 pool=4 V=2 ngram=3"
    assert (narrow.config.candidates_per_step, narrow.config.candidate_length) == (2, 3)
    written = write_generation_config(GenerationConfig(), narrow)
    assert JacobiConfig.from_generation_config(written) == narrow.config


def test_tune_times_greedy_and_finalists_alternately_and_decides_on_medians():
    """One slow spell during greedy's single timing used to crown a candidate that is not faster at all."""
    predictions = predict(GPU_CURVE, ACCEPTANCES)
    calls = []

    def measure(candidate):
        calls.append(candidate)
        if candidate is None:
            return 20.0 if len(calls) == 1 else 10.0  # the first greedy run meets a noisy machine
        return 10.1

    choice, speedup, verified = choose(predictions, measure, rounds=5)
    assert (choice, speedup) == (None, None)  # the median sees through the spike
    finalists = [p.candidate for p in predictions if p.candidate is not None][:2]
    assert calls == [None, *finalists] * 5
    assert verified[0]["rounds"] == 5 and verified[0]["greedy_seconds_range"] == [10.0, 20.0]
    assert verified[0]["greedy_seconds"] == 10.0 and verified[0]["seconds_range"] == [10.1, 10.1]
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        choose(predictions, measure, rounds=0)


def test_with_compiled_twins_tune_can_choose_the_compiled_path_and_the_config_carries_it():
    """Each finalist is timed on both paths; the compiled twin wins where it is faster, and the generation config it
    writes makes generate(decoding="jacobi") take the static cache with a compiled forward."""
    predictions = predict(GPU_CURVE, ACCEPTANCES)
    finalists = [p.candidate for p in predictions if p.candidate is not None][:2]
    calls = []

    def measure(candidate):
        calls.append(candidate)
        return 10.0 if candidate is None else (4.0 if candidate.compiled else 8.0)

    choice, speedup, verified = choose(predictions, measure, rounds=2, compiled=True)
    twins = [twin for c in finalists for twin in (c, Candidate(**{**c.__dict__, "compiled": True}))]
    assert calls == [None, *twins] * 2
    assert choice == twins[1] and choice.compiled and speedup == pytest.approx(2.5)
    assert [v["candidate"] for v in verified] == [str(t) for t in twins] and str(choice).endswith(" compiled")
    config = write_generation_config(GenerationConfig(), choice)
    assert (config.jacobi_cache_implementation, config.jacobi_compile) == ("static", "always")
    assert JacobiConfig.from_generation_config(config) == choice.config
    assert write_generation_config(config, finalists[0]).jacobi_cache_implementation == "dynamic"
    # chosen on a GPU, the compiled path is written as "auto": compiled there, the dynamic cache on a CPU
    on_gpu = JacobiConfig.from_generation_config(write_generation_config(GenerationConfig(), choice, accelerator=True))
    assert (on_gpu.cache_implementation, on_gpu.compile) == ("auto", "auto")
    assert on_gpu.replace(cache_implementation="static", compile="always") == choice.config
    eager = write_generation_config(GenerationConfig(), finalists[0], accelerator=True)
    assert eager.jacobi_cache_implementation == "dynamic"


def test_tune_times_a_compiled_twin_after_building_its_graph(tmp_path, monkeypatch):
    model = enable_jacobi(tiny_model("llama", 0))
    tokenizer = tiny_tokenizer()
    prompts = [dict(tokenizer(f"t{5 + i} t9 t{12 + i} t40", return_tensors="pt")) for i in range(2)]
    calls = []
    generate = model.generate

    def counting(*args, **kwargs):
        calls.append(kwargs.get("jacobi_cache_implementation", "dynamic"))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting)
    # compile "always" on this CPU is slow to build: the static path with compile "never" stands in for it here
    monkeypatch.setattr(Candidate, "config", property(lambda c: _eager_static(c)))
    # the finalist must be predicted faster than greedy to be timed at all: the tiny model's curve cannot promise that
    from hf_jacobi.bench import tune as tune_module
    from hf_jacobi.bench.tune import Prediction

    monkeypatch.setattr(
        tune_module,
        "predict",
        lambda curve, acc, overhead: [Prediction(acc[0].candidate, 9.0, 1.0, 1.0), Prediction(None, 1.0, 1.0, 1.0)],
    )
    grid = [Candidate(4, 1, 2)]
    result = tune(
        model,
        prompts,
        grid,
        max_new_tokens=8,
        widths=(1, 4),
        repeats=1,
        progress=False,
        rounds=1,
        verify_top=1,
        margin=-1.0,
        compiled=True,
    )
    assert [v["candidate"] for v in result.verified] == ["n=4 K=1 pool=2", "n=4 K=1 pool=2 compiled"]
    assert calls.count("static") == 2 * len(prompts)  # one untimed warm-up pass, then one timed round
