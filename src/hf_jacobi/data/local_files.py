"""Local .json/.jsonl/.parquet files read with `datasets`, with errors that name the file, the line and the fix, and
the one resolver of a data source named on the command line (`load_data_source`: a local file or folder, else a Hub
dataset), which prompt sources and bench problems share.

`datasets` reports a bad JSON line as "An error occurred while generating the dataset", an empty file as a bare
StopIteration, and does not check UTF-8 at all (a Latin-1 file loads, then fails when a row is read). Prompt files
(collection) and problem files (bench) both come through here, so each of those says what is wrong and where.
UTF-8 is checked up front (a streaming decode, cheap next to parsing); the JSON is only re-read to find the bad line
after `datasets` failed, so a good file costs nothing extra.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datasets

_CHUNK = 1 << 20
LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
"""The file suffixes read here, and the `datasets` builder of each."""
JSON_FORMS = "one JSON object per line (JSON Lines) or a JSON list of objects"


def check_utf8(path: Path) -> None:
    """Raises ValueError naming the line of the first byte that is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                line = lines_before + error.object[: error.start].count(b"\n") + 1
                byte = error.object[error.start]
                raise ValueError(
                    f"{str(path)!r}, line {line}: not UTF-8 text (byte 0x{byte:02x}: {error.reason}); "
                    "save the file as UTF-8"
                ) from None
            if not chunk:
                return
            lines_before += chunk.count(b"\n")


def json_problem(path: Path) -> str | None:
    """What keeps `path` from being read as JSON rows, naming the line; None when nothing is found."""
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return f"{str(path)!r} holds no rows; expected {JSON_FORMS}"
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        pass  # not one JSON document: read as JSON Lines below
    else:
        if isinstance(whole, list):
            if not whole:
                return f"{str(path)!r} holds no rows (an empty JSON list); expected {JSON_FORMS}"
            kinds = [i for i, item in enumerate(whole) if not isinstance(item, dict)]
            if kinds:
                return f"{str(path)!r}: item {kinds[0]} of the JSON list is not an object; expected {JSON_FORMS}"
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            return (
                f"{str(path)!r}, line {number}: not valid JSON ({error.msg}, column {error.colno}); "
                f"expected {JSON_FORMS}"
            )
        if not isinstance(value, dict):
            return f"{str(path)!r}, line {number}: a JSON {type(value).__name__}, not an object; expected {JSON_FORMS}"
    return None


@contextlib.contextmanager
def _builder_logs_silenced(builder: str) -> Iterator[None]:
    """The builder logs a parse error with its traceback before raising; the error raised here says it in one line."""
    logger = logging.getLogger(f"datasets.packaged_modules.{builder}")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_local_dataset(files: list[Path], builder: str, name: str) -> datasets.Dataset:
    """The rows of `files` (all read by the `datasets` builder "json" or "parquet"); `name` is how the user gave
    them. Raises ValueError naming the file (and line) that cannot be read, or saying that there are no rows."""
    import datasets

    if builder == "json":
        for path in files:
            check_utf8(path)
    try:
        with _builder_logs_silenced(builder):
            dataset = datasets.load_dataset(builder, data_files=[str(path) for path in files], split="train")
    except Exception as error:  # datasets wraps parse errors in DatasetGenerationError, an empty file is StopIteration
        problems = [json_problem(path) for path in files] if builder == "json" else []
        found = next((problem for problem in problems if problem), None)
        if found is not None:
            raise ValueError(found) from error
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"could not read {name!r} as {builder} rows: {reason}") from error
    if len(dataset) == 0:
        raise ValueError(f"{name!r} holds no rows")
    return dataset


# --- a data source named on the command line: a local file or folder, else a Hub dataset ----------------------------

DATA_SUFFIXES = (*LOCAL_BUILDERS, ".csv", ".tsv", ".txt", ".arrow", ".gz", ".zip")
"""Suffixes that mark a source as a file even when it does not exist, so a typo is reported instead of a Hub lookup."""
ACCEPTED = f"a {'/'.join(LOCAL_BUILDERS)} file or a directory of them"


class MissingDataFile(FileNotFoundError, ValueError):
    """A local data file or folder that does not exist (a ValueError too, like every other bad source)."""


def is_local_source(source: str) -> bool:
    """Whether `source` means a file or folder here rather than a Hub repo id ("name", "namespace/name" or either
    with ":config")."""
    path = Path(source).expanduser()
    return (
        path.exists()
        or source.startswith(("/", ".", "~"))
        or source.count("/") > 1
        or path.suffix.lower() in DATA_SUFFIXES
    )


def load_local_source(source: str) -> datasets.Dataset:
    """The rows of a local .json/.jsonl/.parquet file, or of every such file of a folder (one kind per folder)."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in LOCAL_BUILDERS)
        if not files:
            raise ValueError(f"directory {source!r} holds no {'/'.join(LOCAL_BUILDERS)} files")
    elif path.suffix.lower() not in LOCAL_BUILDERS:
        raise ValueError(f"unsupported dataset file {source!r} (extension {path.suffix!r}); accepted: {ACCEPTED}")
    elif not path.is_file():
        raise MissingDataFile(f"local path {source!r} does not exist; expected {ACCEPTED}")
    else:
        files = [path]
    builders = {LOCAL_BUILDERS[p.suffix.lower()] for p in files}
    if len(builders) > 1:
        raise ValueError(f"directory {source!r} mixes json and parquet files; keep one kind per directory")
    return load_local_dataset(files, builders.pop(), source)


def load_hub_dataset(source: str, split: str, default_configs: dict[str, str] | None = None) -> datasets.Dataset:
    """A Hub dataset; `name:config` picks a config, else `default_configs` may name one for `name`. A failure (offline,
    no such dataset or split) is a ValueError that suggests a local file."""
    import datasets

    name, _, config = source.partition(":")
    config = config or (default_configs or {}).get(name)
    try:
        if config is None:
            return datasets.load_dataset(name, split=split)
        return datasets.load_dataset(name, config, split=split)
    except Exception as error:
        raise ValueError(
            f"could not load dataset {source!r} (split {split!r}) from the Hugging Face Hub: {error}. "
            "If you are offline, pass a local .json, .jsonl or .parquet file instead"
        ) from error


def load_data_source(source: str, split: str, default_configs: dict[str, str] | None = None) -> datasets.Dataset:
    """The rows `source` names: a local file or folder (`is_local_source`), else a Hub dataset (`split` applies)."""
    if is_local_source(source):
        return load_local_source(source)
    return load_hub_dataset(source, split, default_configs)
