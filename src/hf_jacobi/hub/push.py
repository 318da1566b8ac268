"""Publishing a saved checkpoint (full weights or a LoRA adapter) with everything a user needs.

The checkpoint is staged in a separate folder (the user's own folder is never edited), completed with the Jacobi
generation config, the model card and `custom_generate/`, and uploaded in one commit. The card claims Jacobi Forcing
training only for a checkpoint that carries the record of it (`jacobi_forcing_record`).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_folder, check_writable
from ..card import BenchResults, CardInfo, fenced_files
from ..checkpoint import TRAINING_RECORD
from ..decoding.config import JacobiConfig
from .export import jacobi_forcing_record, prepare_publish_folder, stage_checkpoint
from .upload import checkpoint_folder, upload_checkpoint


@dataclass
class PublishResult:
    folder: Path
    url: str | None
    jacobi: JacobiConfig


def base_model_of(folder: Path) -> str | None:
    """The base model an adapter names; full checkpoints do not record theirs reliably, so the user says it."""
    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        return json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
    return None


def _card_info(
    source: Path,
    repo_id: str,
    base_model: str | None,
    datasets: list[str] | None,
    training_data: str | None,
    recipe_files: list[Path] | None,
    license: str,
) -> CardInfo:
    """What the card of `source` says: Jacobi Forcing training (with its data) only when `source` carries the record
    of it, and the base model given or named by an adapter (a warning when neither names it)."""
    trained = _trained(source, bool(datasets or training_data))
    card = CardInfo(
        repo_id=repo_id,
        base_model=_named_base(source, base_model),
        adapter=(source / "adapter_config.json").is_file(),
        datasets=list(datasets or []) if trained else [],
        recipe=fenced_files([Path(p) for p in recipe_files or []]),
        license=license,
        trained=trained,
    )
    if training_data and trained:
        card.training_data = training_data
    return card


def _named_base(source: Path, base_model: str | None) -> str | None:
    """The base model given, else the one an adapter names; a warning when neither says it (the card then can only
    call it "an unknown base model", and link nothing)."""
    base_model = base_model or base_model_of(source)
    if base_model is None:
        warnings.warn(
            f"the base model of {str(source)!r} is unknown (a full checkpoint does not record it): the card will say "
            "'an unknown base model'; name it with --base-model (a Hub id is linked from the card)",
            UserWarning,
            stacklevel=4,
        )
    return base_model


def _trained(source: Path, describes_training: bool) -> bool:
    """Whether `source` carries the record of Jacobi Forcing training; a warning when it does not but the caller
    described training data, which the card then leaves out (it would claim training that is not on record)."""
    record = jacobi_forcing_record(source)
    if record is None and describes_training:
        warnings.warn(
            f"{str(source)!r} carries no record of Jacobi Forcing training (the {TRAINING_RECORD} "
            "JacobiForcingTrainer writes): the card presents it with Jacobi decoding settings and leaves out the training "
            "data and datasets given",
            UserWarning,
            stacklevel=4,
        )
    return record is not None


def _checked_output_dir(output_dir: Path | None, dry_run: bool) -> Path | None:
    """`--output-dir` once it is known to be a writable, new or empty folder (a dry run needs one: it keeps only that
    folder), before anything is rendered."""
    if dry_run and output_dir is None:
        raise ValueError("a dry run keeps nothing without --output-dir: give a folder to render the upload into")
    if output_dir is not None:
        output_dir = check_writable(output_dir, folder=True, what="--output-dir")
        if output_dir.exists() and any(output_dir.iterdir()):
            raise ValueError(f"--output-dir {str(output_dir)!r} is not empty; give a new or empty folder")
    return output_dir


def publish_checkpoint(
    model_dir: str | Path,
    repo_id: str,
    *,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    training_data: str | None = None,
    recipe_files: list[Path] | None = None,
    bench_json: Path | None = None,
    license: str = "apache-2.0",
    jacobi: JacobiConfig | None = None,
    template: Path | None = None,
    output_dir: Path | None = None,
    dry_run: bool = False,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> PublishResult:
    """Stages, completes and (unless `dry_run`) uploads `model_dir` to `repo_id`.

    `jacobi` replaces the Jacobi defaults the checkpoint carries (its generation_config.json, else the library's);
    `bench_json` (written by `hf-jacobi bench`) fills the card's measured-speed table and is published with its plot.
    With `output_dir` the rendered folder is kept there for inspection; it is rendered under a temporary name beside
    it and renamed once everything (the upload included) succeeded, so a failure never leaves half of it. Otherwise
    a temporary folder is used and removed after the upload. The card claims Jacobi Forcing training only for a
    checkpoint carrying its record (`jacobi_forcing_record`; else no `datasets`, `training_data`: see `_trained`).
    """
    source = checkpoint_folder(model_dir)
    output_dir = _checked_output_dir(output_dir, dry_run)
    card = _card_info(source, repo_id, base_model, datasets, training_data, recipe_files, license)
    render = tempfile.TemporaryDirectory(prefix="hf-jacobi-push-") if output_dir is None else atomic_folder(output_dir)
    with render as staged:
        staging = Path(staged)
        stage_checkpoint(source, staging)
        extra: list[Path] = list(recipe_files or [])
        if bench_json is not None:
            card.bench = BenchResults.from_json(bench_json)
            extra += [Path(bench_json), *([card.bench.plot] if card.bench.plot else [])]
        settings = prepare_publish_folder(staging, card, jacobi, template, extra)
        url = None
        if not dry_run:
            url = upload_checkpoint(
                staging,
                repo_id,
                token=token,
                private=private,
                revision=revision,
                commit_message="Upload with hf-jacobi",
            )
    return PublishResult(output_dir if output_dir is not None else staging, url, settings)
