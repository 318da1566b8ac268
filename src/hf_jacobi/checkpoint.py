"""A saved checkpoint made complete: what every Jacobi checkpoint carries beside its weights, written where it is saved.

`JacobiForcingTrainer` calls `complete_checkpoint` each time it saves weights (final and `checkpoint-N/`), and
`hf-jacobi push` / `export-weights` read and write the same files, so a folder decodes the same way however it was
made: generation_config.json with `decoding="jacobi"` and every Jacobi setting, `custom_generate/` for users without
hf_jacobi, and, for trained weights, the training record that says so.

`custom_generate/` holds the files of `hf_jacobi.decoding` copied verbatim (its `generate.py` doubles as the Hub entry
point), so a user with only transformers runs the very loop this library runs and tests; there is no second
implementation to drift. The decoding package imports nothing outside itself for that reason.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

from transformers import GenerationConfig

from .decoding import generate as decoding_entry
from .decoding.config import JacobiConfig

CUSTOM_GENERATE_DIR = "custom_generate"
CUSTOM_GENERATE_REQUIREMENTS = ("torch>=2.4", "transformers>=5.17")
"""What transformers checks (custom_generate/requirements.txt) before it runs the exported loop."""

TUNE_REPORT = "jacobi_tune.json"
"""Written by `hf-jacobi tune` beside the generation config; the card quotes it to say how defaults were chosen."""

TRAINING_RECORD = "jacobi_forcing_training.json"
"""Written beside weights that Jacobi Forcing training produced: the run's method, base model, steps, block size and
recipe settings. A card claims the training only where this record (or an older run's training arguments) is."""

# A folder written by `save_pretrained` of a transformers model has config.json; one written by a PEFT model has
# adapter_config.json. Either is enough for `from_pretrained` to load it back.
MODEL_MARKERS = ("config.json", "adapter_config.json")


def is_checkpoint_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a loadable model or adapter (a `save_pretrained` folder)."""
    return any((Path(folder).expanduser() / marker).is_file() for marker in MODEL_MARKERS)


def decoding_sources() -> list[Path]:
    """The modules of `hf_jacobi.decoding` that make up the loop (its package `__init__` is not needed)."""
    folder = Path(decoding_entry.__file__).parent
    return sorted(path for path in folder.glob("*.py") if path.name != "__init__.py")


def export_custom_generate(folder: str | Path) -> Path:
    """Writes `folder/custom_generate/` (replacing an older one) and returns it."""
    target = Path(folder) / CUSTOM_GENERATE_DIR
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for source in decoding_sources():
        shutil.copyfile(source, target / source.name)
    (target / "requirements.txt").write_text("\n".join(CUSTOM_GENERATE_REQUIREMENTS) + "\n", encoding="utf-8")
    return target


def base_generation_config(folder: str | Path) -> GenerationConfig | None:
    """The generation config a checkpoint folder carries, else the one its config.json implies, else None.

    Its `decoding` and `jacobi_*` keys are always kept: transformers drops the attributes it does not know from a file
    marked `_from_model_config` (what `save_pretrained` writes for a model whose generation config came from its
    config.json and whose Jacobi settings were then set by hand), and those are the checkpoint's own defaults.
    """
    folder = Path(folder)
    path = folder / "generation_config.json"
    if path.is_file():
        config = GenerationConfig.from_pretrained(folder)
        saved = json.loads(path.read_text(encoding="utf-8"))
        for key in ("decoding", *JacobiConfig.setting_names()):
            if key in saved and not hasattr(config, key):
                setattr(config, key, saved[key])
        return config
    if (folder / "config.json").is_file():
        return GenerationConfig.from_pretrained(folder, config_file_name="config.json", _from_model_config=True)
    return None


def jacobi_generation_config(base: GenerationConfig | None, jacobi: JacobiConfig) -> GenerationConfig:
    """A copy of `base` (the caller's stays as it is) that decodes with Jacobi and `jacobi`'s settings by default.

    Every setting is written out, so that the file, and the card quoting it, say exactly how the checkpoint decodes.
    """
    config = copy.deepcopy(base) if base is not None else GenerationConfig()
    jacobi.write_to(config)
    config._from_model_config = False  # a file marked as derived from config.json may be regenerated on load
    return config


def complete_checkpoint(folder: str | Path, jacobi: JacobiConfig | None = None) -> JacobiConfig:
    """Writes `folder`'s generation_config.json with `decoding="jacobi"` and the Jacobi settings (`jacobi`, else those
    the folder already carries), and its `custom_generate/`. Returns the settings written.

    Args:
        folder: a saved checkpoint (weights or adapter).
        jacobi: the settings to write; None keeps the folder's own (its defaults where it has none).
    """
    base = base_generation_config(folder)
    settings = jacobi or JacobiConfig.from_generation_config(base)
    jacobi_generation_config(base, settings).save_pretrained(folder)
    export_custom_generate(folder)
    return settings


def write_training_record(folder: str | Path, record: dict[str, Any]) -> Path:
    """Writes `record` (JSON-serializable) as `folder`'s training record and returns its path."""
    path = Path(folder) / TRAINING_RECORD
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_training_record(folder: str | Path) -> dict[str, Any] | None:
    """`folder`'s training record, or None when it has none or it is not a JSON object."""
    path = Path(folder) / TRAINING_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
