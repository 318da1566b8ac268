"""vLLM on this CPU: plain autoregressive decoding, vLLM's n-gram proposer and hf_jacobi's JacobiProposer (its default
drafts with and without the adaptive chain length, and plain Jacobi), on the embedded SmolLM2-135M-Instruct with the
shipped Jacobi Forcing adapter merged, float32; and hf_jacobi's own batched generate(decoding="jacobi") beside them.

Held-out prompts (the `packages` test split, chat template), one request at a time (batch 1) and all submitted at once
with 8 running concurrently (vLLM's continuous batching). Per method and setting: generated tokens per second (wall
time of the generate calls, after a warm-up request), tokens per decode forward (the tokens decoding produced after
each request's prefill token, over the forwards that produced them, from vLLM's accepted-token counter) and how many
outputs equal transformers' float32 greedy token for token. Each method runs in its own engine process, one after
the other, in `--rounds` alternating rounds; the tables give the median round. `hf-generate` runs
lab/benchmarks/vllm_cpu_generate.py in the main environment (`--hf-python`), in batches of `--concurrency` only.

Run in the vLLM environment (`make test-vllm` builds it):

    OMP_NUM_THREADS=1 .venv-vllm/bin/python lab/benchmarks/vllm_cpu.py --output-dir docs/results/vllm-cpu

Writes vllm-cpu.json and vllm-cpu.md there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METHODS = ("ar", "ngram", "jacobi", "jacobi-full", "jacobi-plain", "hf-generate")
METHODS_HELP = {
    "jacobi": "JacobiProposer's defaults: drafts HF_JACOBI_VLLM_DRAFTS=lookup (the Jacobi iterate, or the continuation "
    "of the request's last 2-4 tokens earlier in its own text where that is expected to be accepted more, recycled "
    "n-grams past it), each chain cut where its drafts stop paying for their verification (HF_JACOBI_VLLM_VERIFY_COST "
    "default).",
    "jacobi-full": "the same drafts with the adaptive length off (HF_JACOBI_VLLM_VERIFY_COST=0): every chain verified "
    "whole and the lookup taken where it is longer, the proposer before the adaptive length.",
    "jacobi-plain": "the Jacobi iterate and random prompt tokens only (HF_JACOBI_VLLM_DRAFTS=plain), whole chains, as "
    'generate(decoding="jacobi") without a pool.',
    "hf-generate": "hf_jacobi's generate(decoding=\"jacobi\") with the folder's Jacobi defaults (block 8, pool 4) in "
    "transformers, left-padded batches of the concurrency, no vLLM.",
}
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def speculative(method: str, folder: Path, k: int) -> dict | None:
    """The `speculative_config` of a method: none for AR; n-gram and Jacobi verify k drafts per step."""
    if method == "ar":
        return None
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    from hf_jacobi.integrations.vllm import DRAFT_MODE_VARIABLE, VERIFY_COST_VARIABLE, speculative_config

    # the engine's worker inherits them
    os.environ[DRAFT_MODE_VARIABLE] = "plain" if method == "jacobi-plain" else "lookup"
    if method != "jacobi":
        os.environ[VERIFY_COST_VARIABLE] = "0"

    return speculative_config(k, model=folder)


def accepted_tokens(llm, name: str = "accepted_tokens") -> int:
    for metric in llm.get_metrics():
        if metric.name == f"vllm:spec_decode_num_{name}":
            return int(metric.value)
    return 0


def timed_run(llm, prompts: list[list[int]], max_tokens: int, concurrent: bool) -> dict:
    """Generates every prompt (one at a time, or all at once) and returns the outputs, wall time and counters."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    requests = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    accepted, drafted = accepted_tokens(llm), accepted_tokens(llm, "draft_tokens")
    start = time.perf_counter()
    if concurrent:
        outputs = llm.generate(requests, params, use_tqdm=False)
    else:
        outputs = [llm.generate([r], params, use_tqdm=False)[0] for r in requests]
    seconds = time.perf_counter() - start
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    drafted = accepted_tokens(llm, "draft_tokens") - drafted
    return {"tokens": tokens, "seconds": seconds, "accepted": accepted_tokens(llm) - accepted, "drafted": drafted}


def run_method(args: argparse.Namespace) -> None:
    """One engine: the warm-up, then batch 1 and the concurrent run; prints one JSON line."""
    from vllm import LLM

    prompts = json.loads(Path(args.prompts_file).read_text())
    llm = LLM(
        model=str(args.model),
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        max_num_seqs=args.concurrency,
        speculative_config=speculative(args.method, args.model, args.k),
        disable_log_stats=False,
        seed=0,
    )
    timed_run(llm, prompts[:1], 16, concurrent=False)  # warm-up
    result = {
        "batch1": timed_run(llm, prompts, args.max_new_tokens, concurrent=False),
        f"concurrent{args.concurrency}": timed_run(llm, prompts, args.max_new_tokens, concurrent=True),
    }
    print("RESULT " + json.dumps(result), flush=True)


def summarize(run: dict, references: list[list[int]]) -> dict:
    generated = sum(len(t) for t in run["tokens"])
    decoded = generated - len(run["tokens"])  # each request's first token comes from its prefill
    return {
        "identical": sum(t == r for t, r in zip(run["tokens"], references, strict=True)),
        "requests": len(references),
        "generated_tokens": generated,
        "seconds": round(run["seconds"], 3),
        "tokens_per_second": round(generated / run["seconds"], 3),
        "tokens_per_decode_forward": round(decoded / (decoded - run["accepted"]), 4),
        "verified_drafts": run.get("drafted"),
    }


def prepare(args: argparse.Namespace, work: Path) -> tuple[Path, Path, list[list[int]]]:
    """The merged model folder, the encoded prompts (file) and transformers' greedy references."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_jacobi.data.chat import encode_chat
    from hf_jacobi.data.prompts import load_prompts
    from hf_jacobi.integrations.merged import write_merged_model

    folder = args.model or write_merged_model(work / "merged")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = load_prompts("packages", split="test", limit=args.limit)
    prompts = [encode_chat(tokenizer, messages) for messages in rows["messages"]]
    prompts_file = work / "prompts.json"
    prompts_file.write_text(json.dumps(prompts))
    if args.references:  # transformers' greedy of these prompts from an earlier run (minutes on a busy CPU)
        return Path(folder), prompts_file, json.loads(args.references.read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    references = []
    with torch.no_grad():
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=args.max_new_tokens, do_sample=False)
            references.append(out[0, len(prompt) :].tolist())
    (args.output_dir / "references.json").write_text(json.dumps(references))
    return Path(folder), prompts_file, references


def child(method: str, folder: Path, prompts_file: Path, args: argparse.Namespace) -> dict:
    options = {
        "--model": folder,
        "--prompts-file": prompts_file,
        "--max-new-tokens": args.max_new_tokens,
        "--k": args.k,
    }
    command = [sys.executable, __file__, "--child", method, "--concurrency", str(args.concurrency)]
    if method == "hf-generate":
        del options["--k"]
        command = [args.hf_python, str(Path(__file__).with_name("vllm_cpu_generate.py")), *command[4:]]
    command += [str(part) for pair in options.items() for part in pair]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{method} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def markdown(report: dict) -> str:
    settings = report["settings"]
    lines = [
        "# vLLM on a 2-core CPU: AR, n-gram and the Jacobi proposer",
        "",
        f"Embedded SmolLM2-135M-Instruct with the shipped Jacobi Forcing adapter merged, float32, vLLM "
        f"{report['vllm']} (CPU build), {settings['limit']} held-out `packages` test prompts, "
        f"{settings['max_new_tokens']} new tokens, k = {settings['k']} speculative tokens, "
        f"median of {settings['rounds']} round(s). Command:",
        "",
        f"    {report['command']}",
        "",
        "| setting | method | tokens/s | vs AR | tokens per decode forward | verified drafts | identical to greedy |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for setting, methods in report["median"].items():
        base = methods["ar"]["tokens_per_second"] if "ar" in methods else None
        for method, row in methods.items():
            ratio = f"{row['tokens_per_second'] / base:.2f}x" if base else "-"
            lines.append(
                f"| {setting} | {method} | {row['tokens_per_second']:.2f} | {ratio} | "
                f"{row['tokens_per_decode_forward']:.3f} | {row.get('verified_drafts') or '-'} | "
                f"{row['identical']}/{row['requests']} |"
            )
    rounds = report.get("rounds", [])
    if len(rounds) > 1:  # the spread behind each median: a lead smaller than it is noise of the run
        lines += [
            "",
            "Tokens/s per round (in the order they ran):",
            "",
            "| setting | method | per round |",
            "|---|---|---|",
        ]
        for setting, methods in report["median"].items():
            for method in methods:
                figures = ", ".join(f"{r[setting][method]['tokens_per_second']:.2f}" for r in rounds)
                lines.append(f"| {setting} | {method} | {figures} |")
    ngram = report["ngram"]
    lines += [
        "",
        f"Machine: {report['machine']} (wall times are of one sitting). {report['note']}",
        f"ar: no speculation. ngram: vLLM's n-gram proposer (prompt_lookup_min {ngram['prompt_lookup_min']}, "
        f"prompt_lookup_max {ngram['prompt_lookup_max']}). "
        + " ".join(f"{method}: {text}" for method, text in METHODS_HELP.items())
        + f" batch1: one request at a time; concurrent{settings['concurrency']}: all submitted at once, "
        f"{settings['concurrency']} running (hf-generate: batches of {settings['concurrency']}). Verified drafts: "
        "draft tokens vLLM verified over the 16 requests. Identical: equal token for token to transformers' float32 "
        "greedy of the same merged folder.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=Path("runs/vllm-cpu"))
    parser.add_argument("--model", type=Path, default=None, help="a merged model folder (default: write one)")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="speculative tokens per step, n-gram and Jacobi (default: the merged folder's own chain, as "
        "speculative_config gives it: 7 for the shipped adapter)",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--references", type=Path, help="references.json of an earlier run with the same prompts")
    parser.add_argument("--note", default="", help="a sentence for the results page (e.g. the load)")
    parser.add_argument("--render", type=Path, help="only write vllm-cpu.md again beside this vllm-cpu.json")
    parser.add_argument("--hf-python", default=".venv/bin/python", help="the main environment (hf-generate)")
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--prompts-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        args.method = args.child
        run_method(args)
        return 0
    if args.render:
        args.render.with_name("vllm-cpu.md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    import vllm

    from hf_jacobi.integrations.merged import serving_config

    args.output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        folder, prompts_file, references = prepare(args, Path(work))
        if args.k is None:  # one k for both proposers, the figure the report states
            args.k = json.loads(serving_config(folder))["num_speculative_tokens"]
        rounds = []
        for round_index in range(args.rounds):
            runs = {method: child(method, folder, prompts_file, args) for method in args.methods}
            settings = dict.fromkeys(setting for run in runs.values() for setting in run)  # hf-generate: one
            summary = {
                setting: {m: summarize(runs[m][setting], references) for m in args.methods if setting in runs[m]}
                for setting in sorted(settings)
            }
            print(json.dumps({"round": round_index, **summary}), flush=True)
            rounds.append(summary)
    median = {
        setting: {
            method: {
                **rounds[0][setting][method],
                **{
                    key: statistics.median(r[setting][method][key] for r in rounds)
                    for key in ("seconds", "tokens_per_second", "tokens_per_decode_forward")
                },
            }
            for method in rounds[0][setting]
        }
        for setting in rounds[0]
    }
    report = {
        "vllm": vllm.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}",
        "command": "OMP_NUM_THREADS=1 .venv-vllm/bin/python lab/benchmarks/vllm_cpu.py " + shlex.join(sys.argv[1:]),
        "settings": {
            k: v for k, v in vars(args).items() if k in ("limit", "max_new_tokens", "k", "concurrency", "rounds")
        },
        "ngram": {"prompt_lookup_min": 2, "prompt_lookup_max": 4},
        "note": "Tokens per decode forward: (generated - requests) / (generated - requests - accepted drafts). "
        + args.note,
        "rounds": rounds,
        "median": median,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "vllm-cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output_dir / "vllm-cpu.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
