"""How many tokens per forward Jacobi decoding accepts, per variant, and what the loop costs beyond the model.

For each prompt, greedy generation is timed once; then every (variant, block size) pair is timed (prefill included)
and its output compared with greedy's. The variants add recycling, extra blocks or both to plain Jacobi. The loop's
time per iteration, (Jacobi wall time - prefill time) / forwards, is divided by the time of a bare model forward over
as many tokens as the iterations fed on average (chain and candidate branches), with a KV cache of the same length.
That ratio is the loop's own overhead (its Python, its 4D masks, its verification and pool); 1.00 would mean the loop
costs nothing beyond the model.

Run: python -m lab overhead [--prompts 8 --max-new-tokens 128 --block-sizes 16 --variants plain both]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from hf_jacobi.bench.common import VARIANTS, ForwardCounts, variant_config
from hf_jacobi.bench.report import markdown
from hf_jacobi.bench.roofline import block_forward_seconds, timed_prefill
from hf_jacobi.decoding.config import JacobiConfig
from hf_jacobi.loading import eos_token_ids
from hf_jacobi.measurement import Decoded, decode

from .forward_cost import forward_cost_curve


@dataclass
class PromptResult(ForwardCounts):
    task_id: str
    variant: str
    block_size: int
    prompt_tokens: int
    new_tokens: int
    forwards: int
    forward_tokens: int
    recycled_tokens: int
    identical: bool
    greedy_s: float
    jacobi_s: float
    prefill_s: float
    iteration_s: float
    bare_forward_s: float


@dataclass
class GreedyRun:
    """One prompt's greedy reference: its inputs, its measured decoding and its prefill time."""

    task_id: str
    inputs: dict
    decoded: Decoded
    prefill_s: float

    @property
    def seconds(self) -> float:
        return self.decoded.seconds


@torch.inference_mode()
def run_greedy(model, tokenizer, task_id: str, prompt: str, max_new_tokens: int) -> GreedyRun:
    inputs = dict(tokenizer(prompt, return_tensors="pt").to(model.device))
    decoded = decode(model, inputs, max_new_tokens, eos_ids=eos_token_ids(model.generation_config))
    _, prefill_s = timed_prefill(model, {"input_ids": inputs["input_ids"]})
    return GreedyRun(task_id, inputs, decoded, prefill_s)


@torch.inference_mode()
def measure_variant(
    model, greedy: GreedyRun, variant: str, block_size: int, max_new_tokens: int, repeats: int
) -> PromptResult:
    eos_ids = eos_token_ids(model.generation_config)
    jacobi = decode(model, greedy.inputs, max_new_tokens, variant_config(variant, block_size), eos_ids=eos_ids)
    jacobi_s = jacobi.seconds
    prompt_len = greedy.inputs["input_ids"].shape[1]
    new_tokens, forwards, forward_tokens = jacobi.new_tokens[0], jacobi.forwards[0], jacobi.forward_tokens[0]
    # The bare forward has the iterations' mean width and runs at the mean cache length they saw: prompt plus half
    # the new tokens.
    context = jacobi.sequences[:, : prompt_len + new_tokens // 2]
    width = max(round(forward_tokens / max(forwards, 1)), 1)
    return PromptResult(
        task_id=greedy.task_id,
        variant=variant,
        block_size=block_size,
        prompt_tokens=prompt_len,
        new_tokens=new_tokens,
        forwards=forwards,
        forward_tokens=forward_tokens,
        recycled_tokens=jacobi.recycled_tokens[0],
        identical=jacobi.same_as(greedy.decoded)[0],
        greedy_s=greedy.seconds,
        jacobi_s=jacobi_s,
        prefill_s=greedy.prefill_s,
        iteration_s=(jacobi_s - greedy.prefill_s) / max(forwards, 1),
        bare_forward_s=block_forward_seconds(model, context, width, repeats),
    )


def summarize(results: list[PromptResult]) -> list[dict]:
    """One row per (variant, block size): totals over prompts (ratios of sums, so long outputs weigh more)."""
    rows = []
    keys = sorted({(r.variant, r.block_size) for r in results}, key=lambda k: (list(VARIANTS).index(k[0]), k[1]))
    plain_tpf = {}
    for variant, block_size in keys:
        group = [r for r in results if r.variant == variant and r.block_size == block_size]
        tokens = sum(r.new_tokens for r in group)
        forwards = sum(r.forwards for r in group)
        iteration = sum(r.jacobi_s - r.prefill_s for r in group) / forwards
        bare = sum(r.bare_forward_s * r.forwards for r in group) / forwards
        tpf = tokens / forwards
        if variant == "plain":
            plain_tpf[block_size] = tpf
        rows.append(
            {
                "variant": variant,
                "block_size": block_size,
                "prompts": len(group),
                "new_tokens": tokens,
                "forwards": forwards,
                "tokens_per_forward": tpf,
                "vs_plain": tpf / plain_tpf[block_size] if block_size in plain_tpf else None,
                "mean_width": sum(r.forward_tokens for r in group) / forwards,
                "recycled_tokens": sum(r.recycled_tokens for r in group),
                "iteration_ms": 1000 * iteration,
                "bare_forward_ms": 1000 * bare,
                "loop_overhead": iteration / bare,
                "greedy_tok_s": tokens / sum(r.greedy_s for r in group),
                "jacobi_tok_s": tokens / sum(r.jacobi_s for r in group),
                "all_identical": all(r.identical for r in group),
            }
        )
    return rows


@dataclass
class OverheadRun:
    """Per-prompt results, their summary rows, and the forward cost curve (empty unless asked for)."""

    results: list[PromptResult]
    rows: list[dict]
    curve: list[dict]
    context_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.rows, "forward_costs": self.curve, "prompts": [asdict(r) for r in self.results]}


@torch.inference_mode()
def run_overhead(
    model,
    tokenizer,
    prompts: list[tuple[str, str]],
    variants: list[str],
    block_sizes: list[int],
    max_new_tokens: int,
    repeats: int,
    forward_costs: Sequence[int] = (),
    progress: bool = True,
) -> OverheadRun:
    """Greedy once per (task_id, prompt), then every (variant, block size) on every prompt; `model` must have Jacobi
    enabled. The cost curve, when `forward_costs` names widths, runs on the first prompt's cache at mid-generation."""
    warm = tokenizer(prompts[0][1], return_tensors="pt").to(model.device)  # first calls pay one-time allocations
    model.generate(**warm, max_new_tokens=4, do_sample=False, **JacobiConfig(block_size=4).to_generate_kwargs())
    greedy = [run_greedy(model, tokenizer, task, prompt, max_new_tokens) for task, prompt in prompts]
    configs = [(v, b) for v in variants for b in block_sizes]
    results = [
        measure_variant(model, reference, variant, block_size, max_new_tokens, repeats)
        for variant, block_size in tqdm(configs, desc="configurations", disable=not progress)
        for reference in greedy
    ]
    context = greedy[0].decoded.sequences[:, : greedy[0].inputs["input_ids"].shape[1] + max_new_tokens // 2]
    curve = forward_cost_curve(model, context, sorted({1, *forward_costs}), repeats) if forward_costs else []
    return OverheadRun(results, summarize(results), curve, context.shape[1])


def markdown_table(rows: list[dict]) -> str:
    """One line per (variant, block size)."""
    headers = ["variant", "block", "tokens/forward", "vs plain", "mean width", "recycled tokens", "iteration ms"]
    headers += ["bare forward ms", "loop overhead", "greedy tok/s", "jacobi tok/s", "identical"]
    cells = [
        [
            r["variant"],
            r["block_size"],
            f"{r['tokens_per_forward']:.3f}",
            "-" if r["vs_plain"] is None else f"{r['vs_plain']:.3f}x",
            f"{r['mean_width']:.1f}",
            r["recycled_tokens"],
            f"{r['iteration_ms']:.1f}",
            f"{r['bare_forward_ms']:.1f}",
            f"{r['loop_overhead']:.3f}",
            f"{r['greedy_tok_s']:.1f}",
            f"{r['jacobi_tok_s']:.1f}",
            "yes" if r["all_identical"] else "NO",
        ]
        for r in rows
    ]
    return markdown(headers, cells)


def cost_curve_table(curve: list[dict]) -> str:
    """The forward cost curve: milliseconds and multiples of a one-token forward. A forward of w tokens costs as much
    as that multiple of greedy steps, so it is also the tokens per forward a setting of that width must reach to break
    even with greedy decoding in wall time (before the loop's own overhead)."""
    cells = [[p["tokens"], f"{p['forward_ms']:.1f}", f"{p['vs_one_token']:.2f}"] for p in curve]
    return markdown(["tokens", "forward ms", "x one-token forward = break-even tokens/forward"], cells)
