"""How many tokens per forward Jacobi decoding accepts, per variant, and what the loop costs beyond the model.

For each prompt, greedy generation is timed once; then every (variant, block size) pair is timed (prefill included)
and its output compared with greedy's. The variants add recycling, extra blocks or both to plain Jacobi. The loop's
time per iteration, (Jacobi wall time - prefill time) / forwards, is divided by the time of a bare model forward over
as many tokens as the iterations fed on average (chain and candidate branches), with a KV cache of the same length.
That ratio is the loop's own overhead (its Python, its 4D masks, its verification and pool); 1.00 would mean the loop
costs nothing beyond the model.

Run: python -m hf_jacobi.bench.overhead [--prompts 8 --max-new-tokens 128 --block-sizes 16 --variants plain both]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from hf_jacobi.bench.common import VARIANTS, ForwardCounts, humaneval_prompts, jacobi_kwargs, positive_int, timed
from hf_jacobi.decoding.generate import enable_jacobi


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


@torch.inference_mode()
def timed_prefill(model, input_ids: torch.Tensor) -> tuple[DynamicCache, float]:
    """A fresh cache filled with input_ids, and the seconds that took."""
    cache = DynamicCache()
    _, seconds = timed(lambda: model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1))
    return cache, seconds


@torch.inference_mode()
def block_forward_seconds(model, context: torch.Tensor, width: int, repeats: int) -> float:
    """Median seconds of one bare forward of `width` tokens on a cache holding `context` (cropped back each time)."""
    cache, _ = timed_prefill(model, context)
    block = context.repeat(1, width // context.shape[1] + 1)[:, :width]
    times = []
    for _ in range(repeats):
        _, seconds = timed(lambda: model(input_ids=block, past_key_values=cache, use_cache=True, logits_to_keep=0))
        cache.crop(-width)
        times.append(seconds)
    return statistics.median(times)


def forward_cost_curve(model, context: torch.Tensor, widths: list[int], repeats: int) -> list[dict]:
    """Median time of a bare forward of each width on the same cache, and its ratio to a one-token forward."""
    one = block_forward_seconds(model, context, 1, repeats)
    rows = []
    for width in widths:
        seconds = one if width == 1 else block_forward_seconds(model, context, width, repeats)
        rows.append({"tokens": width, "forward_ms": 1000 * seconds, "vs_one_token": seconds / one})
    return rows


@dataclass
class GreedyRun:
    """One prompt's greedy reference: its inputs, output, wall time and prefill time."""

    task_id: str
    inputs: dict
    sequences: torch.Tensor
    seconds: float
    prefill_s: float


@torch.inference_mode()
def run_greedy(model, tokenizer, task_id: str, prompt: str, max_new_tokens: int) -> GreedyRun:
    inputs = dict(tokenizer(prompt, return_tensors="pt").to(model.device))
    sequences, seconds = timed(lambda: model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False))
    _, prefill_s = timed_prefill(model, inputs["input_ids"])
    return GreedyRun(task_id, inputs, sequences, seconds, prefill_s)


@torch.inference_mode()
def measure_variant(
    model, greedy: GreedyRun, variant: str, block_size: int, max_new_tokens: int, repeats: int
) -> PromptResult:
    out, jacobi_s = timed(
        lambda: model.generate(
            **greedy.inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            decoding="jacobi",
            return_dict_in_generate=True,
            **jacobi_kwargs(variant, block_size),
        )
    )
    prompt_len = greedy.inputs["input_ids"].shape[1]
    new_tokens = out.sequences.shape[1] - prompt_len
    forwards = int(out.forward_passes[0])
    forward_tokens = int(out.forward_tokens[0])
    # The bare forward has the iterations' mean width and runs at the mean cache length they saw: prompt plus half
    # the new tokens.
    context = out.sequences[:, : prompt_len + new_tokens // 2]
    width = max(round(forward_tokens / max(forwards, 1)), 1)
    return PromptResult(
        task_id=greedy.task_id,
        variant=variant,
        block_size=block_size,
        prompt_tokens=prompt_len,
        new_tokens=new_tokens,
        forwards=forwards,
        forward_tokens=forward_tokens,
        recycled_tokens=int(out.recycled_tokens[0]),
        identical=bool(torch.equal(out.sequences, greedy.sequences)),
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


def markdown_table(rows: list[dict]) -> str:
    header = (
        "| variant | block | tokens/forward | vs plain | mean width | recycled tokens | iteration ms | bare forward ms "
        "| loop overhead | greedy tok/s | jacobi tok/s | identical |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = []
    for r in rows:
        vs_plain = "-" if r["vs_plain"] is None else f"{r['vs_plain']:.3f}x"
        lines.append(
            f"| {r['variant']} | {r['block_size']} | {r['tokens_per_forward']:.3f} | {vs_plain} "
            f"| {r['mean_width']:.1f} | {r['recycled_tokens']} | {r['iteration_ms']:.1f} | {r['bare_forward_ms']:.1f} "
            f"| {r['loop_overhead']:.3f} | {r['greedy_tok_s']:.1f} | {r['jacobi_tok_s']:.1f} "
            f"| {'yes' if r['all_identical'] else 'NO'} |"
        )
    return "\n".join([header, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=positive_int, default=8, help="HumanEval problems to run (the first N)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--block-sizes", type=positive_int, nargs="+", default=[16])
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=["plain"], help="Jacobi variants to measure"
    )
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed repeats of the bare forward")
    parser.add_argument(
        "--forward-costs",
        type=positive_int,
        nargs="*",
        default=[],
        metavar="TOKENS",
        help="also time bare forwards of these widths against a one-token forward (the cost curve)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write per-prompt results and the summary here")
    args = parser.parse_args(argv)

    from hf_jacobi.models import load_default_model

    torch.manual_seed(0)
    model, tokenizer = load_default_model()
    enable_jacobi(model)
    prompts = humaneval_prompts(args.prompts)
    with torch.inference_mode():  # warm-up: first calls pay one-time allocation costs
        warm = tokenizer(prompts[0][1], return_tensors="pt")
        model.generate(**warm, max_new_tokens=4, do_sample=False, decoding="jacobi", jacobi_block_size=4)
    greedy = [run_greedy(model, tokenizer, task, prompt, args.max_new_tokens) for task, prompt in prompts]
    configs = [(v, b) for v in args.variants for b in args.block_sizes]
    results = [
        measure_variant(model, reference, variant, block_size, args.max_new_tokens, args.repeats)
        for variant, block_size in tqdm(configs, desc="configurations")
        for reference in greedy
    ]
    rows = summarize(results)
    print(
        f"SmolLM2-135M-Instruct (embedded, float32, sdpa), {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; HumanEval prompts 0-{args.prompts - 1}, "
        f"max_new_tokens={args.max_new_tokens}, batch 1, prefill included in tok/s; variants: "
        + "; ".join(f"{v} = {VARIANTS[v] or 'block only'}" for v in args.variants)
    )
    print(markdown_table(rows))
    curve = []
    if args.forward_costs:
        context = greedy[0].sequences[:, : greedy[0].inputs["input_ids"].shape[1] + args.max_new_tokens // 2]
        curve = forward_cost_curve(model, context, sorted(set([1, *args.forward_costs])), args.repeats)
        print(f"\nForward cost against tokens in the forward (cache of {context.shape[1]} tokens):\n")
        print("| tokens | forward ms | x one-token forward |\n|---|---|---|")
        for point in curve:
            print(f"| {point['tokens']} | {point['forward_ms']:.1f} | {point['vs_one_token']:.2f} |")
    if args.json:
        summary = {"summary": rows, "forward_costs": curve, "prompts": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if all(r["all_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
