"""Does the acceptance probe predict tokens per forward? Each adapter's probe, on the base model's states and on its own,
against its measured plain Jacobi decoding on the same held-out prompts, with the rank correlation over adapters.

Per model (the base, or the base with an adapter merged): the probe on the base's block-by-block trajectories of the
prompts (what training on the base's states would start from), the tokens per iteration of its own block-by-block
trajectories (what the probe on them gives exactly, read from the recorded states), and plain Jacobi through `generate(decoding="jacobi")` (the loop users
run, whose window slides over block boundaries). Every model's figures are kept in the output folder as they finish,
so a run cut short resumes with the same command. Over the public API, float32 (exact):

    python lab/probe_validation.py --output-dir runs/probe-validation --json docs/results/probe/validation.json \
        --model base=base --model shipped=shipped --model round2=recipes/smollm2-135m/data/adapter-round2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hf_jacobi import (
    JacobiConfig,
    collect_trajectories,
    encode_prompts,
    load_default_model,
    load_prompts,
    load_trajectories,
    probe_acceptance,
)


def load(spec: str):
    """The embedded model ("base"), with the shipped adapter ("shipped"), or with the PEFT adapter in a folder."""
    if spec in ("base", "shipped"):
        return load_default_model(jacobi_forcing=spec == "shipped")
    from peft import PeftModel

    model, tokenizer = load_default_model()
    return PeftModel.from_pretrained(model, spec).merge_and_unload().eval(), tokenizer


@torch.inference_mode()
def plain_jacobi(model, prompt_ids: list[list[int]], block_size: int, max_new_tokens: int) -> float:
    """Tokens per forward of plain Jacobi decoding through generate(), batch 1, over the prompts."""
    settings = JacobiConfig(block_size=block_size, greedy_devices=()).to_generate_kwargs()
    tokens = forwards = 0
    for ids in prompt_ids:
        inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True,
                             **settings)  # fmt: skip
        tokens += out.sequences.shape[1] - len(ids)
        forwards += int(out.forward_passes[0])
    return tokens / forwards


def block_by_block(rows) -> dict:
    """Tokens per iteration of block-by-block Jacobi decoding on a model's own trajectories, read from the states the
    collection recorded: what the probe of that model on them gives exactly in float32 (tests/test_probe.py), without
    its forwards."""
    tokens = iterations = 0
    for row in rows:
        for states, fixed in zip(row["states"], row["fixed_points"], strict=True):
            first = next((i for i, (a, b) in enumerate(zip(states[0], fixed, strict=True)) if a != b), len(fixed))
            tokens += len(fixed) - first
            iterations += len(states) - 1
    return {"tokens_per_iteration": tokens / iterations, "iterations": iterations}


def pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True))
    var = (sum((a - mx) ** 2 for a in xs) * sum((b - my) ** 2 for b in ys)) ** 0.5
    return cov / var if var else float("nan")


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else float("nan")


def measure(label: str, spec: str, prompts, base_states, args) -> dict:
    model, tokenizer = load(spec)
    own = collect_trajectories(model, tokenizer, prompts, args.output_dir / f"own-{label}", block_size=args.block_size,
                               max_new_tokens=args.max_new_tokens, batch_size=8, method="parallel",
                               model_id=f"embedded + {spec}", progress=False)  # fmt: skip
    prompt_ids = encode_prompts(prompts, tokenizer)
    return {
        "model": spec,
        "probe_base_states": probe_acceptance(model, base_states).to_dict(),
        "own_states": block_by_block(load_trajectories(own)),
        "plain_tokens_per_forward": plain_jacobi(model, prompt_ids, args.block_size, args.max_new_tokens),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True, help="trajectories and per-model figures")
    parser.add_argument("--json", type=Path, required=True, help="the table's data")
    parser.add_argument("--model", action="append", required=True, help="LABEL=base|shipped|ADAPTER_FOLDER")
    parser.add_argument("--prompts", type=int, default=16, help="first N packages test prompts (default 16)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    models = dict(spec.split("=", 1) for spec in args.model)
    prompts = load_prompts("packages", split="test", limit=args.prompts)
    base, tokenizer = load_default_model()
    base_folder = collect_trajectories(base, tokenizer, prompts, args.output_dir / "base-states",
                                       block_size=args.block_size, max_new_tokens=args.max_new_tokens, batch_size=8,
                                       method="parallel", model_id="embedded", progress=False)  # fmt: skip
    base_states = load_trajectories(base_folder)
    del base
    results = {}
    for label, spec in models.items():
        done = args.output_dir / f"figures-{label}.json"
        if not done.is_file():
            done.write_text(json.dumps(measure(label, spec, prompts, base_states, args), indent=2), encoding="utf-8")
        results[label] = json.loads(done.read_text(encoding="utf-8"))
        print(label, json.dumps(results[label]))
    measured = [r["plain_tokens_per_forward"] for r in results.values()]
    base_probe = [r["probe_base_states"]["tokens_per_iteration"] for r in results.values()]
    own_probe = [r["own_states"]["tokens_per_iteration"] for r in results.values()]
    report = {
        "prompts": f"packages test, first {args.prompts}",
        "block_size": args.block_size,
        "max_new_tokens": args.max_new_tokens,
        "models": results,
        "spearman_base_states": spearman(base_probe, measured),
        "spearman_own_states": spearman(own_probe, measured),
        "pearson_base_states": pearson(base_probe, measured),
        "pearson_own_states": pearson(own_probe, measured),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print({k: report[k] for k in ("spearman_base_states", "spearman_own_states")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
