"""Collecting Jacobi trajectories over a prompt dataset, resumable and split across processes.

Trajectories come from `generate(decoding="jacobi")` itself, with a `TrajectoryRecorder` plugged into the loop, so
training sees exactly the states the decoder users run produces. Output is a folder of parquet shards (a `datasets`
dataset): each process writes its own shards, named by process rank, with an atomic rename, so that a crash never leaves
half a shard and an interrupted run resumes by skipping the prompt ids already on disk. Under `accelerate launch` every
process takes the prompts whose index modulo the number of processes is its rank.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import torch
from accelerate import PartialState
from tqdm.auto import tqdm

from ..decoding.config import JacobiConfig
from ..decoding.generate import enable_jacobi
from ..loading import eos_token_ids, left_padded
from .prompts import encode_prompts
from .trajectories import TrajectoryRecorder, block_states

logger = logging.getLogger(__name__)

SETTINGS_FILE = "collection.json"
SHARD_PATTERN = re.compile(r"trajectories-r(\d{3})-(\d{5})\.parquet$")

TRAJECTORY_FEATURES = datasets.Features(
    {
        "prompt_id": datasets.Value("string"),
        "prompt_ids": datasets.List(datasets.Value("int32")),
        "completion_ids": datasets.List(datasets.Value("int32")),
        "block_size": datasets.Value("int32"),
        "states": datasets.List(datasets.List(datasets.List(datasets.Value("int32")))),
        "fixed_points": datasets.List(datasets.List(datasets.Value("int32"))),
        "forward_passes": datasets.Value("int32"),
    }
)
"""Per prompt: its ids, the generated text, and per complete block its states (initial draft first, fixed point last)."""


def collect_trajectories(
    model,
    tokenizer,
    prompts: datasets.Dataset,
    output_dir: str | os.PathLike[str],
    *,
    block_size: int = 16,
    max_new_tokens: int = 256,
    batch_size: int = 1,
    shard_size: int = 64,
    chat: bool = True,
    max_prompt_tokens: int | None = None,
    draft_seed: int = 0,
    progress: bool = True,
) -> Path:
    """Runs Jacobi decoding over `prompts` (columns `prompt_id`, `messages`) and writes trajectory shards.

    Returns the output folder; read it with `load_trajectories`. Calling it again on the same folder with the same
    settings resumes: prompts already written are skipped. Settings that would make old and new shards disagree
    (block size, token budget, chat formatting) are refused with the values that differ.
    """
    for name, value, least in (
        ("block_size", block_size, 2),
        ("max_new_tokens", max_new_tokens, 1),
        ("batch_size", batch_size, 1),
        ("shard_size", shard_size, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}.")
    if max_new_tokens < block_size:
        raise ValueError(
            f"max_new_tokens ({max_new_tokens}) must be at least block_size ({block_size}): only complete blocks are kept."
        )
    missing = {"prompt_id", "messages"} - set(prompts.column_names)
    if missing:
        raise ValueError(
            f"the prompt dataset lacks the columns {sorted(missing)} (it has {prompts.column_names}); "
            "build it with hf_jacobi.load_prompts."
        )

    state = PartialState()
    output = Path(output_dir)
    settings = {"block_size": block_size, "max_new_tokens": max_new_tokens, "chat": chat, "draft_seed": draft_seed}
    if state.is_main_process:  # one process writes the settings; the others check theirs against them
        _check_or_write_settings(output, settings)
    state.wait_for_everyone()
    if not state.is_main_process:
        _check_or_write_settings(output, settings)

    done = _collected_ids(output)
    share = [i for i in range(len(prompts)) if i % state.num_processes == state.process_index]
    pending = [i for i in share if prompts[i]["prompt_id"] not in done]
    logger.info(
        "process %d: %d prompts, %d already collected", state.process_index, len(share), len(share) - len(pending)
    )

    model = enable_jacobi(model)
    pad_id = model.generation_config.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos_ids = eos_token_ids(model.generation_config)
    next_shard = _next_shard_number(output, state.process_index)
    buffer: list[dict[str, Any]] = []
    bar = tqdm(
        total=len(pending), desc=f"collect[{state.process_index}]", disable=not progress, position=state.process_index
    )
    for batch_indices in _batches(pending, batch_size):
        batch = prompts.select(batch_indices)
        prompt_ids = encode_prompts(batch, tokenizer, chat=chat, max_prompt_tokens=max_prompt_tokens)
        buffer.extend(
            _collect_batch(
                model, batch["prompt_id"], prompt_ids, pad_id, eos_ids, block_size, max_new_tokens, draft_seed
            )
        )
        bar.update(len(batch_indices))
        if len(buffer) >= shard_size:
            _write_shard(output, state.process_index, next_shard, buffer)
            next_shard, buffer = next_shard + 1, []
    if buffer:
        _write_shard(output, state.process_index, next_shard, buffer)
    bar.close()
    state.wait_for_everyone()
    return output


def load_trajectories(path: str | os.PathLike[str]) -> datasets.Dataset:
    """The trajectories collected into `path`, all shards, ordered by prompt id for a stable order across runs."""
    shards = sorted(str(p) for p in Path(path).glob("*.parquet") if SHARD_PATTERN.search(p.name))
    if not shards:
        raise ValueError(f"no trajectory shards (trajectories-rNNN-NNNNN.parquet) found in {path}.")
    dataset = datasets.load_dataset("parquet", data_files=shards, split="train", features=TRAJECTORY_FEATURES)
    return dataset.sort("prompt_id")


@torch.no_grad()
def _collect_batch(
    model,
    prompt_ids_list: list[str],
    prompts: list[list[int]],
    pad_id: int,
    eos_ids: set[int],
    block_size: int,
    max_new_tokens: int,
    draft_seed: int,
) -> list[dict[str, Any]]:
    recorder = TrajectoryRecorder()
    # Plain Jacobi, one block and no recycling: the states a block passes through are what training learns from.
    config = JacobiConfig(block_size=block_size, draft_seed=draft_seed)
    inputs = left_padded(prompts, pad_id, model.device)
    width = inputs["input_ids"].shape[1]
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
        return_dict_in_generate=True,
        trajectory_recorder=recorder,
        **config.to_generate_kwargs(),
    )
    records = []
    for row, (prompt_id, ids) in enumerate(zip(prompt_ids_list, prompts, strict=True)):
        generated = out.sequences[row, width:].tolist()
        end = next((i + 1 for i, token in enumerate(generated) if token in eos_ids), len(generated))
        generated = generated[:end]
        blocks = block_states(recorder.steps.get(row, []), generated, block_size)
        records.append(
            {
                "prompt_id": prompt_id,
                "prompt_ids": ids,
                "completion_ids": generated,
                "block_size": block_size,
                "states": blocks,
                "fixed_points": [states[-1] for states in blocks],
                "forward_passes": int(out.forward_passes[row]),
            }
        )
    return records


def _batches(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _check_or_write_settings(output: Path, settings: dict[str, Any]) -> None:
    path = output / SETTINGS_FILE
    if path.exists():
        previous = json.loads(path.read_text())
        differing = {k: (previous.get(k), v) for k, v in settings.items() if previous.get(k) != v}
        if differing:
            detail = ", ".join(f"{k}: {old!r} on disk, {new!r} now" for k, (old, new) in differing.items())
            raise ValueError(
                f"{output} holds trajectories collected with other settings ({detail}); use a new folder."
            )
        return
    output.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings, indent=2))
    os.replace(tmp, path)


def _collected_ids(output: Path) -> set[str]:
    ids: set[str] = set()
    for shard in output.glob("*.parquet"):
        if SHARD_PATTERN.search(shard.name):
            ids.update(pq.read_table(shard, columns=["prompt_id"]).column("prompt_id").to_pylist())
    return ids


def _next_shard_number(output: Path, rank: int) -> int:
    numbers = [
        int(m.group(2))
        for p in output.glob("*.parquet")
        if (m := SHARD_PATTERN.search(p.name)) and int(m.group(1)) == rank
    ]
    return max(numbers, default=-1) + 1


def _write_shard(output: Path, rank: int, number: int, records: list[dict[str, Any]]) -> None:
    final = output / f"trajectories-r{rank:03d}-{number:05d}.parquet"
    tmp = output / f".{final.name}.tmp"
    datasets.Dataset.from_list(records, features=TRAJECTORY_FEATURES).to_parquet(str(tmp))
    os.replace(tmp, final)
