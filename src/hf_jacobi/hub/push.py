"""`hf-jacobi push`: publish a saved checkpoint (full weights or a LoRA adapter) with everything a user needs.

The checkpoint is staged in a separate folder (the user's own folder is never edited), completed with the Jacobi
generation config, the model card and `custom_generate/`, and uploaded in one commit.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.report import markdown_table
from .card import CardInfo, fenced_files
from .export import prepare_publish_folder, stage_checkpoint
from .upload import checkpoint_folder, upload_checkpoint


@dataclass
class PublishResult:
    folder: Path
    url: str | None
    jacobi_settings: dict[str, Any]


def bench_section(bench_json: Path) -> tuple[str, str, list[Path]]:
    """The table, its notes and the plot (when beside it) from a `hf-jacobi bench` JSON file."""
    if not bench_json.is_file():
        raise FileNotFoundError(f"bench results {str(bench_json)!r} do not exist (write them with hf-jacobi bench)")
    try:
        payload = json.loads(bench_json.read_text(encoding="utf-8"))
        meta, rows = payload["meta"], payload["summary"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{str(bench_json)!r} is not a hf-jacobi bench JSON file ({error})") from None
    table = markdown_table(rows, meta.get("metric", "score"))
    lines = [
        f"Measured on {meta.get('machine', 'unrecorded hardware')} with `{meta.get('command', 'hf-jacobi bench')}`: "
        f"{meta.get('task', '?')}, {rows[0]['samples'] if rows else 0} samples, batch {meta.get('batch_size', '?')}, "
        f"at most {meta.get('max_new_tokens', '?')} new tokens; every sample counted, prefill included in tok/s "
        "unless marked."
    ]
    lines += [f"Note: {note}" for note in payload.get("notes", [])]
    plot = bench_json.with_suffix(".png")
    return table, "\n".join(lines), [plot] if plot.is_file() else []


def base_model_of(folder: Path) -> str | None:
    """The base model an adapter names; full checkpoints do not record theirs reliably, so the user says it."""
    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        return json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
    return None


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
    jacobi_settings: dict[str, Any] | None = None,
    template: Path | None = None,
    output_dir: Path | None = None,
    dry_run: bool = False,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> PublishResult:
    """Stages, completes and (unless `dry_run`) uploads `model_dir` to `repo_id`.

    With `output_dir` the rendered folder is kept there for inspection; otherwise a temporary folder is used and
    removed after the upload.
    """
    source = checkpoint_folder(model_dir)
    if output_dir is not None and output_dir.exists() and any(output_dir.iterdir()):
        raise ValueError(f"--output-dir {str(output_dir)!r} is not empty; give a new or empty folder")
    if dry_run and output_dir is None:
        raise ValueError("a dry run keeps nothing without --output-dir: give a folder to render the upload into")
    staging = output_dir if output_dir is not None else Path(tempfile.mkdtemp(prefix="hf-jacobi-push-"))
    try:
        stage_checkpoint(source, staging)
        adapter = (staging / "adapter_config.json").is_file()
        card = CardInfo(
            repo_id=repo_id,
            base_model=base_model or base_model_of(source),
            adapter=adapter,
            datasets=list(datasets or []),
            recipe=fenced_files([Path(p) for p in recipe_files or []]),
            license=license,
        )
        if training_data:
            card.training_data = training_data
        extra: list[Path] = list(recipe_files or [])
        if bench_json is not None:
            card.bench_table, card.bench_notes, plots = bench_section(Path(bench_json))
            extra += [Path(bench_json), *plots]
        settings = prepare_publish_folder(staging, card, jacobi_settings, template, extra)
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
        return PublishResult(staging, url, settings)
    finally:
        if output_dir is None:
            shutil.rmtree(staging, ignore_errors=True)
