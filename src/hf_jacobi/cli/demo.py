"""`hf-jacobi demo`: greedy vs Jacobi forwards on HumanEval prompts, and the check that every output is identical."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ..bench.common import timed
from ..data.humaneval import MissingDataError, humaneval_prompts
from .common import (
    CliError,
    add_model_arguments,
    describe_settings,
    jacobi_config,
    load_model,
    new_token_counts,
    per_forward,
    positive_int,
    warm_up,
)


@dataclass
class Row:
    task_id: str
    tokens: int
    greedy_forwards: int
    jacobi_forwards: int
    identical: bool


def run_demo(args: argparse.Namespace) -> int:
    """Greedy vs Jacobi on HumanEval completions: a Markdown table of forwards per prompt, and a lossless check."""
    try:
        prompts = humaneval_prompts(args.prompts)
    except MissingDataError as error:
        raise CliError(str(error)) from error
    if len(prompts) < args.prompts:
        raise CliError(f"--prompts {args.prompts}: HumanEval has only {len(prompts)} problems")
    loaded = load_model(args.model, args.dtype, args.jacobi_forcing)
    model, tokenizer = loaded.model, loaded.tokenizer
    settings = jacobi_config(args)
    print(f"# hf-jacobi demo: greedy vs Jacobi decoding on HumanEval\n\n{loaded.describe(args.dtype)}")
    print(
        f"settings: first {args.prompts} HumanEval prompts (raw completion, no chat template), "
        f"{describe_settings(settings)}, max new tokens {args.max_new_tokens}, batch {args.batch}\n"
        "forwards are decoding forwards, prefill excluded (greedy: new tokens - 1)\n"
    )

    rows: list[Row] = []
    greedy_s = jacobi_s = 0.0
    warmed = False
    progress = tqdm(total=len(prompts), desc="prompts", unit="prompt", file=sys.stderr)
    for start in range(0, len(prompts), args.batch):
        chunk = prompts[start : start + args.batch]
        encoded = tokenizer([prompt for _, prompt in chunk], return_tensors="pt", padding=True)
        inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        if not warmed:
            warm_up(loaded, inputs)
            warmed = True
        greedy, seconds = timed(
            lambda inputs=inputs: model.generate(
                **inputs, max_new_tokens=args.max_new_tokens, do_sample=False, decoding="greedy"
            )
        )
        greedy_s += seconds
        jacobi, seconds = timed(
            lambda inputs=inputs: model.generate(
                **inputs,
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                return_dict_in_generate=True,
                **settings.to_generate_kwargs(),
            )
        )
        jacobi_s += seconds
        same_shape = greedy.shape == jacobi.sequences.shape
        tokens = new_token_counts(greedy, inputs["input_ids"].shape[1], loaded.eos_ids)
        for i, (task_id, _) in enumerate(chunk):
            identical = same_shape and torch.equal(greedy[i], jacobi.sequences[i])
            rows.append(Row(task_id, tokens[i], max(tokens[i] - 1, 0), int(jacobi.forward_passes[i]), identical))
        progress.update(len(chunk))
    progress.close()

    print(demo_report(rows, greedy_s, jacobi_s, settings.block_size))
    return 0 if all(row.identical for row in rows) else 1


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


def demo_report(rows: list[Row], greedy_s: float, jacobi_s: float, block_size: int) -> str:
    """The Markdown table, the totals, the wall-time verdict and the verdict on losslessness."""
    lines = [
        "| task_id | new tokens | forwards greedy | forwards Jacobi | tokens/forward (Jacobi) | identical |",
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
        f"all outputs identical to greedy: {'yes' if all_identical else 'NO'}",
    ]
    return "\n".join(lines)


def add_parser(commands) -> None:
    demo = commands.add_parser("demo", help="greedy vs Jacobi forwards on HumanEval prompts")
    demo.add_argument("--prompts", type=positive_int, default=4, help="first N HumanEval prompts (default 4)")
    demo.add_argument("--batch", type=positive_int, default=1, help="prompts per left-padded batch (default 1)")
    add_model_arguments(demo, max_new_tokens=64)
    demo.set_defaults(handler=run_demo)
