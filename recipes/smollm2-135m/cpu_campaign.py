"""The campaign on a CPU (issue 62): the GPU campaign's prompt set, the base model's trajectories of every prompt in
bfloat16, stopping and resuming over many sittings, its data committed as it grows.

Why a second driver: the GPU campaign (gpu_campaign.py) fits one 10-minute device call; on a 2-core CPU the same work
takes many hours, across sessions and machines. So every stage here resumes from what it finds, and what a fresh
clone needs lives in the committed folder `data/campaign-cpu/` (prompt set, trajectory shards, progress log), never
in an ignored one:

    python recipes/smollm2-135m/cpu_campaign.py collect            # resumes; stop it any time (a kill loses a batch)
    python recipes/smollm2-135m/cpu_campaign.py status             # what is collected, at what rate

Collection order: the training prompts shuffled (seed 0), then sorted by length within chunks of 1,024 (less
padding per batch), so the first 2,000 or 5,000 collected are a random sample of the whole: the scaling curve's
smaller points train on a prefix of the collection order (`collection_order`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "campaign-cpu"
PROMPTS = DATA / "prompts.parquet"
TRAJECTORIES = DATA / "trajectories"
PROGRESS = DATA / "progress.jsonl"
CHUNK = 1024
"""Prompts sorted by length together; also the granularity at which a prefix of the order is a random sample."""
SETTINGS = {"block_size": 16, "max_new_tokens": 128, "draft_seed": 0, "method": "parallel"}


def collection_order(prompt_ids: list[str], lengths: list[int], seed: int = 0) -> list[int]:
    """Indices of the training prompts in collection order: shuffled, then by length within each chunk."""
    order = list(range(len(prompt_ids)))
    random.Random(seed).shuffle(order)
    chunks = [order[start : start + CHUNK] for start in range(0, len(order), CHUNK)]
    return [i for chunk in chunks for i in sorted(chunk, key=lambda i: (lengths[i], prompt_ids[i]))]


def ordered_train_prompts(tokenizer):
    """The training split as a prompt dataset, in collection order."""
    from campaign.prompts import PromptSet

    from hf_jacobi.data.prompts import encode_prompts

    train = PromptSet.read(PROMPTS).dataset("train")
    lengths = [len(ids) for ids in encode_prompts(train, tokenizer)]
    return train.select(collection_order(list(train["prompt_id"]), lengths))


def _collected_count() -> tuple[int, int]:
    """(rows, answer tokens) in the committed trajectory folder."""
    import pyarrow.parquet as pq

    from hf_jacobi.data.shards import list_shards

    rows = tokens = 0
    for shard in list_shards(TRAJECTORIES) if TRAJECTORIES.is_dir() else []:
        column = pq.read_table(shard, columns=["completion_ids"]).column("completion_ids").to_pylist()
        rows, tokens = rows + len(column), tokens + sum(len(c) for c in column)
    return rows, tokens


def collect(args: argparse.Namespace) -> int:
    """Collects the training prompts' trajectories into TRAJECTORIES, `--step` prompts at a time (each step's rate
    appended to PROGRESS), until `--prompts` are collected or `--minutes` have passed."""
    import torch

    from hf_jacobi.data.collection import collect_trajectories
    from hf_jacobi.loading import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("embedded", dtype=args.dtype)
    prompts = ordered_train_prompts(tokenizer)
    wanted = min(args.prompts or len(prompts), len(prompts))
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else float("inf")
    done, _ = _collected_count()
    while done < wanted and time.monotonic() < deadline:
        goal = min(wanted, (done // args.step + 1) * args.step)
        rows_before, tokens_before = done, _collected_count()[1]
        start = time.perf_counter()
        with torch.inference_mode():
            collect_trajectories(
                model,
                tokenizer,
                prompts.select(range(goal)),
                TRAJECTORIES,
                batch_size=args.batch_size,
                shard_size=args.batch_size,
                model_id=f"embedded ({args.dtype})",
                progress=False,
                **SETTINGS,
            )
        seconds = time.perf_counter() - start
        done, tokens = _collected_count()
        step = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": done - rows_before,
            "tokens": tokens - tokens_before,
            "seconds": round(seconds, 1),
            "tokens_per_s": round((tokens - tokens_before) / seconds, 1),
            "collected": done,
            "of": len(prompts),
            "dtype": args.dtype,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "machine": _machine(),
        }
        with PROGRESS.open("a") as log:
            log.write(json.dumps(step) + "\n")
        print(json.dumps(step), flush=True)
    return 0


def _machine() -> str:
    """The CPU model and whether it has bfloat16 units (what the rate depends on)."""
    from hf_jacobi.cpu_info import cpu_description

    return cpu_description()


def status(_: argparse.Namespace) -> int:
    """Rows and tokens collected, and the rate over the progress log."""
    rows, tokens = _collected_count()
    steps = [json.loads(line) for line in PROGRESS.read_text().splitlines()] if PROGRESS.is_file() else []
    seconds = sum(s["seconds"] for s in steps)
    rate = sum(s["tokens"] for s in steps) / seconds if seconds else 0.0
    print(
        json.dumps({"rows": rows, "tokens": tokens, "logged_seconds": round(seconds), "tokens_per_s": round(rate, 1)})
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("collect", help="collect trajectories (resumes)")
    run.add_argument("--prompts", type=int, default=None, help="stop once this many are collected (default: all)")
    run.add_argument("--minutes", type=float, default=None, help="stop after the step running at this time")
    run.add_argument("--step", type=int, default=256, help="prompts per logged step")
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--dtype", default="bfloat16")
    run.add_argument("--threads", type=int, default=2)
    run.set_defaults(func=collect)
    commands.add_parser("status", help="what is collected").set_defaults(func=status)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
