"""Turning a saved checkpoint into a publishable folder: the completed checkpoint (`hf_jacobi.checkpoint`), the model
card, and whether the card may say the weights were trained with Jacobi Forcing.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import pickletools
import shutil
import zipfile
from pathlib import Path

from ..card import CardInfo, render_model_card, tuning_note
from ..checkpoint import CUSTOM_GENERATE_DIR, TRAINING_RECORD, complete_checkpoint, read_training_record
from ..decoding.config import JacobiConfig
from .upload import UPLOAD_IGNORE_PATTERNS, checkpoint_folder

logger = logging.getLogger(__name__)

TRAINING_ARGS = "training_args.bin"
"""What a Trainer's `save_model` writes beside the weights: its arguments, pickled by torch.save."""
TRAINER_STATE = "trainer_state.json"
JACOBI_FORCING_ARGS = "hf_jacobi.training.config JacobiForcingConfig"
"""The class a JacobiForcingTrainer run pickles its arguments as (module and name, as a pickle names a class)."""

PUBLISH_IGNORE_PATTERNS = (
    *(pattern.removesuffix("/*") for pattern in UPLOAD_IGNORE_PATTERNS),
    "README.md",
    CUSTOM_GENERATE_DIR,
)
"""Training leftovers that do not belong in a published model, plus what the export rewrites itself."""


def prepare_publish_folder(
    folder: str | Path,
    card: CardInfo,
    jacobi: JacobiConfig | None = None,
    template: str | Path | None = None,
    extra_files: list[Path] | None = None,
) -> JacobiConfig:
    """Completes a saved checkpoint (weights or adapter, tokenizer) in place for publishing.

    Writes generation_config.json with `decoding="jacobi"` and the Jacobi defaults (`jacobi`, else those the folder
    already carries), the model card (README.md), the `custom_generate/` folder and copies of `extra_files` (e.g. the
    bench plot). Returns the Jacobi settings written.
    """
    folder = checkpoint_folder(folder)
    settings = complete_checkpoint(folder, jacobi)
    card.jacobi = settings
    if not card.tuning_note:
        card.tuning_note = tuning_note(folder)
    render_model_card(card, template).save(folder / "README.md")
    for path in extra_files or []:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{str(path)!r} does not exist (asked to publish it beside the checkpoint)")
        shutil.copyfile(path, folder / Path(path).name)
    return settings


def jacobi_forcing_record(folder: str | Path) -> str | None:
    """The record that `folder`'s weights come out of Jacobi Forcing training, or None when it carries none.

    A JacobiForcingTrainer saving these weights (`save_model`, each `checkpoint-N/`) writes beside them its training
    record (`checkpoint.TRAINING_RECORD`, with its optimizer steps; `export-weights` carries it along). Folders saved
    before that record existed are recognised by their arguments, a `JacobiForcingConfig` pickled as
    `training_args.bin`, read for the class it names and never loaded (loading runs code from the file), with a
    `trainer_state.json` beside it that counts no optimizer step vetoing the claim. Only the top of the folder counts (a
    `checkpoint-N/` inside records its own weights, not these). Weights with neither (a model tuned but never trained)
    are not claimed to be trained, whatever they are.

    Returns:
        One line naming the evidence, e.g. "jacobi_forcing_training.json, 3 optimizer steps", or None.
    """
    folder = Path(folder)
    record = read_training_record(folder)
    if record is not None:
        steps = record.get("global_step")
        if not isinstance(steps, int) or steps <= 0:
            return None
        return f"{TRAINING_RECORD}, {steps} optimizer steps"
    args = folder / TRAINING_ARGS
    if not args.is_file() or JACOBI_FORCING_ARGS not in _pickled_classes(args):
        return None
    record = f"{TRAINING_ARGS} ({JACOBI_FORCING_ARGS.split()[-1]})"
    state = folder / TRAINER_STATE
    if state.is_file():
        try:
            steps = json.loads(state.read_text(encoding="utf-8")).get("global_step")
        except (ValueError, AttributeError):
            steps = None
        if isinstance(steps, int):
            return f"{record}, {steps} optimizer steps" if steps > 0 else None
    return record


def _pickled_classes(path: Path) -> set[str]:
    """The "module name" of every class or function a torch.save file's pickle refers to, read without unpickling
    (torch.save writes a zip holding `<archive>/data.pkl`; older torch, a bare pickle). Strings a pickle reuses
    through its memo are followed, so that a class whose module was named before is still found."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                data = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
        else:
            data = path.read_bytes()
        found: set[str] = set()
        strings: list[str] = []
        memo: dict[int, str | None] = {}
        last: str | None = None
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name == "GLOBAL":
                found.add(str(arg))
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.add(f"{strings[-2]} {strings[-1]}")
            if opcode.name == "MEMOIZE":
                memo[len(memo)] = last
            elif opcode.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = last
            elif opcode.name in ("GET", "BINGET", "LONG_BINGET"):
                last = memo.get(int(arg))
                if last is not None:
                    strings.append(last)
            else:
                last = arg if isinstance(arg, str) and "UNICODE" in opcode.name else None
                if last is not None:
                    strings.append(last)
        return found
    except Exception:  # unreadable, not a pickle, cut short: no record in it
        return set()


def stage_checkpoint(source: str | Path, staging: str | Path) -> Path:
    """Copies a checkpoint folder into `staging`, leaving out training leftovers, so publishing never edits the
    user's own folder."""
    source, staging = Path(source), Path(staging)
    if not source.is_dir():
        raise ValueError(f"{str(source)!r} is not a folder (expected a save_pretrained checkpoint folder)")

    def ignored(directory: str, names: list[str]) -> set[str]:
        if Path(directory) != source:
            return set()
        return {name for name in names if any(fnmatch.fnmatch(name, pattern) for pattern in PUBLISH_IGNORE_PATTERNS)}

    shutil.copytree(source, staging, ignore=ignored, dirs_exist_ok=True)
    return staging
