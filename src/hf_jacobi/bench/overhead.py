"""How many tokens per forward plain Jacobi decoding accepts, and what the loop costs beyond the model's forwards.

For each prompt: greedy and Jacobi generation are timed (prefill included), the outputs are compared, and the
Jacobi loop's time per iteration, (Jacobi wall time - prefill time) / forwards, is divided by the time of a bare
model forward over the same number of tokens with a KV cache of the same length. That ratio is the loop's own
overhead (its Python, its 4D masks, its verification); 1.00 would mean the loop costs nothing beyond the model.

Run: python -m hf_jacobi.bench.overhead [--prompts 8 --max-new-tokens 128 --block-sizes 16]
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

from hf_jacobi.bench.common import humaneval_prompts, positive_int, timed
from hf_jacobi.decoding.generate import enable_jacobi


@dataclass
class PromptResult:
    task_id: str
    block_size: int
    prompt_tokens: int
    new_tokens: int
    forwards: int
    identical: bool
    greedy_s: float
    jacobi_s: float
    prefill_s: float
    iteration_s: float
    bare_forward_s: float

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)


@torch.inference_mode()
def timed_prefill(model, input_ids: torch.Tensor) -> tuple[DynamicCache, float]:
    """A fresh cache filled with input_ids, and the seconds that took."""
    cache = DynamicCache()
    _, seconds = timed(lambda: model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1))
    return cache, seconds


@torch.inference_mode()
def block_forward_seconds(model, context: torch.Tensor, block_size: int, repeats: int) -> float:
    """Median seconds of one bare forward of block_size tokens on a cache holding `context` (cropped back each time)."""
    cache, _ = timed_prefill(model, context)
    block = (
        context[:, -block_size:] if context.shape[1] >= block_size else context.repeat(1, block_size)[:, :block_size]
    )
    times = []
    for _ in range(repeats):
        _, seconds = timed(lambda: model(input_ids=block, past_key_values=cache, use_cache=True, logits_to_keep=0))
        cache.crop(-block_size)
        times.append(seconds)
    return statistics.median(times)


@torch.inference_mode()
def measure_prompt(model, tokenizer, task_id: str, prompt: str, block_size: int, max_new_tokens: int, repeats: int):
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    kwargs = dict(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    greedy, greedy_s = timed(lambda: model.generate(**kwargs))
    out, jacobi_s = timed(
        lambda: model.generate(**kwargs, decoding="jacobi", jacobi_block_size=block_size, return_dict_in_generate=True)
    )
    prompt_len = inputs["input_ids"].shape[1]
    new_tokens = out.sequences.shape[1] - prompt_len
    forwards = int(out.forward_passes[0])
    # The bare forward runs at the mean cache length the Jacobi iterations saw: prompt plus half the new tokens.
    context = out.sequences[:, : prompt_len + new_tokens // 2]
    _, prefill_s = timed_prefill(model, inputs["input_ids"])
    bare_s = block_forward_seconds(model, context, block_size, repeats)
    return PromptResult(
        task_id=task_id,
        block_size=block_size,
        prompt_tokens=prompt_len,
        new_tokens=new_tokens,
        forwards=forwards,
        identical=bool(torch.equal(out.sequences, greedy)),
        greedy_s=greedy_s,
        jacobi_s=jacobi_s,
        prefill_s=prefill_s,
        iteration_s=(jacobi_s - prefill_s) / max(forwards, 1),
        bare_forward_s=bare_s,
    )


def summarize(results: list[PromptResult]) -> list[dict]:
    """One row per block size: totals over prompts (ratios of sums, so long outputs weigh more)."""
    rows = []
    for block_size in sorted({r.block_size for r in results}):
        group = [r for r in results if r.block_size == block_size]
        tokens = sum(r.new_tokens for r in group)
        forwards = sum(r.forwards for r in group)
        iteration = sum(r.jacobi_s - r.prefill_s for r in group) / forwards
        bare = sum(r.bare_forward_s * r.forwards for r in group) / forwards
        rows.append(
            {
                "block_size": block_size,
                "prompts": len(group),
                "new_tokens": tokens,
                "forwards": forwards,
                "tokens_per_forward": tokens / forwards,
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
        "| block | prompts | new tokens | forwards | tokens/forward | iteration ms | bare forward ms | loop overhead "
        "| greedy tok/s | jacobi tok/s | identical |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [
        f"| {r['block_size']} | {r['prompts']} | {r['new_tokens']} | {r['forwards']} | {r['tokens_per_forward']:.3f} "
        f"| {r['iteration_ms']:.1f} | {r['bare_forward_ms']:.1f} | {r['loop_overhead']:.3f} | {r['greedy_tok_s']:.1f} "
        f"| {r['jacobi_tok_s']:.1f} | {'yes' if r['all_identical'] else 'NO'} |"
        for r in rows
    ]
    return "\n".join([header, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=positive_int, default=8, help="HumanEval problems to run (the first N)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--block-sizes", type=positive_int, nargs="+", default=[16])
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed repeats of the bare forward")
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
    results = [
        measure_prompt(model, tokenizer, task_id, prompt, block_size, args.max_new_tokens, args.repeats)
        for block_size in args.block_sizes
        for task_id, prompt in tqdm(prompts, desc=f"block size {block_size}")
    ]
    rows = summarize(results)
    print(
        f"SmolLM2-135M-Instruct (embedded, float32, sdpa), {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; HumanEval prompts 0-{args.prompts - 1}, "
        f"max_new_tokens={args.max_new_tokens}, batch 1, prefill included in tok/s"
    )
    print(markdown_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"summary": rows, "prompts": [asdict(r) for r in results]}, indent=2))
    return 0 if all(r["all_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
