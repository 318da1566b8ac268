"""Choosing the Jacobi settings that are fastest on this hardware, or greedy when none is (the work behind
`hf-jacobi tune`).

Two measurements are combined. The roofline is what one forward costs against the number of tokens in it: nearly
flat up to a knee on a GPU at batch 1 (memory-bound), close to linear on a small CPU (compute-bound). Acceptance is
how many tokens each candidate commits per forward and how wide its forwards are, on sample prompts; it depends on the
model and the text, not on the hardware. Their ratio, plus the loop's own per-iteration cost, predicts tokens/s for
every candidate without timing each one. The best predictions are then timed against greedy on the same prompts,
alternately over several rounds, and a candidate is only chosen when its median is measurably faster: a prediction
alone must never make decoding slower. The candidates, the predictions and the choice come first; the measuring
follows.
"""

from __future__ import annotations

import gc
import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..checkpoint import TUNE_REPORT
from ..decoding.config import AUTO_CACHE, JacobiConfig
from ..loading import eos_token_ids
from ..measurement import decode
from .common import ForwardCounts
from .roofline import DEFAULT_WIDTHS, interpolate_cost, measure_roofline, prefill_seconds, roofline_knee
from .settings import compiled_path


@dataclass(frozen=True)
class Candidate:
    """One point of the grid tune searches: the settings that trade forward width against acceptance.

    With recycling, the candidates verified per step (`verify_size`, V) and their length (`ngram_size`) set most of the
    forward's width (V n-grams of n - 1 tokens each by default): where wide forwards cost (a CPU), fewer or shorter
    candidates can keep most of the recycled tokens for a fraction of the width. None keeps JacobiConfig's default.
    """

    block_size: int
    num_blocks: int = 1
    ngram_pool_size: int = 0
    verify_size: int | None = None
    ngram_size: int | None = None
    compiled: bool = False
    """On the static cache with the verify forward compiled (the same tokens and forwards as the eager path, so only
    its timing differs); chosen, it is written to the generation config like any other setting."""

    def __post_init__(self) -> None:
        self.config  # noqa: B018 -- bad values are named here, before any measuring starts

    @property
    def config(self) -> JacobiConfig:
        fields = asdict(self)
        compiled = fields.pop("compiled")
        config = JacobiConfig(**fields)
        return compiled_path(config) if compiled else config

    def __str__(self) -> str:
        text = f"n={self.block_size} K={self.num_blocks} pool={self.ngram_pool_size}"
        if self.verify_size is not None:
            text += f" V={self.verify_size}"
        if self.ngram_size is not None:
            text += f" ngram={self.ngram_size}"
        if self.compiled:
            text += " compiled"
        return text


@dataclass
class Acceptance(ForwardCounts):
    """What a candidate did on the sample prompts; tokens and forwards do not depend on the hardware."""

    candidate: Candidate
    new_tokens: int
    forwards: int
    forward_tokens: int
    decode_seconds: float = 0.0


@dataclass
class Prediction:
    candidate: Candidate | None  # None: greedy
    tokens_per_forward: float
    mean_width: float
    seconds_per_forward: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_forward / self.seconds_per_forward


def predict(curve: dict[int, float], acceptances: list[Acceptance], loop_overhead_s: float = 0.0) -> list[Prediction]:
    """Predicted tokens/s of greedy (one token per one-token forward) and of every candidate, fastest first."""
    predictions = [Prediction(None, 1.0, 1.0, interpolate_cost(curve, 1))]
    for acc in acceptances:
        seconds = interpolate_cost(curve, acc.mean_width) + loop_overhead_s
        predictions.append(Prediction(acc.candidate, acc.tokens_per_forward, acc.mean_width, seconds))
    return sorted(predictions, key=lambda p: p.tokens_per_s, reverse=True)


@dataclass
class TuneResult:
    hardware: str
    curve: dict[int, float]
    knee: int
    loop_overhead_s: float
    acceptances: list[Acceptance]
    predictions: list[Prediction]
    verified: list[dict[str, Any]] = field(default_factory=list)
    choice: Candidate | None = None
    measured_speedup: float | None = None
    dtype: str | None = None
    greedy_tokens_per_s: float | None = None
    """Greedy's measured rate on the sample prompts (median of the timed rounds)."""
    chosen_tokens_per_s: float | None = None
    """The choice's measured rate on the sample prompts: greedy's where greedy is the choice."""

    def report(self) -> dict[str, Any]:
        best = next((p for p in self.predictions if p.candidate == self.choice), None)
        predicted_speedup = best.tokens_per_s / self.predictions_greedy.tokens_per_s if best else None
        return {
            "hardware": self.hardware,
            "dtype": self.dtype,
            "measured_tokens_per_s": {"greedy": self.greedy_tokens_per_s, "choice": self.chosen_tokens_per_s},
            "roofline_seconds": {str(w): c for w, c in sorted(self.curve.items())},
            "roofline_knee_tokens": self.knee,
            "loop_overhead_seconds": self.loop_overhead_s,
            "acceptance": [
                {**asdict(a.candidate), "tokens_per_forward": a.tokens_per_forward, "mean_width": a.mean_width}
                for a in self.acceptances
            ],
            "predictions": [
                {
                    "candidate": "greedy" if p.candidate is None else str(p.candidate),
                    "tokens_per_forward": p.tokens_per_forward,
                    "mean_width": p.mean_width,
                    "predicted_tokens_per_s": p.tokens_per_s,
                }
                for p in self.predictions
            ],
            "verified": self.verified,
            "choice": {
                "decoding": "greedy" if self.choice is None else "jacobi",
                **({} if self.choice is None else asdict(self.choice)),
                "predicted_speedup": predicted_speedup,
                "measured_speedup": self.measured_speedup,
            },
        }

    @property
    def predictions_greedy(self) -> Prediction:
        return next(p for p in self.predictions if p.candidate is None)


@dataclass
class DtypeSearch:
    """`tune` in several dtypes and the one chosen: the dtype whose own choice (Jacobi or greedy) ran fastest.

    An exact dtype (float32, where Jacobi's answers are greedy's token for token) is kept unless a reduced one is
    measurably faster, by more than `margin`: its answers are greedy's in that dtype, which may differ from float32's.
    """

    results: dict[str, TuneResult]
    dtype: str

    @classmethod
    def choose(cls, results: dict[str, TuneResult], margin: float = 0.03) -> DtypeSearch:
        def rate(dtype: str) -> float:
            bonus = 1.0 + margin if dtype in ("float32", "float64") else 1.0
            return (results[dtype].chosen_tokens_per_s or 0.0) * bonus

        return cls(results, max(results, key=rate))

    @property
    def chosen(self) -> TuneResult:
        return self.results[self.dtype]

    def report(self) -> dict[str, Any]:
        """The chosen dtype's report, with every dtype's choice and measured rates beside it."""
        searched = {
            dtype: {
                "choice": "greedy" if result.choice is None else str(result.choice),
                "measured_tokens_per_s": result.chosen_tokens_per_s,
                "greedy_tokens_per_s": result.greedy_tokens_per_s,
                "measured_speedup": result.measured_speedup,
            }
            for dtype, result in self.results.items()
        }
        return {**self.chosen.report(), "dtype_search": searched}


def choose(
    predictions: list[Prediction],
    measure: Any,
    verify_top: int = 2,
    margin: float = 0.03,
    rounds: int = 5,
    compiled: bool = False,
) -> tuple[Candidate | None, float | None, list[dict[str, Any]]]:
    """Times the `verify_top` best-predicted candidates against greedy with `measure(candidate_or_None) -> seconds`
    and returns the fastest one whose median beats greedy's median by more than `margin`, else None (greedy). With
    `compiled`, each is timed on the compiled static path too (its twin): the prediction cannot tell them apart,
    since they accept the same tokens, and which is faster depends on the hardware.

    Greedy and the candidates are timed in turn, `rounds` times, so that a slow spell of the machine (another
    process, a clock change) hits all of them rather than deciding the choice; each record keeps the fastest and
    slowest round beside the medians. Candidates predicted slower than greedy are not timed at all: they could only
    win through timing noise.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    greedy_prediction = next(p for p in predictions if p.candidate is None)
    contenders = [
        p.candidate for p in predictions if p.candidate is not None and p.tokens_per_s > greedy_prediction.tokens_per_s
    ][:verify_top]
    if compiled:
        contenders = [twin for c in contenders for twin in (c, replace(c, compiled=True))]
    if not contenders:
        return None, None, []
    seconds: dict[Candidate | None, list[float]] = {candidate: [] for candidate in [None, *contenders]}
    for _ in range(rounds):
        for candidate, times in seconds.items():
            times.append(measure(candidate))
    greedy_s = statistics.median(seconds[None])
    verified = []
    best: tuple[Candidate | None, float] = (None, 1.0 + margin)
    for candidate in contenders:
        median = statistics.median(seconds[candidate])
        speedup = greedy_s / median
        verified.append(
            {
                "candidate": str(candidate),
                "rounds": rounds,
                "greedy_seconds": greedy_s,
                "greedy_seconds_range": [min(seconds[None]), max(seconds[None])],
                "seconds": median,
                "seconds_range": [min(seconds[candidate]), max(seconds[candidate])],
                "speedup": speedup,
            }
        )
        if speedup > best[1]:
            best = (candidate, speedup)
    return best[0], (best[1] if best[0] is not None else None), verified


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
