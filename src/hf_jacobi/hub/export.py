"""Turning a saved checkpoint into a publishable folder: Jacobi defaults, the model card and `custom_generate/`.

`custom_generate/` holds the files of `hf_jacobi.decoding` copied verbatim (its `generate.py` doubles as the Hub
entry point), so a user with only transformers runs the very loop this library runs and tests; there is no second
implementation to drift. The decoding package imports nothing outside itself for that reason.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import logging
import pickletools
import shutil
import zipfile
from pathlib import Path

from transformers import GenerationConfig

from ..decoding import generate as decoding_entry
from ..decoding.config import JacobiConfig
from .card import CardInfo, render_model_card
from .upload import UPLOAD_IGNORE_PATTERNS, checkpoint_folder

logger = logging.getLogger(__name__)

CUSTOM_GENERATE_DIR = "custom_generate"
CUSTOM_GENERATE_REQUIREMENTS = ("torch>=2.4", "transformers>=5.17")
"""What transformers checks (custom_generate/requirements.txt) before it runs the exported loop."""

TUNE_REPORT = "jacobi_tune.json"
"""Written by `hf-jacobi tune` beside the generation config; the card quotes it to say how defaults were chosen."""

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


def decoding_sources() -> list[Path]:
    """The modules of `hf_jacobi.decoding` that make up the loop (its package `__init__` is not needed)."""
    folder = Path(decoding_entry.__file__).parent
    return sorted(path for path in folder.glob("*.py") if path.name != "__init__.py")


def export_custom_generate(folder: str | Path) -> Path:
    """Writes `folder/custom_generate/` (replacing an older one) and returns it."""
    target = Path(folder) / CUSTOM_GENERATE_DIR
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for source in decoding_sources():
        shutil.copyfile(source, target / source.name)
    (target / "requirements.txt").write_text("\n".join(CUSTOM_GENERATE_REQUIREMENTS) + "\n", encoding="utf-8")
    return target


def base_generation_config(folder: str | Path) -> GenerationConfig | None:
    """The generation config a checkpoint folder carries, else the one its config.json implies, else None.

    Its `decoding` and `jacobi_*` keys are always kept: transformers drops the attributes it does not know from a file
    marked `_from_model_config` (what `save_pretrained` writes for a model whose generation config came from its
    config.json and whose Jacobi settings were then set by hand), and those are the checkpoint's own defaults.
    """
    folder = Path(folder)
    path = folder / "generation_config.json"
    if path.is_file():
        config = GenerationConfig.from_pretrained(folder)
        saved = json.loads(path.read_text(encoding="utf-8"))
        for key in ("decoding", *JacobiConfig.setting_names()):
            if key in saved and not hasattr(config, key):
                setattr(config, key, saved[key])
        return config
    if (folder / "config.json").is_file():
        return GenerationConfig.from_pretrained(folder, config_file_name="config.json", _from_model_config=True)
    return None


def jacobi_generation_config(base: GenerationConfig | None, jacobi: JacobiConfig) -> GenerationConfig:
    """A copy of `base` (the caller's stays as it is) that decodes with Jacobi and `jacobi`'s settings by default.

    Every setting is written out, so that the file, and the card quoting it, say exactly how the checkpoint decodes.
    """
    config = copy.deepcopy(base) if base is not None else GenerationConfig()
    jacobi.write_to(config)
    config._from_model_config = False  # a file marked as derived from config.json may be regenerated on load
    return config


def tuning_note(folder: Path) -> str:
    """One sentence on where the defaults came from, from the tune report when there is one."""
    path = folder / TUNE_REPORT
    if not path.is_file():
        return "These defaults were not tuned for particular hardware (`hf-jacobi tune` measures and picks them)."
    report = json.loads(path.read_text(encoding="utf-8"))
    choice = report.get("choice", {})
    speedup = choice.get("predicted_speedup")
    said = f", predicted {speedup:.2f}x greedy tokens/s there" if isinstance(speedup, (int, float)) else ""
    return f"Chosen by `hf-jacobi tune` on {report.get('hardware', 'unrecorded hardware')}{said}; see `{TUNE_REPORT}`."


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
    base = base_generation_config(folder)
    settings = jacobi or JacobiConfig.from_generation_config(base)
    jacobi_generation_config(base, settings).save_pretrained(folder)
    card.jacobi = settings
    if not card.tuning_note:
        card.tuning_note = tuning_note(folder)
    render_model_card(card, template).save(folder / "README.md")
    export_custom_generate(folder)
    for path in extra_files or []:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{str(path)!r} does not exist (asked to publish it beside the checkpoint)")
        shutil.copyfile(path, folder / Path(path).name)
    return settings


def jacobi_forcing_record(folder: str | Path) -> str | None:
    """The record that `folder`'s weights come out of Jacobi Forcing training, or None when it carries none.

    A JacobiForcingTrainer saving these weights (`save_model`, each `checkpoint-N/`) writes beside them its arguments,
    a `JacobiForcingConfig`, as `training_args.bin`: that file is the record, and only at the top of the folder (a
    `checkpoint-N/` inside records its own weights, not these). The pickle is read for the class it names and never
    loaded (loading runs code from the file). A `trainer_state.json` beside it that counts no optimizer step vetoes
    the claim: such a run trained nothing. Weights without the file (an adapter exported as package data, a model
    tuned but never trained) are not claimed to be trained, whatever they are.

    Returns:
        One line naming the evidence, e.g. "training_args.bin (JacobiForcingConfig), 3 optimizer steps", or None.
    """
    folder = Path(folder)
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
