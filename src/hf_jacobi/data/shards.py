"""The trajectory shards on disk: atomic, durable writes; validated reads; repair after a crash.

A shard is `trajectories-r<rank>-<n>.parquet`. Every write goes to a temporary name in the same folder, is flushed
and fsynced, then renamed over the final name (and the folder fsynced), so a shard file is always a complete version:
a kill during a write leaves the previous version and a stray temporary file, which `repair` removes. A shard that is
unreadable anyway (a copy cut short, a disk error, random bytes) is named in an error by `read_shard`, and `repair`
moves it aside so that its prompts are collected again. Each process also lists the shards it wrote in its ledger
(`shards-r<rank>.json`), so that a shard deleted later, or left behind by a copy, is named when the folder is read
instead of training on the rest without a sign.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..atomic import write_text
from .model_identity import identity_changes, identity_summary
from .trajectory_schema import TRAJECTORY_FEATURES, TrajectoryDataError, check_trajectory_table

logger = logging.getLogger(__name__)

SHARD_PATTERN = re.compile(r"^trajectories-r(\d{3})-(\d{5})\.parquet$")
TEMPORARY_PATTERN = re.compile(r"^\.trajectories-r\d{3}-\d{5}\.parquet\.tmp$")
SCHEMA: pa.Schema = TRAJECTORY_FEATURES.arrow_schema
LEDGER_PATTERN = re.compile(r"^shards-r\d{3}\.json$")
LEDGER_TEMPORARY_PATTERN = re.compile(r"^\.shards-r\d{3}\.json\.tmp-[0-9a-f]+$")
SETTINGS_FILE = "collection.json"
"""Beside the shards: the settings that collected them (a resumed collection must use the same)."""
IDENTITY_FILE = "model_identity.json"
"""Beside the shards: the identity of the model that collected them (`model_identity`), apart from the settings so
that the settings file stays what it was (committed folders and `lab` compare it key by key across machines)."""


class CollectionMismatchError(ValueError):
    """A resumed collection would add trajectories of another model to a folder: refused in one line."""


UNRECORDED_DEFAULTS = {"method": "sequential"}
"""Settings recorded only when they differ from these (so that older folders and their comparisons stay as they were)."""


def recorded_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` as `collection.json` records them: a setting at its `UNRECORDED_DEFAULTS` value is left out."""
    return {k: v for k, v in settings.items() if k not in UNRECORDED_DEFAULTS or UNRECORDED_DEFAULTS[k] != v}


def check_or_record(
    folder: Path, settings: dict[str, Any], identity: Callable[[], dict[str, Any]], write: bool
) -> None:
    """Checks that `folder`'s recorded settings and model identity are this run's, or records them in a new folder.

    A folder whose settings differ is refused with the values that differ; one whose model differs (config, dtype,
    weights or adapter, see `identity_changes`) with a `CollectionMismatchError` naming what changed. A folder
    collected before identities were recorded resumes with a warning, its record left as it is: nothing can tell
    which model wrote its shards, so none is written in for it.

    Args:
        folder: the output folder.
        settings: this run's settings (block size, budget, chat, draft seed, the model's name when given).
        identity: computes this run's model identity (called only once the settings match).
        write: whether this process records a new folder and warns (the main process of a launch).
    """
    path = folder / SETTINGS_FILE
    if not path.exists():
        if write:  # the identity first: a folder with settings and no identity reads as one from before identities
            write_text(folder / IDENTITY_FILE, json.dumps(identity(), indent=2))
            write_text(path, json.dumps(settings, indent=2))
        return
    previous = json.loads(path.read_text())
    # a setting left unrecorded takes its default (folders from before it existed hold that)
    on_disk, now = {**UNRECORDED_DEFAULTS, **previous}, {**UNRECORDED_DEFAULTS, **settings}
    differing = {k: (on_disk.get(k), v) for k, v in now.items() if on_disk.get(k) != v}
    if differing:
        detail = ", ".join(f"{k}: {old!r} on disk, {new!r} now" for k, (old, new) in differing.items())
        raise ValueError(f"{folder} holds trajectories collected with other settings ({detail}); use a new folder.")
    if not (folder / IDENTITY_FILE).exists():
        if write:
            logger.warning(
                "%s records no model identity (collected before identities were recorded): the model's identity "
                "could not be checked; resuming on trust that %s is the model that collected it.",
                folder,
                repr(settings["model"]) if "model" in settings else "this run's model",
            )
        return
    recorded = json.loads((folder / IDENTITY_FILE).read_text())
    changes = identity_changes(recorded, identity())
    if changes:
        raise CollectionMismatchError(
            f"output_dir '{folder}' was collected with model {recorded.get('name')!r} ({identity_summary(recorded)}); "
            f"this run loads a different model: {'; '.join(changes)}. Use a new output_dir or the same model."
        )


SHARD_ZSTD_LEVEL = 9
"""Higher levels barely shrink a shard further, and at this one writing a shard stays quick."""


def shard_path(folder: Path, rank: int, number: int) -> Path:
    return folder / f"trajectories-r{rank:03d}-{number:05d}.parquet"


def list_shards(folder: Path) -> list[Path]:
    """The shard files of `folder`, in name order (rank, then number)."""
    return sorted(p for p in folder.glob("*.parquet") if SHARD_PATTERN.match(p.name))


def collection_settings(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The settings a trajectory folder was collected with (`collection.json`: block size, answer budget, chat, draft
    seed, the model's name and dtype, and the method and whose answers they are where those differ from the
    defaults), or None for a folder no collection has started in. A pipeline that keeps one folder per model or dtype
    reads here which one a folder holds before adding to it: a resumed collection refuses another model's rows."""
    path = Path(folder) / SETTINGS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def collected_answers(folder: str | os.PathLike[str]) -> dict[str, list[int]]:
    """Each prompt a trajectory folder holds, with its answer's token ids (none for a folder that does not exist or has
    no shard yet), read from those two columns only. What a driver counts its progress by, and fixed answers that
    another model's states can be collected toward (`collect_trajectories(answers=...)`)."""
    answers: dict[str, list[int]] = {}
    folder = Path(folder)
    if not folder.is_dir():
        return answers
    check_nothing_lost(folder)
    for shard in list_shards(folder):
        table = pq.read_table(shard, columns=["prompt_id", "completion_ids"]).to_pydict()
        answers.update(zip(table["prompt_id"], table["completion_ids"], strict=True))
    return answers


def shard_rank_and_number(path: Path) -> tuple[int, int]:
    match = SHARD_PATTERN.match(path.name)
    if match is None:
        raise ValueError(f"{path} is not named like a trajectory shard (trajectories-rNNN-NNNNN.parquet).")
    return int(match.group(1)), int(match.group(2))


def write_shard(table: pa.Table, path: Path) -> None:
    """Writes a shard to a temporary name beside `path`, fsyncs it and renames it over `path` (then fsyncs the folder):
    once this returns, `path` holds the new rows even after a kill or a power cut, and until then the old ones. The
    temporary name is fixed, so `repair` knows what a killed write left. Zstandard at SHARD_ZSTD_LEVEL: trajectory
    folders are data that users keep and commit, and it stores them in fewer bytes than Snappy."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as sink:
        pq.write_table(table, sink, compression="zstd", compression_level=SHARD_ZSTD_LEVEL)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(tmp, path)
    _fsync_folder(path.parent)
    _record_in_ledger(path)


def ledger_path(folder: Path, rank: int) -> Path:
    """The list of the shards process `rank` wrote into `folder`."""
    return folder / f"shards-r{rank:03d}.json"


def missing_shards(folder: Path) -> dict[Path, list[str]]:
    """The shards each ledger of `folder` lists that are not there (deleted, moved aside, or not copied along), by
    ledger; empty when every listed shard is there (or the folder predates ledgers)."""
    missing = {}
    for ledger in sorted(p for p in folder.glob("shards-r*.json") if LEDGER_PATTERN.match(p.name)):
        if absent := [name for name in _listed(ledger) if not (folder / name).is_file()]:
            missing[ledger] = absent
    return missing


def check_nothing_lost(folder: Path) -> None:
    """Refuses a folder whose ledgers list shards that are not there: training on the rest would silently drop their
    prompts (a file deleted, or a copy that left it behind)."""
    missing = missing_shards(folder)
    if missing:
        lost = ", ".join(name for names in missing.values() for name in names)
        ledgers = " ".join(ledger.name for ledger in missing)
        raise TrajectoryDataError(
            f"{folder} lacks {lost}, which its collection wrote ({ledgers} in the folder lists what it wrote): deleted, "
            "or not copied along. Copy the files back, or run the collection again on the folder with the same "
            f"settings to collect their prompts again; to train on the rest as it is, delete {ledgers}."
        )


def _listed(ledger: Path) -> list[str]:
    """The shard names a ledger lists; none for one that cannot be read (it only helps to notice a lost shard)."""
    try:
        names = json.loads(ledger.read_text(encoding="utf-8")).get("shards", [])
    except (OSError, ValueError, AttributeError):
        logger.warning("%s is unreadable: the shards it listed are not checked", ledger)
        return []
    return [name for name in names if isinstance(name, str)]


def _record_in_ledger(path: Path) -> None:
    """Adds a shard just written to its process's ledger (after the shard is durable: a kill in between leaves a
    shard the ledger does not list, never a listed shard that is not there)."""
    ledger = ledger_path(path.parent, shard_rank_and_number(path)[0])
    names = _listed(ledger) if ledger.is_file() else []
    if path.name not in names:
        _write_ledger(ledger, [*names, path.name])


def _write_ledger(ledger: Path, names: list[str]) -> None:
    write_text(ledger, json.dumps({"shards": sorted(names)}, indent=1))


def read_shard(path: Path) -> pa.Table:
    """The rows of one shard, checked: an unreadable file or one whose columns do not match raises a
    `TrajectoryDataError` naming the file and how to repair it."""
    try:
        return _read_checked(path)
    except TrajectoryDataError as exc:
        raise TrajectoryDataError(
            f"{exc} Run the collection again on {path.parent} with the same settings: it sets the file aside and "
            "collects its prompts again."
        ) from None


def repair(folder: Path) -> list[Path]:
    """Removes temporary files left by a killed write and moves unreadable or malformed shards aside (to
    `<name>.corrupt`, with a warning naming them), so that their prompts count as not collected; shards a ledger lists
    that are gone are struck from it (with a warning naming them), their prompts collected again. Returns the shards
    set aside. Only one process may run this, before any process starts writing."""
    for stray in folder.glob(".*.tmp*"):
        if TEMPORARY_PATTERN.match(stray.name) or LEDGER_TEMPORARY_PATTERN.match(stray.name):
            stray.unlink()
    set_aside = []
    for shard in list_shards(folder):
        try:
            _read_checked(shard)
        except TrajectoryDataError as exc:
            target = shard.with_name(shard.name + ".corrupt")
            os.replace(shard, target)
            logger.warning("%s Moved to %s; its prompts are collected again.", exc, target)
            set_aside.append(shard)
    for ledger, absent in missing_shards(folder).items():
        lost = [name for name in absent if not (folder / f"{name}.corrupt").exists()]  # those were named above
        if lost:
            logger.warning(
                "%s lists %s, which %s not there (deleted, or not copied along): %s prompts are collected again.",
                ledger, ", ".join(lost), "is" if len(lost) == 1 else "are", "its" if len(lost) == 1 else "their",
            )  # fmt: skip
        _write_ledger(ledger, [name for name in _listed(ledger) if name not in absent])
    if set_aside:
        _fsync_folder(folder)
    return set_aside


def _read_checked(path: Path) -> pa.Table:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TrajectoryDataError(f"{path} is not a readable parquet file, truncated or corrupt ({exc}).") from None
    check_trajectory_table(table, str(path), hint=None)
    return table if table.schema == SCHEMA else table.select(SCHEMA.names).cast(SCHEMA)


def _fsync_folder(folder: Path) -> None:
    """Makes a rename in `folder` durable (POSIX; elsewhere the rename is as durable as the platform makes it)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
