"""What `hf-jacobi tune` decides from its measurements: the candidate settings, each one's predicted tokens/s, and
the choice, which only a timed win over greedy makes (see `bench.tune` for the measuring)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..decoding.config import JacobiConfig
from .common import ForwardCounts
from .roofline import interpolate_cost
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
