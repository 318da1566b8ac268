"""`hf-jacobi quality`'s finished runs: writing one, and reading earlier ones back, for the base model's figures of the
same protocol (`--base-results`) or to merge several into one table and front (`--merge`).

Runs written before a field existed must still read: a Jacobi setting added since takes its default, and a run without
rows of Jacobi answers (`--jacobi-answers`) simply has none.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..atomic import write_text


class QualityRunError(ValueError):
    """A finished run that cannot be read, reused or merged, named by the flag that named it: the user can fix it."""


def answers_record(models, protocol, tokenizer) -> dict:
    """Every model's answers by set, as text (for reading what the figures summarize) and as token ids (so that a
    later run of the same protocol can take the base's from here: `--base-results`)."""
    return {
        model.name: {
            request_set.name: {
                "texts": tokenizer.batch_decode(model.answers[request_set.name], skip_special_tokens=True),
                "tokens": model.answers[request_set.name],
            }
            for request_set in protocol.sets
        }
        for model in models
    }


def write_outputs(folder: Path, results: dict, models, answers: dict, request_set: str) -> None:
    """quality.json, quality.md (the table), answers.json and quality.png (the front) in `folder`."""
    from .report import markdown_table, plot_front

    table = markdown_table(models, models[0])
    print(table)
    write_text(folder / "quality.json", json.dumps(results, indent=2) + "\n")
    write_text(folder / "quality.md", table + "\n")
    write_text(folder / "answers.json", json.dumps(answers, indent=1, ensure_ascii=False) + "\n")
    plot_front(models, folder / "quality.png", request_set)
    print(f"\nwrote quality.json, quality.md, answers.json and quality.png in {folder}")


def comparable(protocol: dict) -> dict:
    """A protocol with its Jacobi settings filled to every field of today's JacobiConfig: a run written before a field
    existed stored fewer keys, and the field's default is what that run decoded with."""
    from ..decoding.config import JacobiConfig

    settings = {name: JacobiConfig(**values).to_dict() for name, values in protocol.get("settings", {}).items()}
    return {**protocol, "settings": settings}


def comparable_model(model: dict) -> dict:
    """A model's figures with each speed setting (and a Jacobi row's own settings) filled the same way."""
    from ..decoding.config import JacobiConfig

    speed = [{**entry, "settings": JacobiConfig(**entry["settings"]).to_dict()} for entry in model["speed"]]
    filled = {**model, "speed": speed}
    if model.get("jacobi_settings") is not None:
        filled["jacobi_settings"] = JacobiConfig(**model["jacobi_settings"]).to_dict()
    return filled


def _read_run(folder: Path, flag: str) -> tuple[dict, dict]:
    """A finished run's quality.json and answers.json, a `QualityRunError` naming `flag` when either does not read."""
    try:
        return (
            json.loads((folder / "quality.json").read_text(encoding="utf-8")),
            json.loads((folder / "answers.json").read_text(encoding="utf-8")),
        )
    except (OSError, ValueError) as error:
        raise QualityRunError(f"{flag} {folder}: cannot read its quality.json / answers.json ({error})") from error


def _with_tokens(model: dict, answers: dict, folder: Path):
    """A model row of an earlier run with its answers' token ids, which the models measured now are compared with."""
    from .protocol import ModelQuality

    try:
        tokens = {name: entry["tokens"] for name, entry in answers[model["name"]].items()}
    except (KeyError, TypeError) as error:
        raise QualityRunError(
            f"--base-results {folder}: its answers.json holds no token ids (an older run's): run without it"
        ) from error
    return ModelQuality.from_dict(model, tokens)


def earlier_base(folder: Path, record: dict):
    """The base model's result from an earlier run in `folder`, refused unless that run used the same protocol, and
    the row of the base's Jacobi answers when that run had `--jacobi-answers` (else None: measured again)."""
    results, answers = _read_run(folder, "--base-results")
    earlier = {key: results.get("protocol", {}).get(key) for key in record}
    earlier["model"] = results.get("model")
    earlier, record = comparable(earlier), comparable(record)
    if earlier != record:
        changed = sorted(key for key in record if earlier.get(key) != record[key])
        raise QualityRunError(f"--base-results {folder} was measured with another protocol (differs in {changed})")
    base = next(m for m in results["models"] if m["name"] == "base")
    jacobi = next((m for m in results["models"] if m.get("jacobi_of") == "base"), None)
    return _with_tokens(base, answers, folder), None if jacobi is None else _with_tokens(jacobi, answers, folder)


def _renamed(runs: list[tuple[dict, dict]], pairs: list[str]) -> None:
    """`--rename OLD=NEW` applied to every run in place: an adapter's row, the row of its Jacobi answers ("OLD ·
    Jacobi (...)" becomes "NEW · Jacobi (...)") and their answers."""
    renames = dict(pair.partition("=")[::2] for pair in pairs)
    if any(not old or not new for old, new in renames.items()) or "base" in renames:
        raise QualityRunError(f"--rename takes OLD=NEW pairs of adapter labels (not 'base'), got {pairs}")
    for results, texts in runs:
        for model in results["models"]:
            old, of = model["name"], model.get("jacobi_of")
            if of in renames:
                model["jacobi_of"], model["name"] = renames[of], renames[of] + old.removeprefix(of)
            else:
                model["name"] = renames.get(old, old)
            if old in texts and model["name"] != old:
                texts[model["name"]] = texts.pop(old)


def _gathered(folders: list[Path], runs: list[tuple[dict, dict]]) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every model row of the runs, once, with its answers; refused where runs differ in model or protocol, or give
    one row two sets of figures."""
    from .protocol import same_figures

    first = runs[0][0]
    models: dict[str, dict] = {}
    answers: dict[str, dict] = {}
    for folder, (results, texts) in zip(folders, runs, strict=True):
        if (results["model"], comparable(results["protocol"])) != (first["model"], comparable(first["protocol"])):
            raise QualityRunError(f"--merge {folder} was measured with another model or protocol than {folders[0]}")
        for model in map(comparable_model, results["models"]):
            if model["name"] in models and not same_figures(models[model["name"]], model):
                raise QualityRunError(
                    f"--merge: {model['name']!r} has other figures in {folder} than in an earlier run"
                )
            models.setdefault(model["name"], model)
            sets = texts[model["name"]]  # runs before token ids were kept wrote the texts alone
            answers.setdefault(model["name"], {k: v if isinstance(v, dict) else {"texts": v} for k, v in sets.items()})
    return models, answers


def merge_runs(folders: list[Path], renames: list[str], output_dir: Path) -> int:
    """One table and one front from several runs of the same protocol with the same base figures, decoding nothing:
    models measured at different times, or on different machines of one kind, read as one study, with whatever Jacobi
    rows they hold; `renames` relabels adapters (OLD=NEW)."""
    from .protocol import ModelQuality, targets_met

    runs = [_read_run(folder, "--merge") for folder in folders]
    _renamed(runs, renames)
    models, answers = _gathered(folders, runs)
    if "base" not in models:
        raise QualityRunError(f"--merge: none of {[str(f) for f in folders]} holds the base model's figures")
    ordered = [models.pop("base"), *models.values()]
    measured = [ModelQuality.from_dict(m, {}) for m in ordered]
    first = runs[0][0]
    merged = {
        "model": first["model"],
        "protocol": comparable(first["protocol"]),
        "merged_from": [str(folder) for folder in folders],
        "adapters": {k: v for results, _ in runs for k, v in results.get("adapters", {}).items()},
        "models": ordered,
        "targets_met": {m.name: targets_met(m, measured[0]) for m in measured[1:]},
    }
    write_outputs(output_dir, merged, measured, answers, first["protocol"]["sets"][0])
    return 0
