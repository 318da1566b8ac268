"""Take committed data that no shipped result needs out of the working tree, listed where it can be restored from.

A clone carries the working tree: older rounds' trajectories and adapters and the campaign's other adapters are
history, not what a user who tries the package needs. Each path given leaves the tree (`git rm`), and
recipes/smollm2-135m/data/ARCHIVED.json lists every file of it with its SHA-256, its size and the commit that still
holds it; `make -f recipes/smollm2-135m/Makefile restore-data` writes them back from that commit (`git archive`,
which needs the clone's history, not a shallow one) and checks each file's hash. Run from the repository root:

    python lab/tools/archive_data.py recipes/smollm2-135m/data/adapter-round2 ...
    python lab/tools/archive_data.py --restore            # what restore-data runs
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = Path("recipes") / "smollm2-135m" / "data" / "ARCHIVED.json"
"""Relative to the repository root."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git(root: Path, *args: str, binary: bool = False):
    out = subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return out.stdout if binary else out.stdout.decode().strip()


def archive(paths: list[str], why: str, root: Path = ROOT) -> int:
    """Lists every tracked file under `paths` in the manifest (hash, size, the current commit), then `git rm`s them."""
    commit = git(root, "rev-parse", "HEAD")
    record = root / MANIFEST
    manifest = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {"entries": []}
    for path in paths:
        files = git(root, "ls-files", "--", path).splitlines()
        if not files:
            raise SystemExit(f"{path}: no tracked file there")
        if git(root, "status", "--porcelain", "--", path):
            raise SystemExit(
                f"{path}: uncommitted changes; commit them first, so that the commit holds what is listed"
            )
        listed = [{"path": f, "sha256": sha256((root / f).read_bytes()), "bytes": (root / f).stat().st_size}
                  for f in files]  # fmt: skip
        manifest["entries"].append({"path": path, "commit": commit, "why": why, "files": listed})
        git(root, "rm", "-r", "-q", "--", path)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    ignore = root / ".gitignore"  # restored files must never be taken into git again
    ignored = ignore.read_text(encoding="utf-8").splitlines() if ignore.is_file() else []
    ignore.write_text(
        "\n".join([*ignored, *(f"/{p}" for p in paths if f"/{p}" not in ignored)]) + "\n", encoding="utf-8"
    )
    git(root, "add", str(MANIFEST), ".gitignore")
    return 0


def restore(only: list[str], root: Path = ROOT) -> int:
    """Writes back every listed file (or those under `only`) from its commit, checking its SHA-256."""
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    for entry in manifest["entries"]:
        if only and not any(entry["path"].startswith(prefix) for prefix in only):
            continue
        data = git(root, "archive", entry["commit"], "--", entry["path"], binary=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for listed in entry["files"]:
                content = tar.extractfile(listed["path"]).read()
                if sha256(content) != listed["sha256"]:
                    raise SystemExit(f"{listed['path']}: SHA-256 differs from the manifest's")
                target = root / listed["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        print(f"restored {entry['path']} ({len(entry['files'])} files) from {entry['commit'][:10]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", help="tracked folders or files to archive (with --restore: which to restore)"
    )
    parser.add_argument("--why", default="", help="why they leave the tree, recorded in the manifest")
    parser.add_argument("--restore", action="store_true", help="write the listed files back, checked")
    args = parser.parse_args(argv)
    if args.restore:
        return restore(args.paths)
    if not args.paths:
        parser.error("name the paths to archive")
    return archive(args.paths, args.why)


if __name__ == "__main__":
    sys.exit(main())
