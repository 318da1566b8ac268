"""Data that leaves the working tree stays restorable (lab/tools/archive_data.py): listed with its hash and commit,
ignored by git once restored, and written back only when its bytes are the ones listed. On a throwaway git repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab" / "tools"))
import archive_data


def _repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "data" / "old").mkdir(parents=True)
    (root / "data" / "old" / "weights.bin").write_bytes(b"\x00\x01" * 100)
    (root / "data" / "old" / "notes.txt").write_text("round 1\n")
    (root / "data" / "kept.txt").write_text("ships\n")
    for command in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *command], cwd=root, check=True)
    return root


def test_archived_data_is_listed_removed_ignored_and_restored_checked(tmp_path: Path, capsys) -> None:
    root = _repository(tmp_path)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    assert archive_data.archive(["data/old"], "not shipped", root=root) == 0
    manifest = json.loads((root / archive_data.MANIFEST).read_text())
    (entry,) = manifest["entries"]
    assert entry["path"] == "data/old" and entry["commit"] == commit and entry["why"] == "not shipped"
    assert {f["path"] for f in entry["files"]} == {"data/old/weights.bin", "data/old/notes.txt"}
    assert not (root / "data" / "old").exists() and (root / "data" / "kept.txt").exists()
    assert "/data/old" in (root / ".gitignore").read_text().splitlines()
    assert archive_data.restore([], root=root) == 0
    assert (root / "data" / "old" / "weights.bin").read_bytes() == b"\x00\x01" * 100
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert not [line for line in status.splitlines() if line.startswith("??")]  # restored files stay ignored
    entry["files"][0]["sha256"] = "0" * 64
    (root / archive_data.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SystemExit, match="SHA-256 differs from the manifest's"):
        archive_data.restore([], root=root)


def test_uncommitted_or_untracked_data_is_refused(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    (root / "data" / "old" / "notes.txt").write_text("edited\n")
    with pytest.raises(SystemExit, match="uncommitted changes"):
        archive_data.archive(["data/old"], "", root=root)
    with pytest.raises(SystemExit, match="no tracked file there"):
        archive_data.archive(["data/nothing"], "", root=root)
