"""How the two collection methods compare on a sample, at the start of stage 2: `sequential`, the Jacobi loop of
`generate` block after block (`collect_trajectories`), and `parallel` (known fixed points,
`hf_jacobi.data.block_iterations`: greedy answers first, then every block's iterations at once), timed on the same
prompts; and in float32, where Jacobi decoding is exact, the check that the sequential method's answers are greedy's
and that the parallel method finds no argmax disagreement. It studies the parallel method's internals on purpose
(forwards per batch, disagreements), which the public API does not report.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hf_jacobi import collect_trajectories, encode_prompts, load_trajectories
from hf_jacobi.data.block_iterations import block_trajectories
from hf_jacobi.loading import eos_token_ids

from .trajectories import TrajectorySettings


def _pad_id(model, tokenizer) -> int:
    pad = model.generation_config.pad_token_id
    return pad if pad is not None else (tokenizer.pad_token_id or 0)


def parallel_rows(
    model, tokenizer, prompt_ids, encoded, settings, known=None, check_first_wrong: bool = False
) -> tuple[list[dict], dict[str, float]]:
    """Trajectory rows of one batch by the parallel method (greedy answers generated unless `known` gives them), and
    its timing: seconds (generation and iterations), batches whose answers were generated (0 or 1), forwards, and
    with `check_first_wrong` (one more query per block and iteration) the argmax disagreements."""
    start = time.perf_counter()
    blocks = block_trajectories(
        model,
        encoded,
        settings.block_size,
        max_new_tokens=settings.max_new_tokens,
        pad_id=_pad_id(model, tokenizer),
        eos_ids=eos_token_ids(model.generation_config),
        draft_seed=settings.draft_seed,
        answers=known,
        check_first_wrong=check_first_wrong,
    )
    rows = [
        {
            "prompt_id": prompt_id,
            "prompt_ids": prompt,
            "completion_ids": answer,
            "block_size": settings.block_size,
            "states": states,
            "fixed_points": [block[-1] for block in states],
            "forward_passes": passes,
        }
        for prompt_id, prompt, answer, states, passes in zip(
            prompt_ids, encoded, blocks.answers, blocks.states, blocks.forward_passes, strict=True
        )
    ]
    timing = {
        "seconds": time.perf_counter() - start,
        "generated_batches": int(known is None),
        "forwards": blocks.forwards,
    }
    if check_first_wrong:
        timing["disagreements"] = blocks.disagreements
    return rows, timing


def sequential_rows(model, tokenizer, prompts, folder: Path, settings: TrajectorySettings) -> list[dict]:
    """Trajectory rows of `prompts` (a prompt dataset) by the project's collection, into `folder` (resumed)."""
    collect_trajectories(model, tokenizer, prompts, folder, **settings.collection_arguments(), method="sequential")
    wanted = set(prompts["prompt_id"])
    return [row for row in load_trajectories(folder).to_list() if row["prompt_id"] in wanted]


def _rate(rows: list[dict], seconds: float) -> dict[str, float]:
    tokens = sum(len(row["completion_ids"]) for row in rows)
    return {"rows": len(rows), "tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": tokens / seconds}


def _warm_up(model, tokenizer, prompts, work: Path, settings: TrajectorySettings) -> None:
    """Both methods once on two prompts and two blocks, untimed: whichever ran first would pay the device's one-time
    costs (kernel loading, library handles, allocator growth) in its figure."""
    short = TrajectorySettings(**{**asdict(settings), "max_new_tokens": 2 * settings.block_size})
    sample = prompts.select(range(min(2, len(prompts))))
    folder = work / f"warm-up-{settings.dtype}"
    shutil.rmtree(folder, ignore_errors=True)
    sequential_rows(model, tokenizer, sample, folder, short)
    parallel_rows(model, tokenizer, list(sample["prompt_id"]), encode_prompts(sample, tokenizer), short)


def measure_methods(
    model, tokenizer, prompts, work: Path, settings: TrajectorySettings, check_first_wrong: bool = False
) -> dict[str, Any]:
    """Both methods on the same prompts (one batch), timed after a warm-up, and whether they reach the same fixed
    points (with `check_first_wrong`, the parallel method's argmax disagreements too)."""
    encoded = encode_prompts(prompts, tokenizer)
    folder = work / f"measure-sequential-{settings.dtype}"
    shutil.rmtree(folder, ignore_errors=True)
    _warm_up(model, tokenizer, prompts, work, settings)
    start = time.perf_counter()
    sequential = sequential_rows(model, tokenizer, prompts, folder, settings)
    sequential_s = time.perf_counter() - start
    start = time.perf_counter()
    parallel, timing = parallel_rows(
        model, tokenizer, list(prompts["prompt_id"]), encoded, settings, check_first_wrong=check_first_wrong
    )
    parallel_s = time.perf_counter() - start
    answers = {row["prompt_id"]: row["completion_ids"] for row in sequential}
    same = sum(answers.get(row["prompt_id"]) == row["completion_ids"] for row in parallel)
    return {
        "dtype": settings.dtype,
        "batch_size": len(prompts),
        "sequential": _rate(sequential, sequential_s),
        "parallel": {**_rate(parallel, parallel_s), **timing},
        "jacobi_answers_equal_greedy": f"{same}/{len(parallel)}",
    }


def float32_check(model32, tokenizer, prompts, work: Path, settings: TrajectorySettings) -> dict[str, Any]:
    """On a sample in float32: the sequential collection's fixed points against greedy answers (identical rows), and
    the parallel method's argmax disagreements with them (none expected)."""
    settings32 = TrajectorySettings(**{**asdict(settings), "dtype": "float32", "batch_size": len(prompts)})
    result = measure_methods(model32, tokenizer, prompts, work, settings32, check_first_wrong=True)
    sequential = load_trajectories(work / "measure-sequential-float32").to_list()
    fixed_ok = sum(
        [state[-1] for state in row["states"]] == row["fixed_points"]
        and [t for block in row["fixed_points"] for t in block]
        == row["completion_ids"][: len(row["fixed_points"]) * settings.block_size]
        for row in sequential
    )
    result["fixed_points_are_answer_blocks"] = f"{fixed_ok}/{len(sequential)}"
    result["exact"] = (
        result["jacobi_answers_equal_greedy"] == f"{len(prompts)}/{len(prompts)}"
        and result["parallel"]["disagreements"] == 0
    )
    return result
