"""`hf-jacobi bench`: greedy AR baselines against Jacobi configurations on one task, timed and scored.

Honest by construction, unlike the reference's numbers (see the method notes):
- every sample counts, not only those that ended on EOS;
- tokens/s is reported with the prefill included (what a user waits for) and without it (the decoding rate);
- the speedup is given against plain generate AND against the strongest plain-AR setup the stack offers here (static
  cache + torch.compile), so a slow baseline cannot inflate it;
- each configuration is scored on its own completions and compared token by token with greedy's.
Batches run every setting back to back, so slow drift of the machine's speed touches all settings alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import CompileConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..decoding.config import JacobiConfig
from ..loading import eos_token_ids
from ..measurement import Decoded, collapsed, common_prefix, decode
from .common import VARIANTS, variant_config
from .roofline import prefill_seconds
from .tasks import BenchItem, BenchTask

AR = "ar"
AR_STATIC = "ar-static"
AR_COMPILED = "ar-compiled"
JACOBI = "jacobi"
DEFAULT_VARIANT = "default"
AR_COMPILE_MODE = "reduce-overhead"
"""torch.compile mode of the compiled greedy baseline: transformers' own default for a compiled static cache, which on
CUDA replays the decoding step as a CUDA graph (mode "default" does not), i.e. the strongest greedy a user gets from
`generate`. Recorded in bench.json and the notes, since figures against another mode do not compare."""
EAGER = "eager"
COMPILED = "compiled"
JACOBI_PATHS = (EAGER, COMPILED)
"""How a Jacobi setting runs its verify forwards: eagerly on the dynamic cache (the default path), or on the static
cache with the forward compiled (`jacobi_cache_implementation="static"`, `jacobi_compile="always"`: transformers'
default `CompileConfig`, mode "reduce-overhead", i.e. a CUDA graph on a GPU), so that both compiled paths compare."""


@dataclass(frozen=True)
class Setting:
    """One way of decoding: a greedy AR baseline or a Jacobi configuration."""

    name: str
    kind: str
    block_size: int | None = None
    variant: str | None = None
    config: JacobiConfig | None = None  # a Jacobi setting given whole (the model's defaults), not as a variant

    @classmethod
    def model_defaults(cls, generation_config, path: str = EAGER) -> Setting:
        """The Jacobi settings `generate(decoding="jacobi")` uses for this model with no other argument: what a user
        of a tuned or shipped checkpoint gets, and so the setting a speed claim about it must time; on the compiled
        path, the same settings with the static cache and a compiled forward."""
        config = _on_path(JacobiConfig.from_generation_config(generation_config), path)
        return cls(f"Jacobi default ({config.describe()})", JACOBI, config.block_size, DEFAULT_VARIANT, config)

    @classmethod
    def jacobi(cls, variant: str, block_size: int, path: str = EAGER) -> Setting:
        """One benchmarked variant at one block size, on the eager or the compiled path."""
        config = _on_path(variant_config(variant, block_size), path)
        suffix = "" if path == EAGER else " (compiled static cache)"
        return cls(f"Jacobi {variant} n={block_size}{suffix}", JACOBI, block_size, variant, config)

    @property
    def compiled(self) -> bool:
        """Whether its first call compiles a graph (which the warm-up must pay for, at the shapes the timing uses)."""
        return self.kind == AR_COMPILED or (self.config is not None and self.config.compile == "always")

    def generate_kwargs(self, device: torch.device) -> dict[str, Any]:
        if self.kind == AR:
            return {"decoding": "greedy"}
        if self.kind == AR_STATIC:
            return {"decoding": "greedy", "cache_implementation": "static"}
        if self.kind == AR_COMPILED:
            config = CompileConfig(fullgraph=False, mode=AR_COMPILE_MODE)
            # generate only auto-compiles on accelerators; on other devices it has to be asked explicitly
            config._compile_all_devices = device.type not in ("cuda", "xpu")
            return {"decoding": "greedy", "cache_implementation": "static", "compile_config": config}
        config = self.config if self.config is not None else variant_config(self.variant, self.block_size)
        return config.to_generate_kwargs()

    @property
    def is_ar(self) -> bool:
        return self.kind in (AR, AR_STATIC, AR_COMPILED)


def _on_path(config: JacobiConfig, path: str) -> JacobiConfig:
    if path not in JACOBI_PATHS:
        raise ValueError(f"unknown Jacobi path {path!r}; accepted: {list(JACOBI_PATHS)}")
    if path == EAGER:
        return config
    return replace(config, cache_implementation="static", compile="always")


def bench_settings(
    block_sizes: list[int],
    variants: list[str],
    compiled_baseline: bool = True,
    paths: tuple[str, ...] | list[str] = (EAGER,),
) -> list[Setting]:
    """Plain AR first (the reference every other setting is checked against), then the compiled AR, then Jacobi on
    each of `paths` (eager, compiled)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown Jacobi variants {unknown}; accepted: {list(VARIANTS)}")
    settings = [Setting("AR (generate)", AR)]
    if compiled_baseline:
        settings.append(Setting("AR (static cache + compile)", AR_COMPILED))
    for path in paths:
        for variant in variants:
            for block in block_sizes:
                settings.append(Setting.jacobi(variant, block, path))
    return settings


@dataclass
class SampleResult:
    setting: str
    item_id: str
    batch: int
    prompt_tokens: int
    new_tokens: int
    forwards: int
    ended_on_eos: bool
    identical: bool
    completion: str
    correct: bool | None = None
    status: str = ""
    collapsed: bool = False
    """The answer ends in a loop (`bench.quality.collapsed`): tokens that are cheap to accept and worth nothing."""
    common_prefix: int = 0
    """Tokens it shares with greedy's answer from the start: where a differing answer (bfloat16) first departs."""


@dataclass
class BatchTiming:
    setting: str
    batch: int
    rows: int
    new_tokens: int
    seconds: float
    prefill_s: float
    round: int = 0


@dataclass
class BenchRun:
    task: str
    metric: str
    settings: list[Setting]
    samples: list[SampleResult] = field(default_factory=list)
    timings: list[BatchTiming] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Decoder:
    """Runs one setting on one batch and turns the output into per-row results."""

    def __init__(self, model, tokenizer, task: BenchTask, max_new_tokens: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_token_ids(model.generation_config)
        self.pad_id = model.generation_config.pad_token_id
        self.stops = {"stop_strings": list(task.stop_strings), "tokenizer": tokenizer} if task.stop_strings else {}

    def decode(self, setting: Setting, inputs: dict[str, torch.Tensor], max_new_tokens: int | None = None) -> Decoded:
        return decode(
            self.model,
            inputs,
            max_new_tokens or self.max_new_tokens,
            setting.generate_kwargs(self.model.device),
            eos_ids=self.eos_ids,
            pad_id=self.pad_id,
            **self.stops,
        )


def _warm_up(decoder: _Decoder, settings: list[Setting], batches: list[dict[str, torch.Tensor]], run: BenchRun):
    """Untimed runs, so one-off costs (allocations, kernel selection, compilation) are charged to no setting.

    The compiled baseline is warmed with the full token budget on two prompt lengths: its static cache is sized per
    call, and a new size recompiles (the second one with dynamic shapes), which must not happen while timing. A
    compiled Jacobi setting is warmed with the full budget on the widest batch: the static cache it sizes is kept by
    the model and reused by every shorter call, so its one graph is built here. If compilation fails on this machine,
    the baseline falls back to the static cache alone and the run says so.
    """
    shapes = batches[:2] if len(batches) > 1 else [batches[0], {k: v[:, 1:] for k, v in batches[0].items()}]
    widest = max(batches, key=lambda batch: batch["input_ids"].shape[1])
    for index, setting in enumerate(list(settings)):
        try:
            if setting.kind == AR_COMPILED:
                for batch in shapes:
                    decoder.decode(setting, batch)
            elif setting.compiled:
                decoder.decode(setting, widest)
            else:
                decoder.decode(setting, shapes[0], max_new_tokens=8)
        except Exception as error:  # compilation problems come as many exception types; the fallback is the same
            if setting.kind != AR_COMPILED:
                raise
            settings[index] = Setting("AR (static cache)", AR_STATIC)
            run.notes.append(f"torch.compile failed here ({type(error).__name__}: {error}); static cache only")


def run_bench(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: BenchTask,
    settings: list[Setting],
    max_new_tokens: int = 256,
    batch_size: int = 1,
    progress: bool = True,
    rounds: int = 1,
    on_batch: Callable[[BenchRun], None] | None = None,
) -> BenchRun:
    """Decodes every item with every setting and scores the completions; `model` must have Jacobi enabled.

    With `rounds` > 1 the whole set is timed that many times over (settings alternating within each batch, as in the
    first round) and the summary reports the median round with its spread; outputs are recorded from the first round
    (greedy decoding gives the same tokens every time, and the later rounds are checked to).

    `on_batch` sees the run after every batch of every round, all settings done (not yet scored): what a long run has
    measured so far, for a caller that keeps it in case the run is stopped."""
    if not settings or settings[0].kind != AR:
        raise ValueError("the first setting must be plain AR: it is the reference the others are compared with")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    settings = list(settings)  # the warm-up may swap the compiled baseline for its fallback
    run = BenchRun(task.name, task.metric, settings)
    decoder = _Decoder(model, tokenizer, task, max_new_tokens)
    chunks = [task.items[i : i + batch_size] for i in range(0, len(task.items), batch_size)]
    batches = [{k: v.to(model.device) for k, v in task.encode(tokenizer, chunk).items()} for chunk in chunks]
    with torch.inference_mode():
        _warm_up(decoder, settings, batches, run)
        total = rounds * len(chunks) * len(settings)
        bar = tqdm(total=total, desc=f"bench {task.name}", unit="run", disable=not progress)
        first: dict[tuple[int, str], list[list[int]]] = {}
        for round_index in range(rounds):
            for index, (chunk, inputs) in enumerate(zip(chunks, batches, strict=True)):
                prefill_s = prefill_seconds(model, inputs)
                reference: list[list[int]] | None = None
                for setting in settings:
                    decoded = decoder.decode(setting, inputs)
                    rows, seconds = decoded.answers, decoded.seconds
                    reference = rows if reference is None else reference
                    if round_index == 0:
                        first[(index, setting.name)] = rows
                        run.samples.extend(_samples(decoder, setting, chunk, index, inputs, decoded, reference))
                    elif rows != first[(index, setting.name)]:
                        raise RuntimeError(
                            f"{setting.name} gave different tokens in round {round_index + 1} than in round 1 on "
                            f"batch {index}: decoding is not deterministic here, so its timings cannot be compared"
                        )
                    run.timings.append(
                        BatchTiming(
                            setting.name, index, len(chunk), sum(len(r) for r in rows), seconds, prefill_s, round_index
                        )
                    )
                    bar.update()
                if on_batch is not None:
                    on_batch(run)
        bar.close()
    _score(task, run)
    return run


def _samples(decoder, setting, chunk: list[BenchItem], batch: int, inputs, decoded: Decoded, reference):
    prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()
    results = []
    for i, item in enumerate(chunk):
        tokens = decoded.answers[i]
        forwards = decoded.forwards[i]  # AR: n - 1 for n tokens, the prefill yields the first
        results.append(
            SampleResult(
                setting=setting.name,
                item_id=item.item_id,
                batch=batch,
                prompt_tokens=int(prompt_tokens[i]),
                new_tokens=len(tokens),
                forwards=forwards,
                ended_on_eos=bool(tokens) and tokens[-1] in decoder.eos_ids,
                identical=tokens == reference[i],
                common_prefix=common_prefix(tokens, reference[i]),
                completion=decoder.tokenizer.decode(tokens, skip_special_tokens=True),
                collapsed=collapsed(tokens),
            )
        )
    return results


def _score(task: BenchTask, run: BenchRun) -> None:
    """Scores each distinct completion once (lossless settings mostly repeat greedy's text) and fills in verdicts."""
    distinct: dict[tuple[str, str], int] = {}
    for sample in run.samples:
        distinct.setdefault((sample.item_id, sample.completion), len(distinct))
    items = {item.item_id: item for item in task.items}
    keys = list(distinct)
    scores = task.score([items[item_id] for item_id, _ in keys], [completion for _, completion in keys])
    for sample in run.samples:
        score = scores[distinct[(sample.item_id, sample.completion)]]
        sample.correct, sample.status = score.correct, score.status
