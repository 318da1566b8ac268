"""Greedy AR baselines against Jacobi configurations on one task, timed and scored (the work behind `hf-jacobi
bench`).

Honest by construction, unlike the reference's numbers (see the method notes):
- every sample counts, not only those that ended on EOS;
- tokens/s is reported with the prefill included (what a user waits for) and without it (the decoding rate);
- the speedup is given against plain generate AND against the strongest plain-AR setup the stack offers here (static
  cache + torch.compile), so a slow baseline cannot inflate it;
- each configuration is scored on its own completions and compared token by token with greedy's.
Batches run every setting back to back, so slow drift of the machine's speed touches all settings alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StaticCache

from ..decoding.cache import CACHE_ARGUMENT
from ..loading import eos_token_ids
from ..measurement import Decoded, collapsed, common_prefix, decode
from .roofline import prefill_seconds
from .settings import AR, AR_COMPILED, AR_STATIC, Setting
from .tasks import BenchItem, BenchTask


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
    """The answer ends in a loop (`measurement.collapsed`): tokens that are cheap to accept and worth nothing."""
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
    warmup_seconds: dict[str, float] = field(default_factory=dict)  # per setting: its untimed warm-up (compiling)


class _Decoder:
    """Runs one setting on one batch and turns the output into per-row results.

    `longest_prompt` sizes the compiled baseline's static cache, which is kept across its calls (`KeptStaticCaches`).
    """

    def __init__(self, model, tokenizer, task: BenchTask, max_new_tokens: int, longest_prompt: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.longest_prompt = longest_prompt
        self.eos_ids = eos_token_ids(model.generation_config)
        self.pad_id = model.generation_config.pad_token_id
        self.stops = {"stop_strings": list(task.stop_strings), "tokenizer": tokenizer} if task.stop_strings else {}
        self._caches = KeptStaticCaches(model)

    def decode(self, setting: Setting, inputs: dict[str, torch.Tensor], max_new_tokens: int | None = None) -> Decoded:
        tokens = max_new_tokens or self.max_new_tokens
        kwargs = setting.generate_kwargs(self.model.device)
        if setting.kind == AR_COMPILED:
            batch, prompt = inputs["input_ids"].shape
            kwargs = self._caches.kwargs(kwargs, batch, max(prompt, self.longest_prompt) + tokens)
        return decode(self.model, inputs, tokens, kwargs, eos_ids=self.eos_ids, pad_id=self.pad_id, **self.stops)


class KeptStaticCaches:
    """Greedy's static caches kept across `generate` calls, one per batch size, each reset before its next call, as
    a server keeps its cache.

    generate makes a new static cache every call; under a recorded CUDA graph new tensors make torch capture the
    graph again, and with other settings' calls in between (as in bench) they seldom land where the last ones lay, so
    each timed greedy call could pay a capture that a user who keeps the cache does not: a slower baseline.
    """

    def __init__(self, model) -> None:
        self.model = model
        self._caches: dict[int, tuple[int, StaticCache]] = {}  # per batch size: its length and the cache

    def kwargs(self, kwargs: dict, batch: int, length: int) -> dict:
        """`kwargs` with this batch size's cache (made, or grown, when it holds fewer than `length` slots) in place of
        `cache_implementation`."""
        have, cache = self._caches.get(batch, (0, None))
        if cache is None or have < length:
            config = self.model.config.get_text_config(decoder=True)
            cache = StaticCache(config=config, max_cache_len=length)
            self._caches[batch] = (length, cache)
        else:
            cache.reset()
        kwargs = {key: value for key, value in kwargs.items() if key != "cache_implementation"}
        return {**kwargs, CACHE_ARGUMENT: cache}


def _warm_up(decoder: _Decoder, settings: list[Setting], batches: list[dict[str, torch.Tensor]], run: BenchRun):
    """Untimed runs, so one-off costs (allocations, kernel selection, compilation) are charged to no setting.

    The compiled baseline is warmed with the full token budget on two prompt lengths: its static cache is sized per
    call, and a new size recompiles (the second one with dynamic shapes), which must not happen while timing. A
    compiled Jacobi setting is warmed with the full budget on the widest batch: the static cache it sizes is kept by
    the model and reused by every shorter call, so its graph is built here (over several widths one graph with the
    width dynamic, marked so from the first call; on a GPU a CUDA graph is recorded per width it meets).
    If compilation fails on this machine, the baseline falls back to the static cache alone and the run says so.
    """
    shapes = batches[:2] if len(batches) > 1 else [batches[0], {k: v[:, 1:] for k, v in batches[0].items()}]
    widest = max(batches, key=lambda batch: batch["input_ids"].shape[1])
    for index, setting in enumerate(list(settings)):
        start = time.perf_counter()
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
        run.warmup_seconds[settings[index].name] = time.perf_counter() - start


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
    chunks = [task.items[i : i + batch_size] for i in range(0, len(task.items), batch_size)]
    batches = [{k: v.to(model.device) for k, v in task.encode(tokenizer, chunk).items()} for chunk in chunks]
    decoder = _Decoder(model, tokenizer, task, max_new_tokens, max(b["input_ids"].shape[1] for b in batches))
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
