"""`hf-jacobi quality`: does a Jacobi Forcing adapter keep the base model's answers? The base and each adapter answer the
same held-out requests (plain chat requests and code tasks with tests, none seen in training); the table puts their
quality figures beside their tokens per forward, and the plot shows the front of speed against quality.

Jacobi decoding is lossless, so this measures the trained weights, not the decoder; every Jacobi output is still
checked against greedy, and the command exits with 1 when one differs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..atomic import write_text
from .arg_types import model_name, positive_int
from .common import DTYPES, MODEL_HELP, CliError, load_model, source_error, writable_output

SHIPPED = "shipped"


def _adapters(pairs: list[str]) -> list[tuple[str, Path]]:
    """LABEL=FOLDER pairs, `shipped` naming the adapter the package ships."""
    from ..adapters import JACOBI_FORCING_WEIGHTS

    adapters = []
    for pair in pairs:
        label, sep, folder = pair.partition("=")
        if not sep or not label or not folder:
            raise CliError(f"--adapters takes LABEL=FOLDER (or LABEL=shipped), got {pair!r}")
        adapters.append((label, Path(JACOBI_FORCING_WEIGHTS if folder == SHIPPED else folder)))
    labels = [label for label, _ in adapters]
    if len(set(labels)) != len(labels) or "base" in labels:
        raise CliError(f"--adapters labels must be unique and not 'base', got {labels}")
    return adapters


def _check_inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """Every input named on the command line, checked before any model loads: a typo costs no minutes."""
    from ..bench.common import VARIANTS
    from ..data.prompts import held_out_split, load_prompts

    if args.rename:
        raise CliError(f"--rename {' '.join(args.rename)} relabels the adapters of --merge runs: add --merge")
    writable_output(args.output_dir, "--output-dir", folder=True)
    adapters = _adapters(args.adapters)
    for label, folder in adapters:
        if not folder.is_dir():
            raise CliError(f"--adapters {label}={folder}: no such folder")
    if args.base_results is not None and not (args.base_results / "quality.json").is_file():
        raise CliError(f"--base-results {args.base_results}: no quality.json there (an earlier run's --output-dir)")
    unknown = sorted(set(args.settings) - set(VARIANTS))
    if unknown:
        raise CliError(f"--settings {unknown} are not Jacobi variants; accepted: {list(VARIANTS)}")
    for flag, name in [*(("--sets", name) for name in args.sets), ("--speed-prompts", args.speed_prompts)]:
        try:
            load_prompts(name, split=held_out_split(name), limit=1)
        except (ValueError, FileNotFoundError) as error:
            raise source_error(error, f"{flag} {name!r}: ") from error
    return adapters


def _protocol(args: argparse.Namespace, tokenizer):
    from ..bench.common import variant_config
    from ..bench.quality_eval import QualityProtocol, load_request_sets
    from ..data.prompts import encode_prompts, held_out_split, load_prompts

    speed = load_prompts(args.speed_prompts, split=held_out_split(args.speed_prompts), limit=args.num_speed_prompts)
    return QualityProtocol(
        sets=load_request_sets(args.sets, tokenizer, args.num_prompts),
        speed_prompts=encode_prompts(speed, tokenizer, chat=True),
        settings={name: variant_config(name, args.block_size) for name in args.settings},
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )


def _answers(models, protocol, tokenizer) -> dict:
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


def _record(args: argparse.Namespace, protocol, model_name: str) -> dict:
    """What makes two runs' figures comparable: the base model and every setting of the protocol."""
    return {
        "model": model_name,
        "sets": [s.name for s in protocol.sets],
        "prompts": {s.name: len(s.prompts) for s in protocol.sets},
        "speed_prompts": f"{args.speed_prompts} (test), {len(protocol.speed_prompts)} prompts",
        "settings": {name: config.to_dict() for name, config in protocol.settings.items()},
        "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size,
        "dtype": args.dtype,
    }


def _comparable(protocol: dict) -> dict:
    """A protocol with its Jacobi settings filled to every field of today's JacobiConfig: a run written before a field
    existed stored fewer keys, and the field's default is what that run decoded with."""
    from ..decoding.config import JacobiConfig

    settings = {name: JacobiConfig(**values).to_dict() for name, values in protocol.get("settings", {}).items()}
    return {**protocol, "settings": settings}


def _comparable_model(model: dict) -> dict:
    """A model's figures with each speed setting filled the same way (see `_comparable`)."""
    from ..decoding.config import JacobiConfig

    speed = [{**entry, "settings": JacobiConfig(**entry["settings"]).to_dict()} for entry in model["speed"]]
    return {**model, "speed": speed}


def _earlier_base(folder: Path, record: dict):
    """The base model's result from an earlier run in `folder`, refused unless that run used the same protocol."""
    from ..bench.quality_eval import ModelQuality

    try:
        results = json.loads((folder / "quality.json").read_text(encoding="utf-8"))
        answers = json.loads((folder / "answers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CliError(f"--base-results {folder}: cannot read its quality.json / answers.json ({error})") from error
    earlier = {key: results.get("protocol", {}).get(key) for key in record}
    earlier["model"] = results.get("model")
    earlier, record = _comparable(earlier), _comparable(record)
    if earlier != record:
        changed = sorted(key for key in record if earlier.get(key) != record[key])
        raise CliError(f"--base-results {folder} was measured with another protocol (differs in {changed})")
    base = next(m for m in results["models"] if m["name"] == "base")
    try:
        tokens = {name: entry["tokens"] for name, entry in answers["base"].items()}
    except (KeyError, TypeError) as error:
        raise CliError(
            f"--base-results {folder}: its answers.json holds no token ids (an older run's): run without it"
        ) from error
    return ModelQuality.from_dict(base, tokens)


def _write_outputs(folder: Path, results: dict, models, answers: dict, request_set: str) -> None:
    """quality.json, quality.md (the table), answers.json and quality.png (the front) in `folder`."""
    from ..bench.quality_report import markdown_table, plot_front

    table = markdown_table(models, models[0])
    print(table)
    write_text(folder / "quality.json", json.dumps(results, indent=2) + "\n")
    write_text(folder / "quality.md", table + "\n")
    write_text(folder / "answers.json", json.dumps(answers, indent=1, ensure_ascii=False) + "\n")
    plot_front(models, folder / "quality.png", request_set)
    print(f"\nwrote quality.json, quality.md, answers.json and quality.png in {folder}")


def _merge(args: argparse.Namespace) -> int:
    """One table and one front from several runs of the same protocol with the same base figures, decoding nothing:
    models measured in different sittings (or sessions) read as one study."""
    from ..bench.quality_eval import ModelQuality, same_figures, targets_met

    if args.adapters or args.base_results is not None:
        raise CliError("--merge combines finished runs: it takes no --adapters or --base-results")
    writable_output(args.output_dir, "--output-dir", folder=True)
    runs = []
    for folder in args.merge:
        try:
            runs.append(
                (
                    json.loads((folder / "quality.json").read_text(encoding="utf-8")),
                    json.loads((folder / "answers.json").read_text(encoding="utf-8")),
                )
            )
        except (OSError, ValueError) as error:
            raise CliError(f"--merge {folder}: cannot read its quality.json / answers.json ({error})") from error
    renames = dict(pair.partition("=")[::2] for pair in args.rename)
    if any(not old or not new for old, new in renames.items()) or "base" in renames:
        raise CliError(f"--rename takes OLD=NEW pairs of adapter labels (not 'base'), got {args.rename}")
    for results, texts in runs:
        for model in results["models"]:
            model["name"] = renames.get(model["name"], model["name"])
        for old, new in renames.items():
            if old in texts:
                texts[new] = texts.pop(old)
    first = runs[0][0]
    models: dict[str, dict] = {}
    answers: dict[str, dict] = {}
    for folder, (results, texts) in zip(args.merge, runs, strict=True):
        if (results["model"], _comparable(results["protocol"])) != (first["model"], _comparable(first["protocol"])):
            raise CliError(f"--merge {folder} was measured with another model or protocol than {args.merge[0]}")
        for model in map(_comparable_model, results["models"]):
            if model["name"] in models and not same_figures(models[model["name"]], model):
                raise CliError(f"--merge: {model['name']!r} has other figures in {folder} than in an earlier run")
            models.setdefault(model["name"], model)
            sets = texts[model["name"]]  # runs before token ids were kept wrote the texts alone
            answers.setdefault(model["name"], {k: v if isinstance(v, dict) else {"texts": v} for k, v in sets.items()})
    if "base" not in models:
        raise CliError(f"--merge: none of {[str(f) for f in args.merge]} holds the base model's figures")
    ordered = [models.pop("base"), *models.values()]
    measured = [ModelQuality.from_dict(m, {}) for m in ordered]
    merged = {
        "model": first["model"],
        "protocol": _comparable(first["protocol"]),
        "merged_from": [str(folder) for folder in args.merge],
        "adapters": {k: v for results, _ in runs for k, v in results.get("adapters", {}).items()},
        "models": ordered,
        "targets_met": {m.name: targets_met(m, measured[0]) for m in measured[1:]},
    }
    _write_outputs(args.output_dir, merged, measured, answers, first["protocol"]["sets"][0])
    return 0


def run_quality_command(args: argparse.Namespace) -> int:
    from ..bench.quality_eval import measure_model, targets_met

    if args.merge:
        return _merge(args)
    adapters = _check_inputs(args)
    base_loaded = load_model(args.model, args.dtype)
    protocol = _protocol(args, base_loaded.tokenizer)
    record = _record(args, protocol, base_loaded.name)
    if args.base_results is not None:
        base = _earlier_base(args.base_results, record)
    else:
        base = measure_model("base", base_loaded.model, base_loaded.model, base_loaded.tokenizer, protocol)
    models = [base]
    for label, folder in adapters:
        loaded = load_model(args.model, args.dtype, adapter=folder)
        models.append(measure_model(label, loaded.model, base_loaded.model, loaded.tokenizer, protocol, base))
        del loaded
    results = {
        "model": base_loaded.name,
        "protocol": {key: value for key, value in record.items() if key != "model"},
        "base_results": None if args.base_results is None else str(args.base_results),
        "adapters": {label: str(folder) for label, folder in adapters},
        "models": [m.to_dict() for m in models],
        "targets_met": {m.name: targets_met(m, base) for m in models[1:]},
    }
    _write_outputs(args.output_dir, results, models, _answers(models, protocol, base_loaded.tokenizer), args.sets[0])
    return 0 if all(m.identical_to_greedy for m in models) else 1


def add_parser(commands) -> None:
    from ..bench.quality import DEFAULT_SETS

    parser = commands.add_parser(
        "quality", help="the base model and adapters side by side: answer quality on held-out requests beside speed"
    )
    parser.add_argument(
        "--adapters",
        nargs="*",
        default=[],
        metavar="LABEL=FOLDER",
        help="PEFT adapter folders to compare with the base, each with a label (FOLDER 'shipped': the package's)",
    )
    parser.add_argument("--model", type=model_name, default=None, help=f"the base: {MODEL_HELP} (default: embedded)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="model dtype (default: float32)")
    parser.add_argument(
        "--sets", nargs="+", default=list(DEFAULT_SETS), help="held-out prompt sources answered (their test split)"
    )
    parser.add_argument(
        "--num-prompts", type=positive_int, default=None, help="only the first N prompts of each set (default: all)"
    )
    parser.add_argument(
        "--speed-prompts", default="packages", help="held-out prompt source for tokens per forward (test split)"
    )
    parser.add_argument("--num-speed-prompts", type=positive_int, default=16, help="its first N prompts")
    parser.add_argument("--settings", nargs="+", default=["plain", "both"], help="Jacobi variants timed for speed")
    parser.add_argument("--block-size", type=positive_int, default=16, help="Jacobi block size of every setting")
    parser.add_argument("--max-new-tokens", type=positive_int, default=128, help="tokens per answer at most")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="prompts decoded together")
    parser.add_argument("--output-dir", type=Path, default=Path("quality"), help="where the results go")
    parser.add_argument(
        "--base-results",
        type=Path,
        default=None,
        help="an earlier run's --output-dir whose base model figures and answers to reuse (same protocol only)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        metavar="DIR",
        help="decode nothing: merge finished runs' --output-dirs (same protocol and base) into one table and front",
    )
    parser.add_argument(
        "--rename",
        nargs="*",
        default=[],
        metavar="OLD=NEW",
        help="with --merge: adapter labels to show under another name (e.g. one that has shipped since)",
    )
    parser.set_defaults(handler=run_quality_command)
