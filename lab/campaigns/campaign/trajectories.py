"""Stage 2: the base model's Jacobi trajectories of every training prompt, as trajectory shards `hf-jacobi train` reads.

Two methods, both measured on the same sample (tokens of trajectory rows per second): `sequential`, the project's own
collection (`collect_trajectories`: the Jacobi loop of `generate`, block after block), and `parallel` (known fixed
points, `hf_jacobi.data.block_iterations`: greedy answers first, then every block's iterations at once). The bulk uses `--trajectory-method`.

Greedy answers are what resume needs: a later call rebuilds the parallel method's states from them in a few forwards,
so `completions.parquet` (prompt id -> answer token ids, small enough to return) is written to the output folder as
the stage goes. On a sample, the fixed points are checked against greedy decoding in float32, where Jacobi decoding
is exact: identical answers for the sequential method, no argmax disagreement for the parallel one.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hf_jacobi import collect_trajectories, encode_prompts, load_trajectories
from hf_jacobi.data.block_iterations import block_trajectories
from hf_jacobi.data.shards import SCHEMA, SETTINGS_FILE, list_shards, shard_path, write_shard
from hf_jacobi.loading import eos_token_ids

from .budget import StageTimer

METHODS = ("parallel", "sequential")
COMPLETIONS_SCHEMA = pa.schema([("prompt_id", pa.string()), ("completion_ids", pa.list_(pa.int32()))])


@dataclass
class TrajectorySettings:
    """How trajectories are collected; every field but the batch sizes and the sample is part of what a resumed
    call must match."""

    block_size: int = 16
    max_new_tokens: int = 128
    batch_size: int = 1024
    method: str = "parallel"
    draft_seed: int = 0
    dtype: str = "bfloat16"
    model_id: str = "embedded"
    measure_prompts: int = 256
    """Prompts both methods collect, timed, at the start of the stage (0: no measurement)."""
    check_prompts: int = 64
    """Prompts checked against greedy decoding in float32."""

    def identity(self) -> dict[str, Any]:
        """What the answers depend on: a resumed call with other values recollects instead of reusing them."""
        return {k: v for k, v in asdict(self).items() if k in ("max_new_tokens", "dtype", "model_id")}


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
    collect_trajectories(
        model,
        tokenizer,
        prompts,
        folder,
        block_size=settings.block_size,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.batch_size,
        shard_size=settings.batch_size,
        draft_seed=settings.draft_seed,
        model_id=settings.model_id,
        progress=False,
    )
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


def write_completions(path: Path, completions: dict[str, list[int]], settings: TrajectorySettings) -> None:
    """prompt id -> greedy answer, with the settings they depend on in the file's metadata (zstd parquet)."""
    table = pa.Table.from_pydict(
        {"prompt_id": list(completions), "completion_ids": list(completions.values())}, schema=COMPLETIONS_SCHEMA
    ).replace_schema_metadata({"campaign": json.dumps(settings.identity())})
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)


def read_completions(path: Path, settings: TrajectorySettings) -> tuple[dict[str, list[int]], str]:
    """An earlier call's answers, and a note: none when the file is missing or was made with other settings."""
    if not path.is_file():
        return {}, "no completions.parquet to resume from"
    table = pq.read_table(path)
    made = json.loads((table.schema.metadata or {}).get(b"campaign", b"{}"))
    if made != settings.identity():
        return {}, f"completions.parquet was made with {made}, not {settings.identity()}: collected again"
    rows = table.to_pydict()
    return dict(zip(rows["prompt_id"], rows["completion_ids"], strict=True)), f"{table.num_rows} answers resumed"


def trajectory_folder(work: Path, settings: TrajectorySettings) -> Path:
    """The shard folder, whose collection.json must match these settings (a method or dtype change needs a new
    work folder: states of two collections never mix)."""
    folder = work / "trajectories"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {
        "block_size": settings.block_size,
        "max_new_tokens": settings.max_new_tokens,
        "chat": True,
        "draft_seed": settings.draft_seed,
        "model": settings.model_id,
        "method": settings.method,
        "dtype": settings.dtype,
    }
    path = folder / SETTINGS_FILE
    if path.is_file() and json.loads(path.read_text()) != wanted:
        raise ValueError(f"{folder} holds trajectories of other settings ({path.read_text()}); use another work dir")
    path.write_text(json.dumps(wanted, indent=2))
    return folder


def _collected(folder: Path) -> dict[str, list[int]]:
    done: dict[str, list[int]] = {}
    for shard in list_shards(folder):
        table = pq.read_table(shard, columns=["prompt_id", "completion_ids"]).to_pydict()
        done.update(zip(table["prompt_id"], table["completion_ids"], strict=True))
    return done


def _batches(ids: list[str], lengths: list[int], done, known, size: int) -> list[list[int]]:
    """Indices of the prompts still to collect, in batches: those with a known answer first (no generation), each
    group by prompt length (less padding)."""
    pending = [i for i, prompt_id in enumerate(ids) if prompt_id not in done]
    ordered = sorted(pending, key=lambda i: (ids[i] not in known, lengths[i]))
    batches, current = [], []
    for index in ordered:
        if current and (ids[index] in known) != (ids[current[0]] in known):
            batches.append(current)
            current = []
        current.append(index)
        if len(current) == size:
            batches.append(current)
            current = []
    return batches + ([current] if current else [])


def collect_stage(
    model,
    tokenizer,
    prompts,
    settings: TrajectorySettings,
    timer: StageTimer,
    work: Path,
    known: dict[str, list[int]],
    save: Callable[[dict[str, list[int]], dict], None],
    save_every_s: float = 15.0,
) -> dict[str, Any]:
    """Stage 2's bulk: every training prompt's trajectory into the shard folder, batch by batch until done or the
    deadline, reusing `known` answers; `save(completions, record)` keeps the returned files current."""
    folder = trajectory_folder(work, settings)
    ids = list(prompts["prompt_id"])
    encoded = encode_prompts(prompts, tokenizer)
    done = _collected(folder)
    number = len(list_shards(folder))
    record: dict[str, Any] = {"method": settings.method, "dtype": settings.dtype, "already": len(done)}
    totals = {"rows": 0, "tokens": 0, "forwards": 0, "generated_batches": 0}
    start, last_save, record["stopped"] = time.perf_counter(), time.perf_counter(), "done"
    for batch in _batches(ids, [len(e) for e in encoded], done, known, settings.batch_size):
        if timer.expired():
            record["stopped"] = "deadline"
            break
        if settings.method == "parallel":
            answers = [known[ids[i]] for i in batch] if ids[batch[0]] in known else None
            rows, timing = parallel_rows(
                model, tokenizer, [ids[i] for i in batch], [encoded[i] for i in batch], settings, answers
            )
            write_shard(pa.Table.from_pylist(rows, schema=SCHEMA), shard_path(folder, 0, number))
            number += 1
            totals = {k: totals[k] + timing.get(k, 0) for k in totals}
        else:
            rows = sequential_rows(model, tokenizer, prompts.select(batch), folder, settings)
        done.update({row["prompt_id"]: row["completion_ids"] for row in rows})
        totals["rows"] += len(rows)
        totals["tokens"] += sum(len(row["completion_ids"]) for row in rows)
        if time.perf_counter() - last_save > save_every_s:
            save(done, {**record, **totals})
            last_save = time.perf_counter()
    seconds = time.perf_counter() - start
    record.update(totals, seconds=round(seconds, 1), tokens_per_s=totals["tokens"] / max(seconds, 1e-9))
    record.update(collected=len(done), of=len(ids))
    save(done, record)
    return record
