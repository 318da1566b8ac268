"""`hf-jacobi tune`: pick the Jacobi settings that are fastest on this hardware, or keep greedy when none is.

Two measurements are combined. The roofline is what one forward costs against the number of tokens in it: nearly
flat up to a knee on a GPU at batch 1 (memory-bound), close to linear on a small CPU (compute-bound). Acceptance is
how many tokens each candidate commits per forward and how wide its forwards are, on sample prompts; it depends on the
model and the text, not on the hardware. Their ratio, plus the loop's own per-iteration cost, predicts tokens/s for
every candidate without timing each one. The best predictions are then timed against greedy on the same prompts,
alternately over several rounds, and a candidate is only chosen when its median is measurably faster: a prediction
alone must never make decoding slower. This module measures; `tune_choice` predicts and chooses.
"""

from __future__ import annotations

import gc
import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..checkpoint import TUNE_REPORT
from ..decoding.config import AUTO_CACHE, JacobiConfig
from ..loading import eos_token_ids
from ..measurement import decode
from .roofline import DEFAULT_WIDTHS, interpolate_cost, measure_roofline, prefill_seconds, roofline_knee
from .tune_choice import Acceptance, Candidate, DtypeSearch, TuneResult, choose, predict

DEFAULT_BLOCK_SIZES = (2, 4, 8, 16, 32, 64)
DEFAULT_NUM_BLOCKS = (1, 2)
DEFAULT_POOL_SIZES = (0, 4)


def candidate_grid(
    block_sizes=DEFAULT_BLOCK_SIZES,
    num_blocks=DEFAULT_NUM_BLOCKS,
    pool_sizes=DEFAULT_POOL_SIZES,
    verify_sizes=(None,),
    ngram_sizes=(None,),
) -> list[Candidate]:
    """Every combination; verify and n-gram sizes only vary where the pool is on (they mean nothing without it), and
    a verify size above the pool size is left out (it verifies no more than the pool holds per key)."""
    grid = []
    for block, blocks, pool in itertools.product(block_sizes, num_blocks, pool_sizes):
        if pool == 0:
            grid.append(Candidate(block, blocks, pool))
            continue
        for verify, ngram in itertools.product(verify_sizes, ngram_sizes):
            if verify is not None and verify > pool:
                continue
            grid.append(Candidate(block, blocks, pool, verify, ngram))
    return list(dict.fromkeys(grid))


@torch.inference_mode()
def measure_acceptance(
    model, prompts: list[dict[str, torch.Tensor]], candidates: list[Candidate], max_new_tokens: int, progress=True
) -> list[Acceptance]:
    """Runs every candidate on every prompt (batch 1) and sums tokens, forwards and widths."""
    eos_ids = eos_token_ids(model.generation_config)
    results = []
    for candidate in tqdm(candidates, desc="acceptance", unit="candidate", disable=not progress):
        runs = [decode(model, inputs, max_new_tokens, candidate.config, eos_ids=eos_ids) for inputs in prompts]
        tokens = sum(run.new_tokens[0] for run in runs)
        forwards = sum(run.forwards[0] for run in runs)
        width = sum(run.forward_tokens[0] for run in runs)
        results.append(Acceptance(candidate, tokens, forwards, width, sum(run.seconds for run in runs)))
    return results


def loop_overhead(curve: dict[int, float], acceptances: list[Acceptance], prefill_s: float, prompts: int) -> float:
    """The loop's own seconds per iteration beyond the bare forward (median over candidates, never negative)."""
    extras = [
        (a.decode_seconds - prefill_s * prompts) / max(a.forwards, 1) - interpolate_cost(curve, a.mean_width)
        for a in acceptances
    ]
    return max(statistics.median(extras), 0.0) if extras else 0.0


def write_generation_config(
    config: GenerationConfig, choice: Candidate | None, accelerator: bool = False
) -> GenerationConfig:
    """`config` (in place, and returned) with the choice written in: Jacobi and its settings, or greedy with no Jacobi
    settings left over from an earlier choice.

    A compiled choice made on an `accelerator` is written as the "auto" cache: compiled there, as timed, and the
    dynamic cache on a CPU the checkpoint may later run on, where compiling would cost minutes before the first token
    (a compiled choice made on a CPU stays compiled on every device: it was timed there)."""
    for name in JacobiConfig.setting_names():
        if hasattr(config, name):
            delattr(config, name)
    if choice is None:
        config.decoding = "greedy"
        return config
    config._from_model_config = False  # a file marked as derived from config.json may be regenerated on load
    chosen = choice.config
    if choice.compiled and accelerator:
        chosen = chosen.replace(cache_implementation=AUTO_CACHE, compile="auto")
    return chosen.write_to(config)


def searched_dtypes(device: str) -> list[str]:
    """The dtypes `hf-jacobi tune` searches by default on `device`: float32, and first bfloat16 where it runs natively
    (a GPU that supports it, a CPU with bfloat16 units; emulated bfloat16 on a CPU without them is slower than float32
    and is not worth timing)."""
    from ..decoding.cpu_info import bfloat16_units

    if device.startswith("cuda"):
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    else:
        native = bfloat16_units() is not None
    return ["bfloat16", "float32"] if native else ["float32"]


def save_report(folder: Path, result: TuneResult | DtypeSearch) -> Path:
    path = folder / TUNE_REPORT
    path.write_text(json.dumps(result.report(), indent=2), encoding="utf-8")
    return path


@torch.inference_mode()
def _warm_up(model, inputs: dict, greedy_kwargs: dict, config: JacobiConfig) -> None:
    """One short untimed greedy call and one Jacobi call (run on every device: this measures Jacobi)."""
    model.generate(**inputs, max_new_tokens=4, **greedy_kwargs)
    jacobi_kwargs = config.replace(greedy_devices=()).to_generate_kwargs()
    model.generate(**inputs, max_new_tokens=4, do_sample=False, **jacobi_kwargs)


def tune(
    model,
    prompts: list[dict[str, torch.Tensor]],
    candidates: list[Candidate],
    max_new_tokens: int = 64,
    widths=DEFAULT_WIDTHS,
    repeats: int = 5,
    verify_top: int = 2,
    margin: float = 0.03,
    progress: bool = True,
    rounds: int = 5,
    compiled: bool = False,
    shared: TuneResult | None = None,
) -> TuneResult:
    """Measures, predicts and verifies on `prompts` (batch-1 encodings); `model` must have Jacobi enabled. The
    finalists and greedy are timed alternately for `rounds` rounds and compared on their medians; with `compiled`,
    each finalist also on the compiled static path, whose graph is built untimed before its first timing. `shared`: a
    result of the same model on the same prompts in another dtype, whose acceptances and loop overhead are reused
    (see `search_dtypes`)."""
    from .report import machine_description

    if not prompts:
        raise ValueError("tune needs at least one sample prompt")
    if not candidates:
        raise ValueError("tune needs at least one candidate setting")
    greedy_kwargs = {"decoding": "greedy", "do_sample": False}
    first = prompts[0]
    _warm_up(model, first, greedy_kwargs, candidates[0].config)
    continuation = model.generate(**first, max_new_tokens=max(max_new_tokens // 2, 1), **greedy_kwargs)
    curve = measure_roofline(model, continuation, widths, repeats)
    if shared is None:
        prefill_s = statistics.mean(prefill_seconds(model, p, repeats=1) for p in prompts)
        acceptances = measure_acceptance(model, prompts, candidates, max_new_tokens, progress)
        overhead = loop_overhead(curve, acceptances, prefill_s, len(prompts))
    else:
        acceptances, overhead = shared.acceptances, shared.loop_overhead_s
    predictions = predict(curve, acceptances, overhead)

    warmed: set[Candidate] = set()
    eos_ids = eos_token_ids(model.generation_config)
    tokens: dict[Candidate | None, int] = {}
    dtype = str(model.dtype).removeprefix("torch.")
    timing = tqdm(desc=f"timed runs ({dtype})", unit="run", disable=not progress)

    def measure(candidate: Candidate | None) -> float:
        settings = None if candidate is None else candidate.config
        if candidate is not None and candidate.compiled and candidate not in warmed:
            # the longest prompt first: its static cache is kept by the shorter calls, so one graph serves them all
            for p in sorted(prompts, key=lambda p: -p["input_ids"].shape[1]):
                decode(model, p, max_new_tokens, settings, eos_ids=eos_ids)
            warmed.add(candidate)
        runs = [decode(model, p, max_new_tokens, settings, eos_ids=eos_ids) for p in prompts]
        tokens[candidate] = sum(run.new_tokens[0] for run in runs)
        timing.update(1)
        return sum(run.seconds for run in runs)

    choice, speedup, verified = choose(predictions, measure, verify_top, margin, rounds, compiled)
    if verified:
        greedy_s = verified[0]["greedy_seconds"]
        chosen_s = next((v["seconds"] for v in verified if v["candidate"] == str(choice)), greedy_s)
    else:  # nothing was worth timing against greedy: greedy is timed alone, for comparisons across dtypes
        greedy_s = chosen_s = statistics.median(measure(None) for _ in range(rounds))
    timing.close()
    return TuneResult(
        hardware=machine_description(),
        curve=curve,
        knee=roofline_knee(curve),
        loop_overhead_s=overhead,
        acceptances=acceptances,
        predictions=predictions,
        verified=verified,
        choice=choice,
        measured_speedup=speedup,
        dtype=dtype,
        greedy_tokens_per_s=tokens[None] / greedy_s,
        chosen_tokens_per_s=tokens[choice] / chosen_s,
    )


def search_dtypes(
    load: Callable[[str], Any], dtypes: list[str], prompts: list[dict[str, torch.Tensor]], candidates, **options
) -> DtypeSearch:
    """`tune` in each of `dtypes` (`load(dtype)` gives the Jacobi-enabled model in it, one at a time), then the dtype
    whose choice ran fastest (`DtypeSearch.choose`).

    The dtype decides whether Jacobi pays at all on a CPU: with bfloat16 units a block's verify costs little more than
    one token in bfloat16, while float32 pays for every token. Tokens and forwards barely depend on the dtype, so the
    acceptance of every candidate (the long part) is measured in the first dtype only, and each dtype measures its own
    forward costs and times its own finalists against its own greedy."""
    if not dtypes:
        raise ValueError("search_dtypes needs at least one dtype")
    results: dict[str, TuneResult] = {}
    shared = None
    for dtype in dtypes:
        model = load(dtype)
        results[dtype] = tune(model, prompts, candidates, shared=shared, **options)
        shared = shared or results[dtype]
        del model
        gc.collect()
    return DtypeSearch.choose(results, margin=options.get("margin", 0.03))
