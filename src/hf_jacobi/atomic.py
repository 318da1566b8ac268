"""Writing outputs so that a failure leaves the previous state: paths checked before any work, files and folders
written under a temporary name beside their target and renamed into place.

A rename within one file system is atomic on POSIX, so a reader (or a rerun after a crash) sees either the old file
or the new one, never half of it. Single files are flushed to disk before the rename; folders of model weights are
not (fsyncing gigabytes costs more than it protects against a power cut). Standard library only, so any layer of the
package can use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["OutputPathError", "atomic_folder", "check_writable", "staged_files", "write_text"]


class OutputPathError(ValueError):
    """An output path that cannot be written: raised before any work, naming the path and what to do instead."""


def _probe(folder: Path, what: str, path: Path) -> None:
    """Creates and removes a file in `folder`: the one check that also holds for root and read-only mounts."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".hf-jacobi-probe-", dir=folder)
    except OSError as error:
        raise OutputPathError(
            f"{what} {str(path)!r} cannot be written: {folder} is not writable ({error.strerror}); "
            "give a path in a writable folder"
        ) from None
    os.close(handle)
    os.unlink(probe)


def check_writable(path: str | os.PathLike[str], *, folder: bool, what: str = "output") -> Path:
    """`path` as a Path once it is known that it can be written: an existing or creatable folder (`folder=True`), or
    a file whose folder is; raises OutputPathError otherwise. Nothing is created."""
    path = Path(path).expanduser()
    if folder and path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {str(path)!r} is a file, not a folder; give a folder path")
    if not folder and path.is_dir():
        raise OutputPathError(f"{what} {str(path)!r} is a folder; give a file path")
    existing = path if folder and path.is_dir() else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(f"{what} {str(path)!r} cannot be created: {str(existing)!r} is a file, not a folder")
    _probe(existing, what, path)
    return path


def _temporary_sibling(path: Path, make: bool) -> Path:
    """A new unused name beside `path` (same folder, so same file system); created as a folder when `make`.

    `os.mkdir` with mode 0o777 (unlike `mkdtemp`'s 0o700) lets the umask decide, as for any folder the user makes.
    """
    while True:
        candidate = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
        if not make:
            if not candidate.exists():
                return candidate
            continue
        with contextlib.suppress(FileExistsError):
            os.mkdir(candidate, 0o777)
            return candidate


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Writes `text` to `path` atomically (its folder is created if missing) and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_sibling(path, make=False)
    try:
        # os.open with 0o666 (unlike mkstemp's 0o600) lets the umask decide the file's mode.
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def staged_files(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields an empty temporary folder; when the block ends without an error, every file written there replaces
    the file of the same name in `folder` (created if missing). On an error `folder` is left as it was.

    Other files in `folder` are kept, so a results folder can be reused. A missing `folder` appears whole, with
    all its files, in one rename. A subfolder written there (a checkpoint's `custom_generate/`) replaces the one of
    the same name whole, in two renames: rename(2) cannot replace a folder that is not empty, so the old one is
    moved aside first, which is what lets a second run save into the folder of the first.
    """
    folder = Path(folder)
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with atomic_folder(folder) as staging:
            yield staging
        return
    staging = _temporary_sibling(folder / "staged", make=True)
    try:
        yield staging
        for item in sorted(staging.iterdir()):
            _replace(item, folder / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(item: Path, target: Path) -> None:
    """Renames `item` over `target`; a folder over a folder by moving the old one aside, then removing it."""
    if not (item.is_dir() and target.is_dir() and not target.is_symlink()):
        os.replace(item, target)
        return
    old = _temporary_sibling(target, make=False)
    os.replace(target, old)
    try:
        os.replace(item, target)
    except OSError:
        os.replace(old, target)  # the old folder back where it was, as on any other error
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary folder beside `path` that becomes `path` in one rename when the block ends without an
    error; on an error it is removed and `path` is left as it was. `path` must not exist or be an empty folder."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise OutputPathError(f"{str(path)!r} already exists and is not an empty folder; give a new or empty folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = _temporary_sibling(path, make=True)
    try:
        yield staging
        os.replace(staging, path)  # replacing an empty folder is part of rename(2)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
