"""Upload a trained checkpoint folder (full model or PEFT adapter) to the Hugging Face Hub.

A Trainer output folder holds more than the model: intermediate ``checkpoint-*`` folders, optimizer and scheduler
states, TensorBoard logs. Those are large, useless to anyone loading the model, and the optimizer state can be
several times the size of the weights, so they are left out of the upload (``UPLOAD_IGNORE_PATTERNS``).

Everything goes through ``huggingface_hub.HfApi``; the endpoint is resolved at call time (``HF_ENDPOINT`` is only
read by huggingface_hub when it is first imported), which lets tests and mirrors point the upload elsewhere.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..checkpoint import is_checkpoint_folder

__all__ = [
    "UPLOAD_IGNORE_PATTERNS",
    "HubUploadError",
    "checkpoint_folder",
    "upload_checkpoint",
]


class HubUploadError(RuntimeError):
    """The Hub could not be reached or refused the upload; the message names the endpoint and what to check."""


def _transport_errors() -> tuple[type[Exception], ...]:
    """Connection failures (refused, DNS, timeouts) of the HTTP client huggingface_hub talks through: httpx for
    huggingface_hub 1.x, its fork httpx2 for 2.x."""
    found: list[type[Exception]] = [ConnectionError, TimeoutError]
    for client in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(client).TransportError)
        except ImportError:
            continue
    return tuple(found)


# Patterns are matched by huggingface_hub with fnmatch against paths relative to the folder, and `*` crosses `/`:
# "checkpoint-*" therefore drops whole intermediate checkpoint folders, "*.pt" drops .pt files at any depth.
UPLOAD_IGNORE_PATTERNS: list[str] = [
    "checkpoint-*",  # intermediate Trainer checkpoints (each a full copy of the weights plus optimizer state)
    "runs/*",  # TensorBoard event files
    "*.pt",  # optimizer.pt, scheduler.pt, scaler.pt: training state, only useful to resume training
    "rng_state*.pth",  # per-process RNG states saved for resuming
    "trainer_state.json",  # Trainer bookkeeping (log history, best checkpoint), not part of the model
    "training_args.bin",  # pickled TrainingArguments: not loadable without the training code, and a pickle
    "heldout_reference.json",  # the held-out callback's reference answers, kept so that a resumed run can score them
    ".cache/*",  # local caches (e.g. huggingface_hub's upload metadata)
]


def checkpoint_folder(folder: str | os.PathLike) -> Path:
    """The folder as a Path; fails (before any staging or network call) when it cannot be a loadable checkpoint."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise ValueError(f"Checkpoint folder {str(folder)!r} does not exist.")
    if not path.is_dir():
        raise ValueError(f"Checkpoint folder {str(folder)!r} is not a directory.")
    if not is_checkpoint_folder(path):
        raise ValueError(
            f"{str(folder)!r} is not a saved checkpoint: expected config.json (a model) or adapter_config.json "
            "(a peft adapter) in it, as written by save_pretrained."
        )
    return path


def _check_repo_id(repo_id: str) -> None:
    """Reject malformed ids locally with huggingface_hub's own rules, rather than as an HTTP error mid-upload."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(f"Invalid repo id {repo_id!r}: expected 'namespace/name' or 'name' ({err})") from err


def upload_checkpoint(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    revision: str | None = None,
    commit_message: str = "Upload Jacobi Forcing checkpoint",
    endpoint: str | None = None,
    create_pr: bool = False,
) -> str:
    """Create ``repo_id`` if needed and upload ``folder`` to it in one commit; return the commit URL.

    ``folder`` must contain ``config.json`` (full model) or ``adapter_config.json`` (PEFT adapter). Training leftovers
    matching ``UPLOAD_IGNORE_PATTERNS`` are not uploaded. ``private`` only applies when the repo is created: an
    existing repo keeps its visibility. With ``revision`` (other than ``"main"``) the branch is created from the
    default branch if missing and the commit goes there. With ``create_pr`` the commit is opened as a pull request
    against the default branch (huggingface_hub does not support PRs against another branch, so ``revision`` must
    then be unset); the returned URL is that of the commit on the PR ref.

    ``endpoint`` defaults to ``HF_ENDPOINT`` as set now, then to huggingface_hub's default endpoint. ``token``
    defaults to huggingface_hub's usual lookup (``HF_TOKEN``, then the stored login).

    Raises ``ValueError`` for a missing or non-model folder, a malformed repo id or ``create_pr`` with a branch,
    ``RuntimeError`` when huggingface_hub is in offline mode, and ``HubUploadError`` (a RuntimeError, in one line)
    when the endpoint cannot be reached or answers with an HTTP error.
    """
    path = checkpoint_folder(folder)
    _check_repo_id(repo_id)
    if create_pr and revision not in (None, hf_constants.DEFAULT_REVISION):
        raise ValueError(
            f"create_pr=True opens a pull request against the default branch; it cannot be combined with "
            f"revision={revision!r}."
        )
    # Read at call time (not imported by value) so that a patched constant is seen. Flipping it here would change
    # the behaviour of every other huggingface_hub user in the process, so offline mode is the caller's decision.
    if hf_constants.HF_HUB_OFFLINE:
        raise RuntimeError(
            "Uploading to the Hugging Face Hub needs network access, but offline mode is on (HF_HUB_OFFLINE=1 is "
            "set). Unset HF_HUB_OFFLINE (or set it to 0) for the upload."
        )

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    try:
        return _upload(
            HfApi(endpoint=endpoint, token=token), path, repo_id, private, revision, commit_message, create_pr
        )
    except _transport_errors() as error:
        raise HubUploadError(
            f"could not reach the Hub at {endpoint or hf_constants.ENDPOINT} ({type(error).__name__}: {error}); "
            "check the network connection and HF_ENDPOINT"
        ) from error
    except HfHubHTTPError as error:
        raise _refusal(error, repo_id) from error


def _refusal(error: HfHubHTTPError, repo_id: str) -> HubUploadError:
    """The Hub's HTTP error in one line, with what to check for the usual statuses."""
    status = error.response.status_code if error.response is not None else "?"
    hint = {
        401: "check --token or HF_TOKEN",
        403: "check that the token may write to this repository",
        404: "check the repo id and --revision",
    }.get(status, "retry, or check the Hub's status")
    summary = str(error).splitlines()[0] if str(error) else type(error).__name__
    return HubUploadError(f"the Hub refused the upload to {repo_id!r} (HTTP {status}: {summary}); {hint}")


def _upload(
    api: HfApi,
    path: Path,
    repo_id: str,
    private: bool,
    revision: str | None,
    commit_message: str,
    create_pr: bool,
) -> str:
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    # "refs/pr/N" (resuming an upload into an existing pull request) is a ref the Hub created, not a branch.
    if revision and revision != hf_constants.DEFAULT_REVISION and not revision.startswith("refs/"):
        api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id,
        folder_path=path,
        repo_type="model",
        revision=revision,
        commit_message=commit_message,
        create_pr=create_pr,
        # A copy: upload_folder extends the list it is given in place with its own defaults (`.git`, ...).
        ignore_patterns=list(UPLOAD_IGNORE_PATTERNS),
    )
    return str(info.commit_url)
