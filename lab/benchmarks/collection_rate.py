"""The parallel collection method's rate on the CPU campaign's first prompts, split into its two phases.

Why: the CPU campaign's target is a rate in answer tokens of trajectory per second, and the method spends it in two places:
greedy generation of the batch (one decode step per token, every row at once) and the block iterations (about
n^2 / 2 query tokens per block of n). This times `block_trajectories` as `hf-jacobi collect --method parallel` runs
it (greedy answers generated, then iterated on the cache they filled), with the greedy phase timed apart, and counts
the iterations' query tokens, so that a change is read as fewer tokens or faster tokens.

    python lab/benchmarks/collection_rate.py --prompts 64 --dtype bfloat16 \\
        --output docs/results/campaign-cpu/collection-rate/parallel-64.json

The prompts are the first `--prompts` of the campaign's collection order (`--sample collection-order`:
recipes/smollm2-135m/data/campaign-cpu/train-order.parquet, shuffled, then sorted by length within chunks of 1,024, so
that a batch's prompts are about as long), or of its prompt set's training split as stored (`--sample prompt-set`:
the sample the campaign's own measurement times, `gpu_campaign.py --measure-prompts`, whose prompts range from ~70 to
~430 tokens), chat template applied, one batch; block 16, 128 new tokens, as the campaign collected. Time it on a
quiet machine: another torch job beside it cuts its figures sharply.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.reports import emit  # noqa: E402

RECIPE = ROOT / "recipes" / "smollm2-135m"
DATA = RECIPE / "data" / "campaign-cpu"
SAMPLES = ("collection-order", "prompt-set")


def _prompts(tokenizer, count: int, sample: str) -> list[list[int]]:
    import datasets
    import pyarrow.parquet as pq

    from hf_jacobi.data.prompts import encode_prompts

    if sample == "prompt-set":
        sys.path.insert(0, str(RECIPE))
        from campaign.prompts import PromptSet

        train = PromptSet.read(DATA / "prompts.parquet").dataset("train")
        return encode_prompts(train.select(range(min(count, len(train)))), tokenizer)
    table = pq.read_table(DATA / "train-order.parquet").slice(0, count).to_pydict()
    messages = [[{"role": "user", "content": text}] for text in table["prompt"]]
    return encode_prompts(
        datasets.Dataset.from_dict({"prompt_id": table["prompt_id"], "messages": messages}), tokenizer
    )


def measure(model, tokenizer, prompts: list[list[int]], args) -> dict:
    """One timed `block_trajectories` call with its greedy phase timed apart (after an untimed warm-up)."""
    from hf_jacobi.data import block_iterations
    from hf_jacobi.loading import eos_token_ids

    pad = model.generation_config.pad_token_id
    common = dict(pad_id=pad if pad is not None else 0, eos_ids=set(eos_token_ids(model.generation_config)))
    if args.check_first_wrong:
        common["check_first_wrong"] = True
    block_iterations.block_trajectories(model, prompts[:2], args.block_size, max_new_tokens=32, **common)
    greedy_seconds = []
    generate = block_iterations.greedy_answers

    def timed_greedy(*arguments, **keywords):
        start = time.perf_counter()
        found = generate(*arguments, **keywords)
        greedy_seconds.append(time.perf_counter() - start)
        return found

    block_iterations.greedy_answers = timed_greedy
    try:
        start = time.perf_counter()
        rows = block_iterations.block_trajectories(
            model, prompts, args.block_size, max_new_tokens=args.max_new_tokens, **common
        )
        seconds = time.perf_counter() - start
    finally:
        block_iterations.greedy_answers = generate
    tokens = sum(len(answer) for answer in rows.answers)
    queried = getattr(rows, "query_tokens", None)  # not counted before the count was added (an A/B against it)
    return {
        "rows": len(prompts),
        "answer_tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "greedy_seconds": round(greedy_seconds[0], 2),
        "iteration_seconds": round(seconds - greedy_seconds[0], 2),
        "forwards": rows.forwards,
        "query_tokens": queried,
        "query_tokens_per_answer_token": round(queried / tokens, 2) if queried is not None else None,
        "disagreements": rows.disagreements,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64, help="the first N prompts of the sample")
    parser.add_argument("--sample", choices=SAMPLES, default="collection-order", help="which prompts (see above)")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--check-first-wrong", action="store_true", help="query the last converged token too")
    parser.add_argument("--output", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.prompts < 1:
        parser.error(f"--prompts must be at least 1, got {args.prompts}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from hf_jacobi import load_default_model
    from hf_jacobi.decoding.cpu_info import cpu_description

    model, tokenizer = load_default_model(dtype=getattr(torch, args.dtype))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    report = {
        "command": "python lab/benchmarks/collection_rate.py " + " ".join(argv),
        "commit": commit.stdout.strip() or None,
        "cpu": cpu_description(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "dtype": args.dtype,
        "block_size": args.block_size,
        "max_new_tokens": args.max_new_tokens,
        "check_first_wrong": args.check_first_wrong,
        "sample": args.sample,
        "measured": measure(model, tokenizer, _prompts(tokenizer, args.prompts, args.sample), args),
    }
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
