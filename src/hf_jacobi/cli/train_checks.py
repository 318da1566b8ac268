"""What `hf-jacobi train` checks of its trajectories against the model it loaded, before the first step.

Jacobi Forcing teaches a model its own fixed points: trajectories another model collected teach it that model's
answers, which its own Jacobi decoding will not reach. A tokenizer of another size fails in the first step anyway (one
line here instead); a model of the same vocabulary would train for hours on the wrong targets without a sign.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from ..data.model_identity import HASH_CACHE, WeightHashCache, identity_summary, model_identity, training_changes
from ..data.shards import IDENTITY_FILE, collection_settings
from .common import CliError

OTHER_MODEL_FLAG = "--trajectories_of_another_model"
"""The flag that trains on trajectories another model collected, knowingly (e.g. a fine-tuned sibling's)."""


def check_trajectories(
    dataset: datasets.Dataset, model: Any, script_args: Any, name: str | None, folders: list[str] | None = None
) -> None:
    """Both checks below, on `hf-jacobi train`'s `--trajectories` or the `folders` given (the identity one unless
    `--trajectories_of_another_model`)."""
    folders = script_args.trajectories if folders is None else folders
    check_token_ids(dataset, model, folders, name)
    if not script_args.trajectories_of_another_model:
        check_trajectory_model(model, folders, name)


def check_token_ids(dataset: datasets.Dataset, model: Any, folders: list[str], name: str | None) -> None:
    """Refuses trajectories with token ids past the model's vocabulary (collected with another model's tokenizer)
    before training starts, where the embedding would fail on them in the first step."""
    import pyarrow.compute as pc

    size = model.get_input_embeddings().num_embeddings
    ids = (pc.max(pc.list_flatten(dataset.data.column(c))).as_py() for c in ("prompt_ids", "completion_ids"))
    top = max((i for i in ids if i is not None), default=-1)
    if top >= size:
        records = [settings for folder in folders if (settings := collection_settings(folder)) is not None]
        sources = sorted({settings.get("model", "?") for settings in records})
        raise CliError(
            f"--trajectories {' '.join(folders)} hold token id {top}, past the {size}-token vocabulary of "
            f"--model_name_or_path {name or 'embedded'!r}: they were collected with another model ({', '.join(sources)});"
            " collect trajectories with the model you train"
        )


def check_trajectory_model(model: Any, folders: list[str], name: str | None) -> None:
    """Refuses trajectory folders whose recorded model identity (`model_identity.json`, written by the collection) is
    another model than the one loaded: another config, or other weights behind the same config. The dtype and the
    adapter may differ (see `training_changes`). Folders collected before identities were recorded are not checked.
    The loaded model's weight files are hashed once (reused from a folder's hash cache while unchanged)."""
    recorded = {
        folder: json.loads(path.read_text()) for folder in folders if (path := Path(folder) / IDENTITY_FILE).is_file()
    }
    if not recorded:
        return
    cache = WeightHashCache(Path(next(iter(recorded))) / HASH_CACHE)
    current = model_identity(model, cache=cache)
    for folder, identity in recorded.items():
        if changes := training_changes(identity, current):
            raise CliError(
                f"--trajectories {folder} were collected with model {identity.get('name')!r} "
                f"({identity_summary(identity)}), and --model_name_or_path {name or 'embedded'!r} is another model: "
                f"{'; '.join(changes)}. Jacobi Forcing trains a model on its own trajectories: collect them with this "
                f"model, or pass {OTHER_MODEL_FLAG} true to train on these anyway"
            )
