"""Stage 5: what one device call brings back. A call returns at most 8 files of at most 16 MiB each, 64 MiB in all, from
no deeper than two folders under $OUT, named in letters, digits, '.', '_' and '-'; anything else is left behind.

The output folder holds exactly the campaign's returned files: campaign.json (the record, every run's train log
included), prompts.parquet, completions.parquet (what a later call resumes from), judged.md, and the winner (judged
weights, train log, trainer state) as winner.tar, cut into winner.tar.00, .01, ... when it is larger than one file may
be (join them with `cat winner.tar.* > winner.tar`): seven files at most, so the call's own log can be the eighth.
`check_limits` says whether the folder fits before the call ends.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

MIB = 2**20
MAX_FILES = 8
MAX_FILE = 16 * MIB
MAX_TOTAL = 64 * MIB
CHUNK = int(15.5 * MIB)
"""The size of a winner.tar piece: under the per-file limit with room to spare."""
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def pack_winner(weights: Path, extras: list[Path], out: Path, chunk: int = CHUNK) -> list[Path]:
    """Writes the judged weights folder's files and `extras` (train log, trainer state) into out/winner.tar, cut into
    pieces of `chunk` bytes when larger; removes an earlier winner's files first. Returns the files written."""
    for old in out.glob("winner.tar*"):
        old.unlink()
    archive = out / "winner.tar"
    with tarfile.open(archive, "w") as tar:
        for file in sorted(p for p in weights.iterdir() if p.is_file()):
            tar.add(file, arcname=f"weights/{file.name}")
        for file in extras:
            if file.is_file():
                tar.add(file, arcname=file.name)
    size = archive.stat().st_size
    if size <= chunk:
        return [archive]
    pieces = []
    with archive.open("rb") as source:
        for number in range(-(-size // chunk)):
            piece = out / f"winner.tar.{number:02d}"
            piece.write_bytes(source.read(chunk))
            pieces.append(piece)
    archive.unlink()
    return pieces


def check_limits(out: Path) -> list[str]:
    """What in `out` a device call would not bring back (empty: everything comes back)."""
    files = sorted(p for p in out.rglob("*") if p.is_file())
    problems = [f"{len(files)} files, more than {MAX_FILES}"] if len(files) > MAX_FILES else []
    total = sum(p.stat().st_size for p in files)
    if total > MAX_TOTAL:
        problems.append(f"{total / MIB:.1f} MiB in all, more than {MAX_TOTAL // MIB}")
    for path in files:
        relative = path.relative_to(out)
        if path.stat().st_size > MAX_FILE:
            problems.append(f"{relative}: {path.stat().st_size / MIB:.1f} MiB, more than {MAX_FILE // MIB}")
        if len(relative.parts) > 3 or not all(_NAME.match(part) for part in relative.parts):
            problems.append(f"{relative}: too deep or a name the device tool refuses")
    return problems
