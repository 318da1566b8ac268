"""Collecting Jacobi trajectories over a prompt dataset, resumable and split across processes.

Two methods record the same rows. `sequential` (the default) takes trajectories from `generate(decoding="jacobi")`
itself, with a `TrajectoryRecorder` plugged into the loop, so training sees exactly the states the decoder users run
produces. `parallel` (`block_iterations.py`) generates the greedy answers first, then iterates every block of a batch
at once from the known fixed points (the paper's block-by-block Jacobi decoding): several times faster where wide
forwards are cheap (a GPU, a CPU's bfloat16 units). Output is a folder of parquet shards (a `datasets`
dataset, see `shards.py`): each process writes its own shards, named by process rank. Every finished batch is on disk
as soon as it finishes: the shard being filled is rewritten atomically (temporary name, fsync, rename) with the new
rows, and the next shard starts once it holds `shard_size` rows. So a kill loses at most the batch in flight, whatever
the shard size, and running again on the folder resumes by skipping the prompt ids on disk, after removing what a kill
left half-written and setting aside (with a warning naming it) any shard that cannot be read, whose prompts are then
collected again. Under `accelerate launch` every process takes the prompts whose index modulo the number of processes
is its rank.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from ..decoding.generate import enable_jacobi
from ..loading import process_state
from .batching import in_batches
from .collection_batches import METHODS, BatchCollector
from .model_identity import HASH_CACHE, WeightHashCache, model_identity
from .prompts import encode_prompts
from .shards import (
    SCHEMA,
    check_nothing_lost,
    check_or_record,
    collection_settings,
    list_shards,
    read_shard,
    recorded_settings,
    repair,
    shard_path,
    shard_rank_and_number,
    write_shard,
)
from .trajectory_schema import TRAJECTORY_FEATURES, TrajectoryDataError, check_not_empty

logger = logging.getLogger(__name__)


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
    model_id: str | None = None,
    adapter: str | os.PathLike[str] | None = None,
    progress: bool = True,
    method: str = "sequential",
    answers: str | os.PathLike[str] | Mapping[str, Sequence[int]] | None = None,
    answers_of: str | None = None,
    stop_after_seconds: float | None = None,
) -> Path:
    """Runs Jacobi decoding over `prompts` (columns `prompt_id`, `messages`) and writes trajectory shards.

    Returns the output folder; read it with `load_trajectories`. Each batch of `batch_size` prompts is durable on
    disk as soon as it is decoded; `shard_size` only sets how many rows a file holds. Calling it again on the same
    folder with the same settings resumes: prompts already written are skipped, and a shard that cannot be read is
    set aside (logged) and its prompts collected again. Settings that would make old and new shards disagree
    (block size, token budget, chat formatting, and `model_id` when given: a name for the model, e.g. "embedded" or
    the base plus the adapter a second round collects from) are refused with the values that differ, and so is
    another model under the same name (see `model_identity`; `adapter`: the LoRA folder merged into `model`).

    `stop_after_seconds`: start no batch after this long (the batch in flight finishes and is written), so a call fits
    a time slot (a leased machine, a job queue's limit) and the next call on the folder goes on where it stopped.

    `method`: "sequential" (the loop's own states) or "parallel" (every block's iterations at once from the greedy
    answers, faster with a large `batch_size`; `block_iterations`); a folder holds one method's rows.

    `answers` (parallel method): fixed answers for the states to converge to instead of the model's own greedy ones,
    as a trajectory folder (its rows' completions, e.g. the base model's) or a mapping prompt id -> token ids. Each
    iteration is still `model`'s argmax given the state before it, and the first wrong token of a block takes the
    answer's token: on-policy states of a trained model on the base's answers, which training can then teach it to
    jump through without moving its answers away from the base's. Every prompt needs an answer (cut at
    `max_new_tokens`). `collection.json` records whose answers they are (`answers_of`; for a folder, by default the
    model its own `collection.json` names), and a resumed collection refuses other answers. Answers of the collecting
    model itself (`answers_of` equal to `model_id`, e.g. its greedy answers kept from an earlier run) make the same
    folder as a collection without them: the states are the model's own trajectories either way.
    """
    started = time.monotonic()
    _check_arguments(prompts, block_size, max_new_tokens, batch_size, shard_size, method)
    check_stop_after_seconds(stop_after_seconds)
    fixed, answers_of = _fixed_answers(answers, answers_of, method)
    state = process_state()
    output = Path(output_dir)
    settings = _folder_settings(block_size, max_new_tokens, chat, draft_seed, method, model_id)
    if fixed is not None and answers_of != model_id:  # the model's own answers: its own trajectories
        settings = {**settings, "answers_of": answers_of}
    _open_folder(output, settings, state, model, adapter)
    pending = _pending_prompts(prompts, output, state)
    if fixed is not None:  # every prompt's answer is checked before the first batch is decoded
        _answers_for(fixed, [prompts[i]["prompt_id"] for i in pending], max_new_tokens)
    collector = BatchCollector.for_model(
        enable_jacobi(model), tokenizer, method, block_size, max_new_tokens, draft_seed
    )
    writer = _ShardWriter(output, state.process_index, shard_size)
    bar = tqdm(
        total=len(pending), desc=f"collect[{state.process_index}]", disable=not progress, position=state.process_index
    )
    for batch_indices in in_batches(pending, batch_size):
        if stop_after_seconds is not None and time.monotonic() - started >= stop_after_seconds:
            logger.info("stop_after_seconds reached: %d prompts left for the next call", bar.total - bar.n)
            break
        batch = prompts.select(batch_indices)
        prompt_ids = encode_prompts(batch, tokenizer, chat=chat, max_prompt_tokens=max_prompt_tokens)
        given = None if fixed is None else _answers_for(fixed, batch["prompt_id"], max_new_tokens)
        writer.append(collector.rows(batch["prompt_id"], prompt_ids, given))
        bar.update(len(batch_indices))
    bar.close()
    state.wait_for_everyone()
    return output


def _fixed_answers(
    answers: str | os.PathLike[str] | Mapping[str, Sequence[int]] | None, answers_of: str | None, method: str
) -> tuple[dict[str, list[int]] | None, str | None]:
    """The fixed answers by prompt id and whose they are, read before any model work; None when not given."""
    if answers is None:
        if answers_of is not None:
            raise ValueError(f"answers_of={answers_of!r} names the owner of fixed answers, but no answers are given.")
        return None, None
    if method != "parallel":
        raise ValueError(
            f"fixed answers are iterated to by the parallel method only; got method={method!r}: pass method='parallel'"
        )
    if isinstance(answers, Mapping):
        if answers_of is None:
            raise ValueError("answers given as a mapping need answers_of, the name of the model that wrote them.")
        return {str(k): list(v) for k, v in answers.items()}, answers_of
    folder = Path(answers)
    rows = load_trajectories(folder)
    if answers_of is None:
        answers_of = (collection_settings(folder) or {}).get("model") or str(folder)
    return dict(zip(rows["prompt_id"], rows["completion_ids"], strict=True)), answers_of


def _answers_for(fixed: dict[str, list[int]], prompt_ids: list[str], max_new_tokens: int) -> list[list[int]]:
    """The fixed answers of a batch's prompts, cut at `max_new_tokens`; a prompt without one is refused by id."""
    missing = [prompt_id for prompt_id in prompt_ids if prompt_id not in fixed]
    if missing:
        raise ValueError(
            f"no fixed answer for the prompts {missing[:5]}{' ...' if len(missing) > 5 else ''} ({len(missing)} of "
            f"{len(prompt_ids)}): collect the answers' folder over the same prompts first"
        )
    return [fixed[prompt_id][:max_new_tokens] for prompt_id in prompt_ids]


def _folder_settings(block_size, max_new_tokens, chat, draft_seed, method, model_id) -> dict[str, Any]:
    """What `collection.json` records: the settings a resumed collection must share."""
    settings = {"block_size": block_size, "max_new_tokens": max_new_tokens, "chat": chat, "draft_seed": draft_seed}
    settings["method"] = method
    if model_id is not None:
        settings["model"] = model_id
    return recorded_settings(settings)


def _check_arguments(
    prompts: datasets.Dataset, block_size: int, max_new_tokens: int, batch_size: int, shard_size: int, method: str
) -> None:
    """Refuses sizes a collection cannot run with, an unknown method and a prompt set it cannot store and resume by
    prompt id."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}.")
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
    repeated = [i for i, n in collections.Counter(prompts["prompt_id"]).items() if n > 1]
    if repeated:
        raise ValueError(
            f"prompt ids must be unique (a trajectory is stored and resumed by its prompt id); repeated: {repeated[:5]}."
        )


def check_stop_after_seconds(stop_after_seconds: float | None) -> None:
    """Refuses a time limit that is not a finite number of seconds >= 0 (None: no limit); `hf-jacobi collect` calls it
    before the model loads."""
    if stop_after_seconds is None:
        return
    if (
        not isinstance(stop_after_seconds, (int, float))
        or isinstance(stop_after_seconds, bool)
        or not math.isfinite(stop_after_seconds)
        or stop_after_seconds < 0
    ):
        raise ValueError(f"stop_after_seconds must be a number of seconds >= 0 or None, got {stop_after_seconds!r}.")


def _open_folder(output: Path, settings: dict[str, Any], state, model, adapter: str | os.PathLike[str] | None) -> None:
    """Makes `output` ready to write into with `settings`, on every process: its recorded settings and model identity
    match this run's (recorded on the first run), and whatever a killed run left behind is repaired. Every process
    computes the identity and compares it; the main process first, and once its identity is accepted it saves the
    weight files' hashes in the folder, for the other processes and later resumes to reuse instead of reading the
    files again."""

    def check(write: bool) -> WeightHashCache:
        # the cache is read here, so that the other processes read it after the main process saved it
        cache = WeightHashCache(output / HASH_CACHE)
        identity = lambda: model_identity(model, name=settings.get("model"), adapter=adapter, cache=cache)  # noqa: E731
        check_or_record(output, settings, identity, write=write)
        return cache

    if state.is_main_process:  # one process writes the record and repairs; the others check theirs against it
        check(write=True).save()
        repair(output)
    state.wait_for_everyone()
    if not state.is_main_process:
        check(write=False)


def _pending_prompts(prompts: datasets.Dataset, output: Path, state) -> list[int]:
    """The indices of this process's share of `prompts` (every num_processes-th) that `output` does not hold yet."""
    done = _collected_ids(output)
    share = [i for i in range(len(prompts)) if i % state.num_processes == state.process_index]
    pending = [i for i in share if prompts[i]["prompt_id"] not in done]
    logger.info(
        "process %d: %d prompts, %d already collected", state.process_index, len(share), len(share) - len(pending)
    )
    return pending


def load_trajectories(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> datasets.Dataset:
    """The trajectories collected into `path`, all shards, ordered by prompt id for a stable order across runs.

    `path` may also be several folders (e.g. one per prompt source, each resumable on its own): their shards form one
    dataset, as long as no prompt is in two of them. Every shard is checked first: an unreadable file, a column
    missing, unexpected or of the wrong type, a prompt in two shards, or no rows at all raise one `TrajectoryDataError`
    (a ValueError) naming the file and the column.
    """
    folders = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(folder) for folder in path]
    if not folders:
        raise TrajectoryDataError("no trajectory folder given: name at least one folder written by hf-jacobi collect.")
    shards: list[Path] = []
    for folder in folders:
        found = list_shards(folder) if folder.is_dir() else []
        if not found:
            raise TrajectoryDataError(
                f"no trajectory shards (trajectories-rNNN-NNNNN.parquet) found in {folder}: collect them with "
                "hf_jacobi.collect_trajectories (hf-jacobi collect --output_dir ...)."
            )
        check_nothing_lost(folder)
        shards += found
    where: dict[str, Path] = {}
    for shard in shards:
        for prompt_id in read_shard(shard).column("prompt_id").to_pylist():
            if prompt_id in where:
                raise TrajectoryDataError(
                    f"prompt {prompt_id!r} is in both {where[prompt_id]} and {shard}: two collections wrote the same "
                    "prompt (or a file was copied in); move one of the two files out, then run the collection "
                    "again to complete its folder."
                )
            where[prompt_id] = shard
    check_not_empty(len(where), ", ".join(str(folder) for folder in folders))
    files = [str(shard) for shard in shards]
    dataset = datasets.load_dataset("parquet", data_files=files, split="train", features=TRAJECTORY_FEATURES)
    return dataset.sort("prompt_id")


def select_trajectories(
    dataset: datasets.Dataset, prompt_ids: Sequence[str], what: str = "the prompts"
) -> datasets.Dataset:
    """The rows of `dataset` whose prompt is one of `prompt_ids`, which must all be there.

    A run is reproduced from the prompts it trained on, not from a folder's contents at the time: a collection that
    resumed since and grew the folder would otherwise change the training set silently. A prompt without a
    trajectory is an error, not a smaller run.
    """
    wanted = set(prompt_ids)
    present = set(dataset["prompt_id"])
    missing = sorted(wanted - present)
    if missing:
        raise TrajectoryDataError(
            f"{len(missing)} of the {len(wanted)} prompts of {what} have no trajectory in this folder (first: "
            f"{missing[0]!r}); collect them first (hf-jacobi collect with the same prompts resumes the folder)."
        )
    return dataset.filter(lambda prompt_id: prompt_id in wanted, input_columns="prompt_id")


def _collected_ids(output: Path) -> set[str]:
    ids: set[str] = set()
    for shard in list_shards(output):
        ids.update(pq.read_table(shard, columns=["prompt_id"]).column("prompt_id").to_pylist())
    return ids


def _shard_to_fill(output: Path, rank: int, shard_size: int) -> tuple[int, pa.Table]:
    """The number of this process's shard to write next and the rows it already holds: its last shard while that one
    holds fewer than `shard_size` rows (a resumed run fills it), else a new one."""
    own = [shard for shard in list_shards(output) if shard_rank_and_number(shard)[0] == rank]
    if not own:
        return 0, SCHEMA.empty_table()
    number = shard_rank_and_number(own[-1])[1]
    rows = read_shard(own[-1])
    if rows.num_rows < shard_size:
        return number, rows
    return number + 1, SCHEMA.empty_table()


class _ShardWriter:
    """This process's shard being filled: each batch's rows are appended and the shard rewritten at once (atomically,
    so a kill loses at most the batch in flight), and a new shard starts once it holds `shard_size` rows."""

    def __init__(self, output: Path, rank: int, shard_size: int) -> None:
        self.output, self.rank, self.shard_size = output, rank, shard_size
        self.number, self.rows = _shard_to_fill(output, rank, shard_size)

    def append(self, records: list[dict[str, Any]]) -> None:
        self.rows = pa.concat_tables([self.rows, pa.Table.from_pylist(records, schema=SCHEMA)])
        write_shard(self.rows, shard_path(self.output, self.rank, self.number))
        if self.rows.num_rows >= self.shard_size:
            self.number, self.rows = self.number + 1, SCHEMA.empty_table()
