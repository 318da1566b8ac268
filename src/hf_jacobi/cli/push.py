"""`hf-jacobi push`: publish a checkpoint with its model card, Jacobi defaults and custom_generate."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import CliError, add_jacobi_setting_flags, jacobi_config


def run_push_command(args: argparse.Namespace) -> int:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from ..checkpoint import base_generation_config
    from ..hub.push import publish_checkpoint

    try:  # a bad id would be rendered into a dry run's card, or fail only once the folder is staged
        validate_repo_id(args.repo_id)
    except HFValidationError as error:
        raise CliError(f"--repo-id {args.repo_id!r} is not a Hub repository id (expected owner/name)") from error
    for recipe in args.recipe:
        if not recipe.is_file():
            raise CliError(f"--recipe {str(recipe)!r} is not a file (expected a recipe YAML to show on the card)")
    try:
        # The checkpoint's own defaults (e.g. from `hf-jacobi tune`), with the flags given on top.
        jacobi = jacobi_config(args, base_generation_config(args.checkpoint))
        result = publish_checkpoint(
            args.checkpoint,
            args.repo_id,
            base_model=args.base_model,
            datasets=args.dataset,
            training_data=args.training_data,
            recipe_files=args.recipe,
            bench_json=args.bench,
            license=args.license,
            jacobi=jacobi,
            template=args.template,
            output_dir=args.output_dir,
            dry_run=args.dry_run,
            private=args.private,
            revision=args.revision,
            token=args.token,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        raise CliError(str(error)) from error
    shown = ", ".join(f"{k}={v}" for k, v in result.jacobi.to_dict().items() if v is not None)
    if args.dry_run:
        print(f"rendered {args.repo_id} into {result.folder} (not uploaded); Jacobi defaults: {shown}")
    else:
        print(f"pushed to {result.url}; Jacobi defaults: {shown}")
    return 0


def add_parser(commands) -> None:
    push = commands.add_parser(
        "push", help="publish a checkpoint with its model card, Jacobi defaults and custom_generate"
    )
    push.add_argument("checkpoint", type=Path, help="a save_pretrained folder (full model or LoRA adapter)")
    push.add_argument("--repo-id", required=True, help="the Hub repository, e.g. your-name/model-jacobi-forcing")
    push.add_argument("--base-model", default=None, help="the model it was trained from (read from an adapter)")
    push.add_argument("--dataset", action="append", default=[], help="a Hub dataset it was trained on (repeatable)")
    push.add_argument("--training-data", default=None, help="one line about the training data, for the card")
    push.add_argument("--recipe", type=Path, action="append", default=[], help="a recipe file to show (repeatable)")
    push.add_argument("--bench", type=Path, default=None, help="bench.json from hf-jacobi bench, for the card's table")
    push.add_argument("--license", default="apache-2.0", help="license id for the card (default apache-2.0)")
    push.add_argument("--template", type=Path, default=None, help="a model card template instead of the bundled one")
    add_jacobi_setting_flags(push, "the checkpoint's")
    push.add_argument("--output-dir", type=Path, default=None, help="keep the rendered folder here")
    push.add_argument("--dry-run", action="store_true", help="render into --output-dir without uploading")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.add_argument("--revision", default=None, help="branch to push to (created if missing)")
    push.add_argument("--token", default=None, help="Hub token (default: the stored login or HF_TOKEN)")
    push.set_defaults(handler=run_push_command)
