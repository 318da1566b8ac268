"""Weights small enough to bring back: LoRA adapters cast to bfloat16, and a full-parameter run as a low-rank (SVD)
approximation of its weight delta, written as a PEFT LoRA adapter.

Why: a lent GPU returns at most 64 MiB per call, and a full fine-tune of the 135M model is over 500 MB in float32. The
delta of every matrix (the seven projections of each layer, and the embedding the LM head is tied to) is replaced by
its best rank-r approximation (truncated SVD, split as B = U sqrt(S), A = sqrt(S) Vh into LoRA factors with scaling 1);
the norms' deltas are tiny and kept whole (`modules_to_save`). The adapter is what gets judged, so the figures are
those of the weights that come back. Writing it through PEFT itself (set the factors of a fresh LoRA model, then
`save_pretrained`) keeps the file format PEFT's own.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

ADAPTER_FILE = "adapter_model.safetensors"


def to_bfloat16(source: Path, target: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """A copy of the LoRA adapter in `source` with its LoRA factors in bfloat16 (what is judged and returned); `dtype`
    names another (float32 keeps them exact, for checks). Whole modules an adapter carries (`modules_to_save`: the
    norms of a full run) stay as they are: they are small, and a norm's weight rounded to bfloat16 moves every
    activation after it."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("adapter_config.json", "README.md", "generation_config.json"):
        if (source / name).is_file() and source.resolve() != target.resolve():
            shutil.copy(source / name, target / name)
    tensors = load_file(source / ADAPTER_FILE)
    cast = {k: v.to(dtype) if v.is_floating_point() and ".lora_" in k else v for k, v in tensors.items()}
    save_file(cast, target / ADAPTER_FILE)
    return target


def factors(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(B [out, rank], A [rank, in], relative Frobenius error) of the best rank-`rank` approximation of `delta`; a
    matrix of lower rank than `rank` is exact, its factors padded with zeros (every LoRA module has the same rank)."""
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    total = float(s.square().sum())
    error = math.sqrt(float(s[r:].square().sum()) / total) if total > 0 else 0.0
    b = torch.zeros(delta.shape[0], rank, dtype=torch.float32, device=delta.device)
    a = torch.zeros(rank, delta.shape[1], dtype=torch.float32, device=delta.device)
    b[:, :r], a[:r] = u[:, :r] * root, root[:, None] * vh[:r]
    return b, a, error


def rank_for_budget(shapes: list[tuple[int, int]], budget_bytes: int, bytes_per_value: int = 2) -> int:
    """The largest rank whose factors of every (rows, columns) matrix fit in `budget_bytes` (at least 1)."""
    per_rank = sum(rows + columns for rows, columns in shapes) * bytes_per_value
    return max(1, budget_bytes // per_rank)


def _modules(model) -> tuple[dict[str, torch.nn.Module], dict[str, torch.nn.Module]]:
    """The model's matrices (Linear and Embedding modules by name) and its norm-like modules with a 1-D weight and no
    bias; anything else with parameters is refused (a delta there could not be carried)."""
    matrices, vectors = {}, {}
    for name, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and set(own) == {"weight"}:
            matrices[name] = module
        elif set(own) == {"weight"} and own["weight"].dim() == 1:
            vectors[name] = module
        else:
            raise ValueError(f"{name} ({type(module).__name__}, {sorted(own)}) has no low-rank form here")
    return matrices, vectors


def _changed(base, tuned) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The weight delta (tuned - base) of every matrix that changed, and the names of the vectors that changed; a
    matrix tied to another (the LM head to the embedding) is counted once, under its first name."""
    base_matrices, base_vectors = _modules(base)
    tuned_matrices, tuned_vectors = _modules(tuned)
    deltas, seen = {}, set()
    for name, module in tuned_matrices.items():
        weight = module.weight
        if id(weight) in seen:
            continue
        seen.add(id(weight))
        delta = weight.detach().float() - base_matrices[name].weight.detach().float().to(weight.device)
        if bool(delta.any()):
            deltas[name] = delta
    vectors = [
        name
        for name, module in tuned_vectors.items()
        if not torch.equal(module.weight.detach().cpu(), base_vectors[name].weight.detach().cpu())
    ]
    return deltas, vectors


def _set_factors(lora, deltas: dict[str, torch.Tensor], rank: int) -> tuple[dict[str, float], float, float]:
    """Sets every LoRA module of `lora` to the rank-`rank` factors of its delta; returns each matrix's relative error,
    the squared norm of the whole delta and of what the approximation leaves out."""
    errors, total, residual = {}, 0.0, 0.0
    for name, delta in deltas.items():
        module = lora.base_model.model.get_submodule(name)
        embedding = isinstance(module.base_layer, torch.nn.Embedding)
        b, a, error = factors(delta.T if embedding else delta, rank)
        errors[name] = error
        norm = float(delta.float().square().sum())
        total, residual = total + norm, residual + norm * error**2
        if embedding:  # PEFT's embedding delta is (B @ A).T with B [dim, r] and A [r, vocab]
            module.lora_embedding_B["default"].data = b.to(module.lora_embedding_B["default"].dtype)
            module.lora_embedding_A["default"].data = a.to(module.lora_embedding_A["default"].dtype)
        else:
            module.lora_B["default"].weight.data = b.to(module.lora_B["default"].weight.dtype)
            module.lora_A["default"].weight.data = a.to(module.lora_A["default"].weight.dtype)
    return errors, total, residual


def svd_adapter(
    base,
    tuned,
    target: Path,
    rank: int | None = None,
    budget_bytes: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> dict[str, Any]:
    """Writes into `target` a LoRA adapter (tensors in `dtype`) whose merge into `base` approximates `tuned` (same
    architecture, `tuned` fine-tuned from `base`); the rank is `rank`, else the largest that fits `budget_bytes`.
    Returns what it did: rank, modules, the relative error of the whole delta and of the worst matrix, the bytes."""
    import copy
    import warnings

    from peft import LoraConfig, get_peft_model

    deltas, vectors = _changed(base, tuned)
    if not deltas:
        raise ValueError("the tuned model's matrices equal the base's: nothing to approximate")
    shapes = [tuple(delta.shape) for delta in deltas.values()]
    rank = rank if rank is not None else rank_for_budget(shapes, budget_bytes or 2**25)
    config = LoraConfig(
        r=rank,
        lora_alpha=rank,
        target_modules=sorted(deltas),
        modules_to_save=vectors or None,
        init_lora_weights=False,
    )
    with warnings.catch_warnings():  # the tied embedding: its merged delta reaches the LM head, as intended here
        warnings.simplefilter("ignore", UserWarning)
        lora = get_peft_model(copy.deepcopy(base), config)  # a copy: PEFT wraps modules in place
    errors, total, residual = _set_factors(lora, deltas, rank)
    tuned_vectors = _modules(tuned)[1]
    for name in vectors:
        wrapper = lora.base_model.model.get_submodule(name)
        wrapper.modules_to_save["default"].weight.data = tuned_vectors[name].weight.detach().clone()
    lora.save_pretrained(target, save_embedding_layers=False)  # the factors only, not the embedding they change
    to_bfloat16(target, target, dtype)
    worst = max(errors, key=errors.get)
    return {
        "rank": rank,
        "matrices": len(deltas),
        "vectors_kept_whole": len(vectors),
        "relative_error": math.sqrt(residual / total) if total > 0 else 0.0,
        "worst_matrix": {"name": worst, "relative_error": errors[worst]},
        "bytes": (target / ADAPTER_FILE).stat().st_size,
    }
