"""LoRA adapters on a loaded model: the Jacobi Forcing adapter shipped for the embedded model, merging an adapter in
(with its Jacobi defaults), and exporting a trained one as package data within a size limit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .gguf_cache import DEFAULT_MODEL_NAME, ModelNotAvailableError

JACOBI_FORCING_WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-jacobi-forcing"
"""The Jacobi Forcing adapter for the embedded model, shipped as package data (model card beside it)."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def missing_adapter_files(folder: str | os.PathLike[str]) -> list[str]:
    """The files of a PEFT adapter folder (as `hf-jacobi train` writes with use_peft) that `folder` lacks."""
    return [name for name in ADAPTER_FILES if not (Path(folder) / name).is_file()]


def adapter_folder_problem(folder: str | os.PathLike[str]) -> str | None:
    """What is wrong with `folder` as a PEFT adapter folder, phrased to follow its name; None when it is one."""
    missing = missing_adapter_files(folder)
    return f"is not a PEFT adapter folder (missing {missing})" if missing else None


MAX_SHIPPED_BYTES = 25 * 1024**2


def export_target_problem(adapter: str | os.PathLike[str], target: str | os.PathLike[str]) -> str | None:
    """What is wrong with `target` as the folder `export_adapter` replaces, phrased to follow its name; None for a new
    or empty folder, or an earlier export (nothing in it but what an export writes)."""
    from .checkpoint import TRAINING_RECORD

    target = Path(target)
    if target.resolve() == Path(adapter).resolve():
        return "is the adapter folder being exported; give another folder"
    written = {*ADAPTER_FILES, "generation_config.json", TRAINING_RECORD}
    others = sorted(p.name for p in target.iterdir() if p.name not in written) if target.is_dir() else []
    if others:
        return (
            f"holds files an export does not write ({', '.join(others[:5])}), which replacing it would delete; give "
            "a new or empty folder, or an earlier export's"
        )
    return None


def apply_adapter(model: Any, folder: str | os.PathLike[str]) -> Any:
    """The model with a PEFT adapter merged in (plain weights again, so decoding pays nothing for it), carrying the
    adapter folder's Jacobi settings from its generation_config.json when it has one.

    The settings are what `generate(decoding="jacobi")` uses; plain `generate()` stays greedy, so that every greedy
    reference the commands compare against (`--compare`, the demo, the bench's AR baselines) is really greedy."""
    folder = Path(folder)
    missing = missing_adapter_files(folder)
    if missing:
        raise ModelNotAvailableError(
            f"no Jacobi Forcing adapter in {folder} (missing {missing}); expected a PEFT adapter folder as "
            "`hf-jacobi train` writes with use_peft (for the shipped one: reinstall hf-jacobi)"
        )
    from transformers import GenerationConfig

    from .decoding.config import JacobiConfig

    try:
        merged = _merged(model, folder)
    except (RuntimeError, ValueError) as error:  # shapes or module names of another base model
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith("size mismatch")), None)
        detail = detail or next((line for line in lines if "not found in the base model" in line), None)
        if detail is None:  # anything else (out of memory, a broken file) is not the adapter's fit
            raise
        raise ModelNotAvailableError(
            f"the adapter in {folder} does not fit this model: it was trained for another base model ({detail})"
        ) from error
    merged.eval()
    if (folder / "generation_config.json").is_file():
        JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(folder)).write_to(
            merged.generation_config, decoding="greedy"
        )
    return merged


def _merged(model: Any, folder: Path) -> Any:
    """peft's merge where peft is installed; without it (a decoding-only install), a plain LoRA's merge done here."""
    import importlib.util

    if importlib.util.find_spec("peft") is not None:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    return merge_plain_lora(model, folder)


PLAIN_LORA_DEFAULTS = {"use_dora": False, "fan_in_fan_out": False, "modules_to_save": None, "bias": "none"}
"""The LoRA features `merge_plain_lora` merges as peft would: anything else needs peft itself."""


@torch.no_grad()
def merge_plain_lora(model: Any, folder: str | os.PathLike[str]) -> Any:
    """Merges a plain LoRA adapter (peft's files: adapter_config.json, adapter_model.safetensors) into `model` in place
    and returns it: each target linear weight W becomes W + (B @ A) * alpha / r (alpha / sqrt(r) with rsLoRA), the
    product taken in float32 and added in W's dtype, as peft's merge does on a CPU. This is what lets a decoding-only
    install (no peft) load the shipped Jacobi Forcing adapter; an adapter using more than that (DoRA, per-module ranks,
    extra trained modules, biases) names what it uses and asks for peft."""
    import json

    from safetensors.torch import load_file

    folder = Path(folder)
    config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    unsupported = [key for key, plain in PLAIN_LORA_DEFAULTS.items() if config.get(key, plain) not in (plain, [], {})]
    unsupported += [key for key in ("rank_pattern", "alpha_pattern") if config.get(key)]
    if config.get("peft_type", "LORA") != "LORA" or unsupported:
        raise ModelNotAvailableError(
            f"the adapter in {folder} uses {unsupported or [config.get('peft_type')]}, which only peft merges: "
            "pip install 'hf-jacobi[train]'"
        )
    rank, alpha = config["r"], config["lora_alpha"]
    scale = alpha / rank**0.5 if config.get("use_rslora") else alpha / rank
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    modules = dict(model.named_modules())
    for key, lora_a in tensors.items():
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
        lora_b = tensors[key.replace(".lora_A.", ".lora_B.")]
        if name not in modules:
            raise ValueError(f"Target module {name} not found in the base model")
        weight = modules[name].weight
        delta = (lora_b.float() @ lora_a.float()) * scale
        if delta.shape != weight.shape:
            raise ValueError(
                f"size mismatch for {name}: the adapter's {tuple(delta.shape)}, the model's {tuple(weight.shape)}"
            )
        weight += delta.to(weight.dtype)
    return model


def export_adapter(
    adapter: str | os.PathLike[str], target: str | os.PathLike[str], jacobi: Any, base_model: str = DEFAULT_MODEL_NAME
) -> Path:
    """Copies a trained adapter's weights and config into `target` (e.g. JACOBI_FORCING_WEIGHTS) with `jacobi` (a
    JacobiConfig) as its generation defaults, refusing anything over MAX_SHIPPED_BYTES: package data must stay small.
    The config names `base_model` (the hub id) instead of the training machine's local cache path."""
    import json
    import shutil

    from transformers import GenerationConfig

    from .atomic import atomic_folder
    from .checkpoint import TRAINING_RECORD

    adapter = Path(adapter)
    if problem := adapter_folder_problem(adapter):
        raise ValueError(f"{adapter} {problem}")
    size = sum((adapter / name).stat().st_size for name in ADAPTER_FILES)
    if size > MAX_SHIPPED_BYTES:
        raise ValueError(f"the adapter in {adapter} is {size / 2**20:.1f} MiB, over the {MAX_SHIPPED_BYTES >> 20} MiB "
                         "allowed as package data; train a lower LoRA rank")  # fmt: skip
    target = Path(target)
    if problem := export_target_problem(adapter, target):
        raise ValueError(f"the output folder {str(target)!r} {problem}")
    if target.is_dir():  # a new export replaces the old one (a developer step: the old one is in git)
        shutil.rmtree(target)
    with atomic_folder(target) as staging:
        shutil.copyfile(adapter / "adapter_model.safetensors", staging / "adapter_model.safetensors")
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
        config["base_model_name_or_path"] = base_model
        # PEFT keeps target_modules as a set and writes it in hash order, which changes per process: sorted, a
        # reproduced export's config is byte-identical to the shipped one
        if isinstance(config.get("target_modules"), list):
            config["target_modules"] = sorted(config["target_modules"])
        (staging / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        jacobi.write_to(GenerationConfig()).save_pretrained(staging)
        if (adapter / TRAINING_RECORD).is_file():  # the evidence a card's claim of training rests on goes along
            shutil.copyfile(adapter / TRAINING_RECORD, staging / TRAINING_RECORD)
    return target
