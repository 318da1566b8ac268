"""hf_jacobi's own `generate(decoding="jacobi")` on the prompts of lab/benchmarks/vllm_cpu.py, in left-padded batches of
`--concurrency`, with the merged folder's Jacobi defaults (the shipped adapter's: block 8, recycling pool 4).

A child of vllm_cpu.py (`--methods hf-generate`), run with the main environment's Python (`--hf-python`, default
.venv/bin/python), one thread; prints one `RESULT` line in vllm_cpu.py's format: the outputs cut after their first
EOS, the wall time of the batches after a warm-up, and `accepted` = decoded tokens - decode forwards (each row's
`forward_passes`), so that vllm_cpu.py's tokens per decode forward reads the same for it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from hf_jacobi import enable_jacobi


def batch_generate(model, batch: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], int]:
    """One left-padded batch: each row's new tokens up to its first EOS, and the batch's decode forwards."""
    config = model.generation_config
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else config.eos_token_id[0]
    pad = eos if config.pad_token_id is None else config.pad_token_id
    width = max(len(p) for p in batch)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            decoding="jacobi",
            return_dict_in_generate=True,
        )
    rows = []
    for tokens in out.sequences[:, width:].tolist():
        rows.append(tokens[: tokens.index(eos) + 1] if eos in tokens else tokens)
    return rows, int(out.forward_passes.sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--prompts-file", type=Path, required=True)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    prompts = json.loads(args.prompts_file.read_text())
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    enable_jacobi(model)
    batch_generate(model, prompts[:1], 16)  # warm-up
    tokens, forwards = [], 0
    start = time.perf_counter()
    for first in range(0, len(prompts), args.concurrency):
        rows, batch_forwards = batch_generate(model, prompts[first : first + args.concurrency], args.max_new_tokens)
        tokens += rows
        forwards += batch_forwards
    seconds = time.perf_counter() - start
    decoded = sum(len(t) for t in tokens) - len(tokens)
    run = {"tokens": tokens, "seconds": seconds, "accepted": decoded - forwards}
    print("RESULT " + json.dumps({f"concurrent{args.concurrency}": run}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
