"""Jacobi decoding on the dynamic cache, on the static cache, and on the static cache with a compiled verify forward.

Run on the embedded SmolLM2-135M with the shipped Jacobi Forcing adapter (CPU, float32):

    OMP_NUM_THREADS=2 .venv/bin/python lab/benchmarks/static_jacobi.py --prompts 4 --max-new-tokens 64 --block-size 8

Each prompt is decoded at batch 1 by every variant; outputs are checked against greedy decoding, and the script prints
tokens per forward and the median seconds of `--repeats` timed runs per prompt. The compiled variant is warmed on
every prompt first (the longest first, so that its static cache, kept by later calls, has one length and its graph
compiles once); the warm-up time is printed apart. `compare` is the function a bench can call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
from transformers import CompileConfig

PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain what a hash table is in two sentences.",
    "List three differences between TCP and UDP.",
    "Write a Python function that checks whether a string is a palindrome.",
)


@dataclass
class Variant:
    name: str
    kwargs: dict


@dataclass
class Result:
    variant: str
    prompt: int
    seconds: float
    new_tokens: int
    forwards: int
    identical: bool

    @property
    def tokens_per_forward(self) -> float:
        return self.new_tokens / max(self.forwards, 1)


def variants(block_size: int, compile_mode: str = "reduce-overhead") -> list[Variant]:
    """Plain Jacobi with one block of `block_size` on each path (recycling off, whatever the model's defaults)."""
    jacobi = {
        "decoding": "jacobi",
        "jacobi_block_size": block_size,
        "jacobi_num_blocks": 1,
        "jacobi_ngram_pool_size": 0,
    }
    compile_config = CompileConfig(mode=compile_mode)
    compile_config._compile_all_devices = True  # generate compiles on a CPU only when told to
    return [
        Variant("dynamic (eager)", {**jacobi, "cache_implementation": "dynamic"}),
        Variant("static (eager)", {**jacobi, "cache_implementation": "static", "jacobi_compile": "never"}),
        Variant("static (compiled)", {**jacobi, "cache_implementation": "static", "compile_config": compile_config}),
    ]


def _timed(model, inputs: dict, **kwargs):
    start = time.perf_counter()
    out = model.generate(**inputs, **kwargs)
    return out, time.perf_counter() - start


def compare(
    model, tokenizer, prompts, max_new_tokens: int = 64, block_size: int = 8, repeats: int = 2
) -> tuple[list[Result], float]:
    """Every variant on every prompt (batch 1); returns the results and the compiled variant's warm-up seconds."""
    encoded = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        for p in prompts
    ]
    common = {"do_sample": False, "max_new_tokens": max_new_tokens}
    greedy = [model.generate(**inputs, **common) for inputs in encoded]
    chosen = variants(block_size)
    warm_up = 0.0
    for variant in chosen:
        if "compile_config" in variant.kwargs:
            order = sorted(range(len(encoded)), key=lambda i: -encoded[i]["input_ids"].shape[1])
            for index in order:
                warm_up += _timed(model, encoded[index], **common, **variant.kwargs)[1]
    results = []
    for variant in chosen:
        for index, inputs in enumerate(encoded):
            seconds = []
            for _ in range(repeats):
                out, elapsed = _timed(model, inputs, **common, **variant.kwargs, return_dict_in_generate=True)
                seconds.append(elapsed)
            prompt_len = inputs["input_ids"].shape[1]
            results.append(
                Result(
                    variant.name,
                    index,
                    statistics.median(seconds),
                    out.sequences.shape[1] - prompt_len,
                    int(out.forward_passes[0]),
                    torch.equal(out.sequences, greedy[index]),
                )
            )
    return results, warm_up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, choices=range(1, len(PROMPTS) + 1))
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from hf_jacobi import load_default_model

    model, tokenizer = load_default_model(jacobi_forcing=True)
    results, warm_up = compare(
        model, tokenizer, PROMPTS[: args.prompts], args.max_new_tokens, args.block_size, args.repeats
    )
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; compiled warm-up {warm_up:.1f} s")
    print(f"{'variant':<20} {'prompt':>6} {'tokens':>6} {'forwards':>8} {'tok/fwd':>7} {'seconds':>8} identical")
    for r in results:
        print(
            f"{r.variant:<20} {r.prompt:>6} {r.new_tokens:>6} {r.forwards:>8} {r.tokens_per_forward:>7.2f} "
            f"{r.seconds:>8.2f} {r.identical}"
        )
    for name in dict.fromkeys(r.variant for r in results):
        mine = [r for r in results if r.variant == name]
        total = sum(r.seconds for r in mine)
        tokens = sum(r.new_tokens for r in mine)
        forwards = sum(r.forwards for r in mine)
        print(
            f"{name:<20} total {total:.2f} s, {tokens / forwards:.2f} tokens/forward, identical {all(r.identical for r in mine)}"
        )


if __name__ == "__main__":
    main()
