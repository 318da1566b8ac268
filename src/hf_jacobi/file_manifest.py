"""A folder trusted only when its manifest verifies: the size and sha256 of every file, in a JSON file written last.

The manifest's presence marks the folder as complete (it is flushed and fsynced after every other file), and each
listed file is checked by size and content hash before the folder is used, so a crash mid-write, a truncated or
edited file, or a foreign folder is reported instead of being read. What else the manifest must say (a format
version, the source the folder was built from) is the caller's to check; see `gguf_cache` for the embedded model.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

_HASH_CHUNK = 1 << 24


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(folder: Path, name: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the manifest `name` in `folder`, None), or (None, why there is no usable one)."""
    manifest_path = folder / name
    if not folder.is_dir():
        return None, f"{folder} does not exist"
    if not manifest_path.is_file():
        return None, f"manifest {manifest_path} is missing (incomplete or foreign cache)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"manifest {manifest_path} is unreadable: {exc}"
    if not isinstance(manifest, dict):
        return None, f"manifest {manifest_path} is not a JSON object"
    return manifest, None


def files_problem(folder: Path, manifest: dict[str, Any], required: tuple[str, ...]) -> str | None:
    """Why the files the manifest lists (which must include `required`) do not match it, or None when all do."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    missing_required = [name for name in required if name not in files]
    if missing_required:
        return f"manifest does not list {missing_required}"
    for name, entry in files.items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            return f"manifest lists an unsafe path {name!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or not entry.get("sha256"):
            return f"manifest entry for {name!r} is malformed"
        path = folder / rel
        try:
            size = path.stat().st_size
        except OSError:
            return f"{path} is missing"
        if size != entry["size"]:
            return f"{path} has {size} bytes, expected {entry['size']}"
        try:
            digest = sha256_file(path)
        except OSError as exc:
            return f"{path} is unreadable: {exc}"
        if digest != entry["sha256"]:
            return f"{path} has sha256 {digest}, expected {entry['sha256']}"
    return None


def write_manifest(folder: Path, name: str, header: dict[str, Any]) -> None:
    """Writes the manifest `name`: `header` plus the size and sha256 of every file in `folder` (call it last)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {**header, "files": files}
    # Written last and flushed: its presence is what marks the folder as complete.
    with (folder / name).open("w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
