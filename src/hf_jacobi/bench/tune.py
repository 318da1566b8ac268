"""`hf-jacobi tune`: pick the Jacobi settings that are fastest on this hardware, or keep greedy when none is.

Two measurements are combined. The roofline is what one forward costs against the number of tokens in it: nearly
flat up to a knee on a GPU at batch 1 (memory-bound), close to linear on a small CPU (compute-bound). Acceptance is
how many tokens each candidate commits per forward and how wide its forwards are, on sample prompts; it depends on the
model and the text, not on the hardware. Their ratio, plus the loop's own per-iteration cost, predicts tokens/s for
every candidate without timing each one. The best predictions are then timed against greedy on the same prompts,
alternately over several rounds, and a candidate is only chosen when its median is measurably faster: a prediction
alone must never make decoding slower.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..decoding.config import JacobiConfig
from ..hub.export import TUNE_REPORT
from .common import ForwardCounts, timed
from .roofline import DEFAULT_WIDTHS, interpolate_cost, measure_roofline, prefill_seconds, roofline_knee

DEFAULT_BLOCK_SIZES = (2, 4, 8, 16, 32, 64)
DEFAULT_NUM_BLOCKS = (1, 2)
DEFAULT_POOL_SIZES = (0, 4)


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

    def __post_init__(self) -> None:
        self.config  # noqa: B018 -- bad values are named here, before any measuring starts

    @property
    def config(self) -> JacobiConfig:
        return JacobiConfig(**asdict(self))

    def __str__(self) -> str:
        text = f"n={self.block_size} K={self.num_blocks} pool={self.ngram_pool_size}"
        if self.verify_size is not None:
            text += f" V={self.verify_size}"
        if self.ngram_size is not None:
            text += f" ngram={self.ngram_size}"
        return text


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

    def report(self) -> dict[str, Any]:
        best = next((p for p in self.predictions if p.candidate == self.choice), None)
        predicted_speedup = best.tokens_per_s / self.predictions_greedy.tokens_per_s if best else None
        return {
            "hardware": self.hardware,
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


def choose(
    predictions: list[Prediction],
    measure: Any,
    verify_top: int = 2,
    margin: float = 0.03,
    rounds: int = 5,
) -> tuple[Candidate | None, float | None, list[dict[str, Any]]]:
    """Times the `verify_top` best-predicted candidates against greedy with `measure(candidate_or_None) -> seconds`
    and returns the fastest one whose median beats greedy's median by more than `margin`, else None (greedy).

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


# --- measuring on a model -------------------------------------------------------------------------------------------


@torch.inference_mode()
def measure_acceptance(
    model, prompts: list[dict[str, torch.Tensor]], candidates: list[Candidate], max_new_tokens: int, progress=True
) -> list[Acceptance]:
    """Runs every candidate on every prompt (batch 1) and sums tokens, forwards and widths."""
    results = []
    for candidate in tqdm(candidates, desc="acceptance", unit="candidate", disable=not progress):
        tokens = forwards = width = 0
        seconds = 0.0
        kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False, "return_dict_in_generate": True}
        kwargs.update(candidate.config.to_generate_kwargs())
        for inputs in prompts:
            out, wall = timed(lambda inputs=inputs, kwargs=kwargs: model.generate(**inputs, **kwargs))
            tokens += out.sequences.shape[1] - inputs["input_ids"].shape[1]
            forwards += int(out.forward_passes[0])
            width += int(out.forward_tokens[0])
            seconds += wall
        results.append(Acceptance(candidate, tokens, forwards, width, seconds))
    return results


def loop_overhead(curve: dict[int, float], acceptances: list[Acceptance], prefill_s: float, prompts: int) -> float:
    """The loop's own seconds per iteration beyond the bare forward (median over candidates, never negative)."""
    extras = [
        (a.decode_seconds - prefill_s * prompts) / max(a.forwards, 1) - interpolate_cost(curve, a.mean_width)
        for a in acceptances
    ]
    return max(statistics.median(extras), 0.0) if extras else 0.0


def write_generation_config(config: GenerationConfig, choice: Candidate | None) -> GenerationConfig:
    """`config` (in place, and returned) with the choice written in: Jacobi and its settings, or greedy with no Jacobi
    settings left over from an earlier choice."""
    for name in JacobiConfig.setting_names():
        if hasattr(config, name):
            delattr(config, name)
    if choice is None:
        config.decoding = "greedy"
        return config
    config._from_model_config = False  # a file marked as derived from config.json may be regenerated on load
    return choice.config.write_to(config)


def save_report(folder: Path, result: TuneResult) -> Path:
    path = folder / TUNE_REPORT
    path.write_text(json.dumps(result.report(), indent=2), encoding="utf-8")
    return path


@torch.inference_mode()
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
) -> TuneResult:
    """Measures, predicts and verifies on `prompts` (batch-1 encodings); `model` must have Jacobi enabled. The
    finalists and greedy are timed alternately for `rounds` rounds and compared on their medians."""
    from .report import machine_description

    if not prompts:
        raise ValueError("tune needs at least one sample prompt")
    if not candidates:
        raise ValueError("tune needs at least one candidate setting")
    greedy_kwargs = {"decoding": "greedy", "do_sample": False}
    first = prompts[0]
    model.generate(**first, max_new_tokens=4, **greedy_kwargs)  # warm-up, untimed
    model.generate(**first, max_new_tokens=4, do_sample=False, **candidates[0].config.to_generate_kwargs())
    continuation = model.generate(**first, max_new_tokens=max(max_new_tokens // 2, 1), **greedy_kwargs)
    curve = measure_roofline(model, continuation, widths, repeats)
    prefill_s = statistics.mean(prefill_seconds(model, p, repeats=1) for p in prompts)
    acceptances = measure_acceptance(model, prompts, candidates, max_new_tokens, progress)
    overhead = loop_overhead(curve, acceptances, prefill_s, len(prompts))
    predictions = predict(curve, acceptances, overhead)

    def measure(candidate: Candidate | None) -> float:
        kwargs = greedy_kwargs if candidate is None else {"do_sample": False, **candidate.config.to_generate_kwargs()}
        return sum(timed(lambda p=p: model.generate(**p, max_new_tokens=max_new_tokens, **kwargs))[1] for p in prompts)

    choice, speedup, verified = choose(predictions, measure, verify_top, margin, rounds)
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
    )
