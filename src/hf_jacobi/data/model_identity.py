"""What a trajectory collection was collected from, recorded beside its shards so that a resume cannot mix models.

A folder's settings file names the model by the path it was loaded from; replacing the weights at that path (a tiny
Llama by a tiny Qwen2, one training step's checkpoint by the next) keeps the name and changes the trajectories. The
identity recorded here is what the model *is*:

- its config: `model_type`, `architectures` and the sha256 of the config dict (keys that say where or with which
  library version it was loaded left out), the dict itself kept so that a refusal names the keys that changed;
- the dtype it was loaded in (the same weights in bfloat16 and in float32 decode to different trajectories);
- its weights: the full sha256 of every weight file (`*.safetensors`, `pytorch_model*.bin`) of the folder it was
  loaded from, found from `config._name_or_path` (a Hub id through the local Hub cache), else, for a model built in
  memory, of its parameters' bytes;
- the LoRA adapter merged into it, when one is named, by the full sha256 of its files.

Why full hashes: a sampled fingerprint (safetensors headers, sizes, the first and last MiB) is blind to exactly the
change that matters most here, two checkpoints of one training run, which share every name, shape and size and differ
in values anywhere in the file. Why it is still cheap on a resume: each file's hash is cached in the output folder
(`HASH_CACHE`) under its resolved path, size, mtime, ctime and inode, and reused only while all five are unchanged.
A file rewritten in place changes its ctime (which, unlike mtime, no copy tool can set back) and one replaced by
`save_pretrained` also its inode, so the cache misses and the file is hashed again; an unchanged 7B checkpoint is
read once per output folder, on the first run, right after `from_pretrained` read it (from the page cache, mostly).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ..atomic import write_text
from ..file_manifest import sha256_file

logger = logging.getLogger(__name__)

HASH_CACHE = ".weight_hashes.json"
"""In the output folder: the sha256 of each weight file hashed so far, with the file's stat data it holds for."""
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
ADAPTER_PATTERNS = ("adapter_config.json", "adapter_model.*")
_UNHASHED_CONFIG_KEYS = {"transformers_version", "dtype", "torch_dtype", "name_or_path"}
_STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "inode")


def model_identity(
    model: Any,
    *,
    name: str | None = None,
    adapter: str | os.PathLike[str] | None = None,
    cache: WeightHashCache | None = None,
) -> dict[str, Any]:
    """The identity of a loaded model (see the module docstring), as a JSON-ready dict.

    Args:
        model: the model the trajectories come from (an adapter, if any, already merged).
        name: what the refusal message calls it (default: the path it was loaded from).
        adapter: the folder of the LoRA adapter merged into `model`, hashed with the model.
        cache: the weight file hashes known from earlier runs, completed with those computed here (the caller saves
            it, once the identity is accepted); None: every file is hashed.

    Returns:
        {"name", "config", "dtype", "weights", "adapter"}: what `identity_changes` compares.
    """
    cache = cache if cache is not None else WeightHashCache(None)
    folder = model_folder(model)
    files = _matching(folder, WEIGHT_PATTERNS) if folder is not None else []
    weights = _files_fingerprint(folder, files, cache) if files else _parameters_fingerprint(model)
    adapter_identity = None
    if adapter is not None:
        adapter_files = _matching(Path(adapter), ADAPTER_PATTERNS)
        adapter_identity = {"path": str(adapter), **_files_fingerprint(Path(adapter), adapter_files, cache)}
    return {
        "name": name or getattr(model.config, "_name_or_path", "") or "a model built in memory",
        "config": config_identity(model),
        "dtype": str(getattr(model, "dtype", "unknown")).removeprefix("torch."),
        "weights": weights,
        "adapter": adapter_identity,
    }


def config_identity(model: Any) -> dict[str, Any]:
    """model_type, architectures and the sha256 of the config dict (canonical JSON) with the values hashed.

    A model built in memory has no `architectures` until `save_pretrained` writes its class name there (in place, on
    the live config): the class name stands in for it, so that saving a model does not change its identity."""
    values = _hashed_config(model.config.to_dict())
    values["architectures"] = values.get("architectures") or [type(model).__name__]
    text = json.dumps(values, sort_keys=True, default=str)
    return {
        "model_type": values.get("model_type"),
        "architectures": values["architectures"],
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "values": json.loads(text),
    }


def model_folder(model: Any) -> Path | None:
    """The local folder the model's weights were loaded from: `config._name_or_path` when it is a folder, the Hub
    cache's snapshot of the revision it was loaded at when it is a Hub id cached here, else None."""
    name = getattr(model.config, "_name_or_path", "") or ""
    if not name:
        return None
    if Path(name).is_dir():
        return Path(name)
    try:
        from huggingface_hub import snapshot_download

        revision = getattr(model.config, "_commit_hash", None)
        return Path(snapshot_download(name, revision=revision, local_files_only=True))
    except Exception:  # not a Hub id, or not in the local cache: the parameters are fingerprinted instead
        return None


def identity_changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two identities, one phrase each ("its config differs (model_type llama -> qwen2)");
    empty when they are the same model."""
    changes = [_config_change(recorded, current), _weights_change(recorded, current, comparable_only=False)]
    if recorded.get("dtype") != current["dtype"]:
        changes.insert(1, f"its dtype differs ({recorded.get('dtype')} -> {current['dtype']})")
    old_adapter, new_adapter = recorded.get("adapter"), current["adapter"]
    if (old_adapter or {}).get("sha256") != (new_adapter or {}).get("sha256"):
        changes.append(f"its adapter differs ({_adapter_label(old_adapter)} -> {_adapter_label(new_adapter)})")
    return [change for change in changes if change]


TRAINING_UNCOMPARED_CONFIG_KEYS = frozenset({"use_cache", "quantization_config"})
"""Config keys a training load may set differently from the collection's load without being another model."""


def training_changes(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What makes the model a run trains (`current`) another model than the one that collected its trajectories
    (`recorded`), one phrase each; empty when it is the same model.

    Only the config and the weights count here. The dtype may differ (trajectories collected in float32 train a model
    loaded in bfloat16), and so may the adapter (a later round collects from the base with the round's adapter merged
    and trains that adapter further on the base). Weights fingerprinted two ways (files then, parameters now) cannot
    be compared and are not a change."""
    changes = [
        _config_change(recorded, current, TRAINING_UNCOMPARED_CONFIG_KEYS),
        _weights_change(recorded, current, comparable_only=True),
    ]
    return [change for change in changes if change]


def _config_change(recorded: dict[str, Any], current: dict[str, Any], uncompared: frozenset = frozenset()) -> str:
    """ "its config differs (...)", or "" when the configs agree on every key but the `uncompared` ones."""
    old, new = recorded.get("config") or {}, current["config"]
    before, after = old.get("values"), new.get("values")
    if uncompared and isinstance(before, dict) and isinstance(after, dict):
        differs = any(before.get(key) != after.get(key) for key in (set(before) | set(after)) - uncompared)
    else:
        differs = old.get("sha256") != new["sha256"]
    return f"its config differs ({_config_difference(old, new)})" if differs else ""


def _weights_change(recorded: dict[str, Any], current: dict[str, Any], comparable_only: bool) -> str:
    """ "its weights differ (...)", "its weights cannot be compared (...)" (unless `comparable_only`), or ""."""
    old, new = recorded.get("weights") or {}, current["weights"]
    if old.get("source") != new["source"]:
        if comparable_only:
            return ""
        return (
            f"its weights cannot be compared (fingerprinted from {old.get('source')} then, from {new['source']} now)"
        )
    return f"its weights differ ({_files_difference(old, new)})" if old.get("sha256") != new["sha256"] else ""


def identity_summary(identity: dict[str, Any]) -> str:
    """The short hashes that name a model in a message: "config sha 1a2b3c4d5e6f…, weights sha …"."""
    parts = [
        f"config sha {_short((identity.get('config') or {}).get('sha256'))}",
        f"weights sha {_short((identity.get('weights') or {}).get('sha256'))}",
    ]
    if identity.get("adapter"):
        parts.append(f"adapter sha {_short(identity['adapter'].get('sha256'))}")
    return ", ".join(parts)


def _hashed_config(values: Any) -> Any:
    """The config dict without what says where or how it was loaded rather than what the model is: private keys
    (`_name_or_path`, `_commit_hash`, `_attn_implementation`...), the transformers version and the dtype (recorded
    on its own), at every level (a multimodal config nests its text config)."""
    if isinstance(values, dict):
        return {
            key: _hashed_config(value)
            for key, value in values.items()
            if not str(key).startswith("_") and key not in _UNHASHED_CONFIG_KEYS
        }
    if isinstance(values, (list, tuple)):
        return [_hashed_config(value) for value in values]
    return values


def _matching(folder: Path, patterns: Iterable[str]) -> list[Path]:
    found = {path for pattern in patterns for path in folder.glob(pattern) if path.is_file()}
    return sorted(found, key=lambda path: path.name)


def _files_fingerprint(folder: Path, files: list[Path], cache: WeightHashCache) -> dict[str, Any]:
    """The sha256 of each file (by name within `folder`, so a moved folder keeps its identity) and one over all."""
    entries = {path.name: {"size": path.stat().st_size, "sha256": cache.sha256(path)} for path in files}
    lines = "".join(f"{name}\t{entry['size']}\t{entry['sha256']}\n" for name, entry in entries.items())
    return {"source": "files", "sha256": hashlib.sha256(lines.encode()).hexdigest(), "files": entries}


def _parameters_fingerprint(model: Any) -> dict[str, Any]:
    """The sha256 of every state-dict tensor's name, dtype, shape and bytes: for a model with no weight files."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.reshape(-1).contiguous().cpu().view(torch.uint8).numpy())
    return {"source": "parameters", "sha256": digest.hexdigest()}


def _config_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    for key in ("model_type", "architectures"):
        if old.get(key) != new.get(key):
            return f"{key} {_plain(old.get(key))} -> {_plain(new.get(key))}"
    before, after = old.get("values"), new["values"]
    if not isinstance(before, dict):
        return f"sha {_short(old.get('sha256'))} -> {_short(new['sha256'])}"
    keys = sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key))
    shown = ", ".join(f"{key} {_plain(before.get(key))} -> {_plain(after.get(key))}" for key in keys[:3])
    return shown + (f", and {len(keys) - 3} more" if len(keys) > 3 else "")


def _files_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    before, after = old.get("files"), new.get("files")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return f"sha {_short(old.get('sha256'))} -> {_short(new['sha256'])}"
    if sorted(before) != sorted(after):
        return f"files {sorted(before)} -> {sorted(after)}"
    changed = [name for name in after if before[name].get("sha256") != after[name]["sha256"]]
    if not changed:
        return f"sha {_short(old.get('sha256'))} -> {_short(new['sha256'])}"
    first = changed[0]
    more = f", and {len(changed) - 1} more files" if len(changed) > 1 else ""
    return f"{first} sha {_short(before[first].get('sha256'))} -> {_short(after[first]['sha256'])}{more}"


def _adapter_label(adapter: dict[str, Any] | None) -> str:
    return "none" if not adapter else f"{adapter.get('path')!r} sha {_short(adapter.get('sha256'))}"


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _short(digest: str | None) -> str:
    return f"{digest[:12]}…" if digest else "unrecorded"


class WeightHashCache:
    """File hashes kept between runs in one JSON file, each valid while its file's size, mtime, ctime and inode are
    the ones recorded with it (see the module docstring for why that is enough)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.entries, self.changed = path, {}, False
        if path is not None and path.is_file():
            try:
                entries = json.loads(path.read_text(encoding="utf-8")).get("files", {})
                self.entries = entries if isinstance(entries, dict) else {}
            except (OSError, ValueError, AttributeError):
                logger.warning("%s is unreadable; the weight files are hashed again", path)

    def sha256(self, path: Path) -> str:
        """The file's sha256, from the cache while its stat data match, else read in full (and cached)."""
        resolved = path.resolve()  # a Hub cache snapshot links to its blobs: their stat data are the file's
        stat = resolved.stat()
        key = dict(zip(_STAT_KEYS, (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino), strict=True))
        entry = self.entries.get(str(resolved))
        if isinstance(entry, dict) and all(entry.get(name) == value for name, value in key.items()):
            return entry["sha256"]
        digest = sha256_file(resolved)
        self.entries[str(resolved)] = {**key, "sha256": digest}
        self.changed = True
        return digest

    def save(self) -> None:
        """Writes the hashes back to the cache file when any was added (one process of a launch calls this)."""
        if self.path is not None and self.changed:
            write_text(self.path, json.dumps({"files": self.entries}, indent=1, sort_keys=True))
            self.changed = False
