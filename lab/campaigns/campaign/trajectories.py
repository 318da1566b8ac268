"""Stage 2: the base model's Jacobi trajectories of every training prompt, as trajectory shards `hf-jacobi train` reads.

The bulk is the library's own collection (`collect_trajectories`, by `--trajectory-method`), each call bounded in time
(`stop_after_seconds`) so that the stage saves as it goes and stops at its deadline between batches; the measurement
of both methods and the float32 check at the start of the stage are `method_study.py`'s.

Greedy answers are what resume needs: a later call rebuilds the parallel method's states from them in a few forwards
(`collect_trajectories(answers=...)` with the model's own answers), so `completions.parquet` (prompt id -> answer token
ids, small enough to return) is written to the output folder as the stage goes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hf_jacobi import collect_trajectories, collected_answers, encode_prompts

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

    def collection_arguments(self) -> dict[str, Any]:
        """`collect_trajectories`' arguments for these settings but the method: a shard per batch, no progress bar."""
        return {
            "block_size": self.block_size,
            "max_new_tokens": self.max_new_tokens,
            "batch_size": self.batch_size,
            "shard_size": self.batch_size,
            "draft_seed": self.draft_seed,
            "model_id": self.model_id,
            "progress": False,
        }

    def identity(self) -> dict[str, Any]:
        """What the answers depend on: a resumed call with other values recollects instead of reusing them."""
        return {k: v for k, v in asdict(self).items() if k in ("max_new_tokens", "dtype", "model_id")}


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


def _groups(ids: list[str], lengths: list[int], done, known) -> list[tuple[bool, list[int]]]:
    """Indices of the prompts still to collect: those with a known answer (no generation), then the rest, each group
    by prompt length (less padding in a batch)."""
    pending = [i for i, prompt_id in enumerate(ids) if prompt_id not in done]
    groups = [(True, [i for i in pending if ids[i] in known]), (False, [i for i in pending if ids[i] not in known])]
    return [(given, sorted(group, key=lengths.__getitem__)) for given, group in groups if group]


def collect_stage(
    model,
    tokenizer,
    prompts,
    settings: TrajectorySettings,
    timer: StageTimer,
    work: Path,
    known: dict[str, list[int]],
    save: Callable[[dict[str, list[int]], dict], None],
    save_every_s: float = 60.0,
) -> dict[str, Any]:
    """Stage 2's bulk: every training prompt's trajectory into `work/trajectories` until done or the deadline, by
    `collect_trajectories` over the prompts whose answers are `known` (the model's own, from an earlier call: iterated
    to instead of generated again), then over the rest. A call stops after `save_every_s` (`stop_after_seconds`) and
    the next goes on where it stopped, so that `save(completions, record)` keeps the returned files current while the
    folder is read a few times a minute, not once a batch. The folder records the model and its dtype, so a resumed
    call with another refuses it."""
    folder = work / "trajectories"
    ids = list(prompts["prompt_id"])
    done = collected_answers(folder)
    already = {prompt_id for prompt_id in ids if prompt_id in done}
    record: dict[str, Any] = {"method": settings.method, "dtype": settings.dtype, "already": len(already)}
    lengths = [len(prompt) for prompt in encode_prompts(prompts, tokenizer)]
    start, generated, record["stopped"] = time.perf_counter(), set(), "done"

    def totals() -> dict[str, Any]:
        new = [prompt_id for prompt_id in ids if prompt_id in done and prompt_id not in already]
        return {"rows": len(new), "tokens": sum(len(done[p]) for p in new), "generated_rows": len(generated)}

    for given, group in _groups(ids, lengths, done, known):
        subset = prompts.select(group)
        answers = {ids[i]: known[ids[i]] for i in group} if given else None
        while not all(ids[i] in done for i in group):
            if timer.expired():
                record["stopped"] = "deadline"
                break
            before = len(done)
            collect_trajectories(
                model,
                tokenizer,
                subset,
                folder,
                **settings.collection_arguments(),
                method=settings.method,
                answers=answers,
                answers_of=settings.model_id if given else None,
                stop_after_seconds=min(save_every_s, timer.seconds_left()),
            )
            done = collected_answers(folder)
            if len(done) == before and not timer.expired():
                raise RuntimeError(f"a call of {save_every_s:g} s collected no trajectory into {folder}")
            if not given:
                generated |= {ids[i] for i in group if ids[i] in done}
            save(done, {**record, **totals()})
    seconds = time.perf_counter() - start
    record.update(totals(), seconds=round(seconds, 1))
    record.update(tokens_per_s=record["tokens"] / max(seconds, 1e-9), collected=len(done), of=len(ids))
    save(done, record)
    return record
