"""`argmax` against `max(dim).indices` over a vocabulary's scores, the choice `hf_jacobi.decoding.verify.greedy_choice`
makes for every greedy column of the decoding loop and every query of the parallel collection.

Why: both return the same index (the first largest on ties), but on a CPU torch's argmax over bfloat16 scores is a
scalar loop, several times slower than `max` over the same tensor; at the embedded model's 49,152-token vocabulary it
costs a visible share beside the LM head's own matmul (docs/results/campaign-cpu/README.md). This times both on random
scores (the timing does not depend on the values), per dtype, and checks that they agree, including on ties.

    OMP_NUM_THREADS=1 python lab/benchmarks/argmax_cpu.py --rows 512 --output docs/results/cpu-fast-path/argmax.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab.reports import emit


def _median_ms(function, repeats: int) -> float:
    function()  # warm-up: first-call allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(rows: int, vocab: int, repeats: int) -> dict:
    """Milliseconds of each reduction over [rows, vocab] random scores per dtype, and whether they agree."""
    results = {}
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        scores = torch.randn(rows, vocab, generator=generator).to(dtype)
        ties = torch.randint(0, 3, (rows, vocab), generator=generator).to(dtype)  # many equal maxima per row
        argmax_ms = _median_ms(lambda s=scores: s.argmax(dim=-1), repeats)
        max_ms = _median_ms(lambda s=scores: s.max(dim=-1).indices, repeats)
        agree = all(torch.equal(s.argmax(dim=-1), s.max(dim=-1).indices) for s in (scores, ties))
        results[str(dtype).removeprefix("torch.")] = {
            "argmax_ms": round(argmax_ms, 2),
            "max_indices_ms": round(max_ms, 2),
            "speedup": round(argmax_ms / max_ms, 2),
            "same_indices": agree,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="score rows (queries) reduced at once")
    parser.add_argument("--vocab", type=int, default=49_152, help="the vocabulary (the embedded model's by default)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--output", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    from hf_jacobi.decoding.cpu_info import cpu_description

    report = {
        "command": "python lab/benchmarks/argmax_cpu.py " + " ".join(argv),
        "cpu": cpu_description(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "rows": args.rows,
        "vocab": args.vocab,
        "dtypes": measure(args.rows, args.vocab, args.repeats),
    }
    emit(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
