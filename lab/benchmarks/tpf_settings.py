"""Forwards and tokens per forward of GPU-minded Jacobi settings with the shipped adapter, counted on any machine.

In float32 the tokens, and so the forwards each setting takes, do not depend on the device (2 blocks of 16 +
recycling took as many forwards for these 8 prompts on a CPU as on a GPU), so which settings could reach a speed
target on a GPU can be counted here: a setting's speedup over CUDA-graph greedy is at most its forward saving over the
cost of its width on the GPU's forward-cost curve (docs/results/gpu-h200-grade). Widths are each setting's widest
forward (chain plus candidates).

    OMP_NUM_THREADS=1 python lab/benchmarks/tpf_settings.py --output docs/results/gpu-h200-shipped/tpf-settings-cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from hf_jacobi import JacobiConfig, load_default_model
from hf_jacobi.data.prompts import encode_prompts, load_prompts
from hf_jacobi.decoding.checks import widest_forward

SETTINGS = {
    "block 16, 2 blocks, pool 4": JacobiConfig(block_size=16, num_blocks=2, ngram_pool_size=4),
    "block 16, 2 blocks, pool 8": JacobiConfig(block_size=16, num_blocks=2, ngram_pool_size=8),
    "block 16, 3 blocks, pool 4": JacobiConfig(block_size=16, num_blocks=3, ngram_pool_size=4),
    "block 32, 2 blocks, pool 4": JacobiConfig(block_size=32, num_blocks=2, ngram_pool_size=4),
    "block 16, pool 8": JacobiConfig(block_size=16, ngram_pool_size=8),
    "block 8, 2 blocks, pool 4": JacobiConfig(block_size=8, num_blocks=2, ngram_pool_size=4),
    "block 8, pool 8": JacobiConfig(block_size=8, ngram_pool_size=8),
    "block 8, pool 4 (the shipped default)": JacobiConfig(block_size=8, ngram_pool_size=4),
}


def count(model, prompts: list[list[int]], greedy: list[torch.Tensor], config: JacobiConfig, max_new_tokens: int):
    """Forwards and tokens of one setting over the prompts, one at a time (batch 1), checked against greedy's."""
    forwards = tokens = identical = 0
    for prompt, reference in zip(prompts, greedy, strict=True):
        ids = torch.tensor([prompt])
        kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": max_new_tokens, "do_sample": False}
        out = model.generate(ids, return_dict_in_generate=True, **config.to_generate_kwargs(), **kwargs)
        identical += torch.equal(out.sequences, reference)
        forwards += int(out.forward_passes[0])
        tokens += out.sequences.shape[1] - ids.shape[1]  # new tokens per decoding forward, as bench counts them
    width = sum(widest_forward(config, len(prompts[0]), max_new_tokens))
    return {"forwards": forwards, "tokens_per_forward": tokens / forwards, "width": width, "identical": identical}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=8, help="`packages` test prompts (default 8, bench_gpu's)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.limit < 1 or args.max_new_tokens < 1:
        parser.error(f"--limit and --max-new-tokens must be >= 1, got {args.limit} and {args.max_new_tokens}")
    model, tokenizer = load_default_model(jacobi_forcing=True)
    prompts = encode_prompts(load_prompts("packages", split="test", limit=args.limit), tokenizer)
    rows = {}
    print("| setting | widest forward | forwards | tokens/forward | identical |\n|---|---:|---:|---:|---:|")
    with torch.inference_mode():
        greedy = [
            model.generate(torch.tensor([p]), max_new_tokens=args.max_new_tokens, do_sample=False, decoding="greedy")
            for p in prompts
        ]
        for name, config in SETTINGS.items():
            row = rows[name] = count(model, prompts, greedy, config, args.max_new_tokens)
            print(
                f"| {name} | {row['width']} | {row['forwards']} | {row['tokens_per_forward']:.2f} | "
                f"{row['identical']}/{len(prompts)} |",
                flush=True,
            )
    if args.output is not None:
        record = {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "dtype": "float32", "rows": rows}
        args.output.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
