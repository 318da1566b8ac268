"""`hf-jacobi demo`: greedy vs Jacobi on held-out prompts, the untrained embedded model beside the same model with the
shipped Jacobi Forcing adapter: forwards, tokens per forward, wall time, and the check that every output is greedy's."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from tqdm import tqdm

from ..decoding.config import JacobiConfig
from .arg_types import AUTO_DTYPE, positive_int, resolve_dtype
from .common import (
    LoadedModel,
    add_model_arguments,
    add_prompt_source_arguments,
    describe_settings,
    jacobi_config,
    load_model,
    load_source_prompts,
    per_forward,
    with_jacobi_forcing,
)
from .exactness import ROUNDING_NOTE, greedy_verdict

UNTRAINED = "untrained"
TRAINED = "+ Jacobi Forcing adapter"


@dataclass
class Row:
    task_id: str
    tokens: int
    greedy_forwards: int
    jacobi_forwards: int
    identical: bool


@dataclass
class ModelRun:
    """One model's greedy and Jacobi runs over the demo prompts."""

    label: str
    rows: list[Row] = field(default_factory=list)
    greedy_s: float = 0.0
    jacobi_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(row.tokens for row in self.rows)

    @property
    def identical(self) -> bool:
        return all(row.identical for row in self.rows)


def demo_settings(args: argparse.Namespace, loaded: LoadedModel) -> JacobiConfig:
    """The flags given, on top of the Jacobi defaults of the model's generation config; for the embedded model the
    shipped adapter's tuned defaults, so that the untrained and the trained model run the very same setting and a bare
    `hf-jacobi demo` shows the settings `generate(decoding="jacobi")` uses by default (run as Jacobi on every device,
    also where `jacobi_greedy_devices` makes a plain call decode greedily)."""
    from transformers import GenerationConfig

    from ..adapters import JACOBI_FORCING_WEIGHTS

    if args.model is None:
        return jacobi_config(args, GenerationConfig.from_pretrained(JACOBI_FORCING_WEIGHTS))
    return jacobi_config(args, loaded.model.generation_config)


def run_model(
    loaded: LoadedModel, label: str, prompts: list[tuple[str, list[dict[str, str]]]], settings: JacobiConfig, args
) -> ModelRun:
    """Greedy then Jacobi on each batch of prompts, `args.rounds` times over, each call timed at its fastest round.

    A machine's speed drifts over seconds (a shared host, a clock change) and a first run pays once per shape and
    kernel: both only add time, so the fastest of a few rounds is the call's own cost, and the two models' greedy rates
    agree where a single pass lets a slow spell fall on one of them. Greedy and Jacobi alternate within a round, so a
    slow spell that outlasts the rounds still hits both. An untimed run of both over the first batch comes first."""
    from ..data.batching import left_padded
    from ..data.chat import encode_chat

    model, tokenizer = loaded.model, loaded.tokenizer
    run = ModelRun(label)
    batches = []
    for start in range(0, len(prompts), args.batch):
        chunk = prompts[start : start + args.batch]
        ids = [encode_chat(tokenizer, messages, chat=bool(tokenizer.chat_template)) for _, messages in chunk]
        batches.append((chunk, {k: v.to(model.device) for k, v in left_padded(ids, tokenizer.pad_token_id).items()}))
    greedy_s, jacobi_s = [float("inf")] * len(batches), [float("inf")] * len(batches)
    progress = tqdm(total=len(prompts) * args.rounds, desc=label, unit="prompt", file=sys.stderr)
    loaded.decode(batches[0][1], args.max_new_tokens)  # untimed, at full length
    loaded.decode(batches[0][1], args.max_new_tokens, settings)
    for round_ in range(args.rounds):
        for b, (chunk, inputs) in enumerate(batches):
            greedy = loaded.decode(inputs, args.max_new_tokens)
            jacobi = loaded.decode(inputs, args.max_new_tokens, settings)
            greedy_s[b], jacobi_s[b] = min(greedy_s[b], greedy.seconds), min(jacobi_s[b], jacobi.seconds)
            if round_ == 0:
                same = jacobi.same_as(greedy)
                for i, (prompt_id, _) in enumerate(chunk):
                    row = Row(prompt_id, greedy.new_tokens[i], greedy.forwards[i], jacobi.forwards[i], same[i])
                    run.rows.append(row)
            progress.update(len(chunk))
    progress.close()
    run.greedy_s, run.jacobi_s = sum(greedy_s), sum(jacobi_s)
    return run


def run_demo(args: argparse.Namespace) -> int:
    """Greedy vs Jacobi per prompt and per model, then the models side by side; exit 1 if any output differs."""
    prompts = load_source_prompts(args)
    args.dtype = resolve_dtype(args.dtype)
    side_by_side = args.model is None and not args.jacobi_forcing and args.adapter is None
    loaded = load_model(args.model, args.dtype, args.jacobi_forcing, args.adapter)
    settings = demo_settings(args, loaded)
    print(
        "# hf-jacobi demo: greedy vs Jacobi decoding"
        + (", untrained vs Jacobi Forcing\n" if side_by_side else "\n")
        + f"\n{loaded.describe(args.dtype)}\n"
        f"prompts: first {args.prompts} of {args.prompt_source!r} ({args.split}) as chat turns, max new tokens "
        f"{args.max_new_tokens}, batch {args.batch}\nJacobi: {describe_settings(settings)}\n"
        f"wall time: each call's fastest of {args.rounds} round(s), after an untimed one\n"
        "forwards are decoding forwards, prefill excluded (greedy: new tokens - 1)\n"
    )
    label = TRAINED if args.jacobi_forcing else (UNTRAINED if args.model is None else str(args.model))
    runs = [run_model(loaded, label, prompts, settings, args)]
    quality = side_by_side and not args.no_quality
    samples = [sample_quality(loaded, None, UNTRAINED, args)] if quality else []
    if side_by_side:
        trained = with_jacobi_forcing(loaded)  # merges in place: the base's figures are taken before
        runs.append(run_model(trained, TRAINED, prompts, settings, args))
        if quality:
            samples.append(sample_quality(trained, samples[0], TRAINED, args))
    exact = args.dtype == "float32"
    for run in runs:
        report = demo_report(run.rows, run.greedy_s, run.jacobi_s, settings.block_size, exact)
        print(f"## {run.label}\n\n{report}\n")
    if len(runs) > 1:
        print(f"## side by side\n\n{comparison_table(runs)}\n\n{steadiness(runs)}\n")
    if samples:
        from ..quality.report import markdown_table

        print(
            f"## answer quality: greedy answers to plain chat requests (held out)\n\n{markdown_table(samples, samples[0])}\n"
        )
    identical = all(run.identical for run in runs)
    if exact:
        print(f"all outputs identical to greedy: {'yes' if identical else 'NO'}")
    else:
        print(f"all outputs identical to {args.dtype} greedy: {'yes' if identical else 'no'} ({ROUNDING_NOTE})")
    rows = [row for run in runs for row in run.rows]
    return greedy_verdict(args.dtype, sum(row.identical for row in rows), len(rows))[1]


def sample_quality(loaded: LoadedModel, base, label: str, args: argparse.Namespace):
    """Quality figures of `loaded`'s greedy answers to the demo's requests (`quality.protocol.demo_protocol`),
    scored by the base model: `base` is the base's own result, None when `loaded` is the base. The base is loaded
    afresh for a trained model, whose weights replaced the base's in place."""
    from ..quality.protocol import demo_protocol, measure_model

    protocol = demo_protocol(loaded.tokenizer, args.max_new_tokens, max(args.batch, 8))
    scorer = loaded if base is None else load_model(args.model, args.dtype)
    return measure_model(label, loaded.model, scorer.model, loaded.tokenizer, protocol, base)


def comparison_table(runs: list[ModelRun]) -> str:
    """One line per model: what Jacobi Forcing changes in forwards and in wall time, on the same prompts."""
    lines = [
        "| model | new tokens | tokens/forward | forwards saved | greedy tok/s | Jacobi tok/s | Jacobi vs greedy | "
        "identical |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for run in runs:
        greedy = sum(row.greedy_forwards for row in run.rows)
        jacobi = sum(row.jacobi_forwards for row in run.rows)
        saved = f"{100 * (1 - jacobi / greedy):.1f}%" if greedy else "n/a"
        lines.append(
            f"| {run.label} | {run.tokens} | {per_forward(run.tokens, jacobi)} | {saved} | "
            f"{run.tokens / run.greedy_s:.1f} | {run.tokens / run.jacobi_s:.1f} | "
            f"{run.greedy_s / run.jacobi_s:.2f}x | {'yes' if run.identical else 'no'} |"
        )
    return "\n".join(lines)


ROUNDS = 3
"""Timed rounds by default: enough for each call to meet one fast spell of a machine whose speed drifts."""

STEADY = 0.10
"""How far apart the greedy rates of two same-shaped models may be before the demo calls its timings unsteady."""


def steadiness(runs: list[ModelRun], tolerance: float = STEADY) -> str:
    """Whether the machine ran at one speed through the demo: the untrained and the trained model have the same
    architecture and shapes, so their greedy rates differ only when something else changed the machine's speed."""
    rates = [run.tokens / run.greedy_s for run in runs]
    spread = max(rates) / min(rates) - 1
    said = " vs ".join(f"{rate:.1f}" for rate in rates)
    if spread <= tolerance:
        return f"timings steady: greedy {said} tokens/s for the same architecture ({100 * spread:.0f}% apart)"
    return (
        f"timings UNSTEADY: greedy {said} tokens/s for the same architecture ({100 * spread:.0f}% apart, more than "
        f"{100 * tolerance:.0f}%): the machine's speed changed during the demo (another process, a clock change); "
        "compare each model's Jacobi with its own greedy, or run the demo again"
    )


def wall_time_verdict(greedy_s: float, jacobi_s: float, block_size: int) -> str:
    """The wall-time speedup, said plainly when it is a slowdown: fewer forwards only pay off where a wide forward
    costs about as much as a one-token one, which the forward counts alone cannot show."""
    speedup = greedy_s / jacobi_s if jacobi_s > 0 else float("inf")
    if speedup >= 1:
        return f"wall time: Jacobi {speedup:.2f}x faster than greedy on this machine"
    return (
        f"wall time: Jacobi was {1 / speedup:.2f}x SLOWER than greedy on this machine: it saves forwards, but each "
        f"of its forwards holds a block of {block_size} tokens per prompt, which costs more than a one-token forward "
        "where the forward is compute-bound (a CPU, or a GPU at a large batch); `hf-jacobi tune` measures whether "
        "any setting pays off here"
    )


def demo_report(rows: list[Row], greedy_s: float, jacobi_s: float, block_size: int, exact: bool = True) -> str:
    """The Markdown table, the totals, the wall-time verdict and the verdict on losslessness (`exact`: float32, where
    every output must be greedy's; otherwise the count of those that are)."""
    lines = [
        "| prompt | new tokens | forwards greedy | forwards Jacobi | tokens/forward (Jacobi) | identical |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.task_id} | {row.tokens} | {row.greedy_forwards} | {row.jacobi_forwards} | "
            f"{per_forward(row.tokens, row.jacobi_forwards)} | {'yes' if row.identical else 'no'} |"
        )
    tokens = sum(row.tokens for row in rows)
    greedy = sum(row.greedy_forwards for row in rows)
    jacobi = sum(row.jacobi_forwards for row in rows)
    saved = f"{100 * (1 - jacobi / greedy):.1f}%" if greedy else "n/a"
    all_identical = all(row.identical for row in rows)
    lines.append(
        f"| **total** | {tokens} | {greedy} | {jacobi} | {per_forward(tokens, jacobi)} | "
        f"{'yes' if all_identical else 'no'} |"
    )
    lines += [
        "",
        f"total: {tokens} new tokens, {greedy} greedy forwards, {jacobi} Jacobi forwards, "
        f"{per_forward(tokens, jacobi)} tokens per Jacobi forward, forwards saved {saved} "
        f"(wall time {greedy_s / jacobi_s:.2f}x greedy's speed)",
        f"wall time: greedy {greedy_s:.2f} s ({tokens / greedy_s:.1f} tokens/s), "
        f"Jacobi {jacobi_s:.2f} s ({tokens / jacobi_s:.1f} tokens/s)",
        wall_time_verdict(greedy_s, jacobi_s, block_size),
        f"outputs identical to greedy: {'yes' if all_identical else 'NO'}"
        if exact
        else f"outputs identical to greedy in this dtype: {sum(row.identical for row in rows)} of {len(rows)}",
    ]
    return "\n".join(lines)


def add_parser(commands) -> None:
    demo = commands.add_parser(
        "demo", help="greedy vs Jacobi on held-out prompts, the untrained model beside the Jacobi Forcing one"
    )
    add_prompt_source_arguments(demo, "packages", "test", "held out of the shipped adapter's training")
    demo.add_argument("--batch", type=positive_int, default=1, help="prompts per left-padded batch (default 1)")
    add_model_arguments(demo, max_new_tokens=128, dtype=AUTO_DTYPE)
    demo.add_argument(
        "--rounds",
        type=positive_int,
        default=ROUNDS,
        help=f"timed rounds over the prompts; each call counts at its fastest round (default {ROUNDS})",
    )
    demo.add_argument(
        "--no-quality",
        action="store_true",
        help="skip the answer-quality check of the side-by-side run (8 plain chat requests per model, 1-2 minutes)",
    )
    demo.epilog = (
        "With neither --model nor --jacobi-forcing, the embedded model runs twice: untrained, then with the shipped "
        "Jacobi Forcing adapter; the Jacobi settings default to that adapter's tuned ones, for both."
    )
    demo.set_defaults(handler=run_demo)
