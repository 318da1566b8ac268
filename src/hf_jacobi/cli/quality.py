"""`hf-jacobi quality`: does a Jacobi Forcing adapter keep the base model's answers? The base and each adapter answer the
same held-out requests (plain chat requests and code tasks with tests, none seen in training); the table puts their
quality figures beside their tokens per forward, and the plot shows the front of speed against quality.

Jacobi decoding is lossless, so this measures the trained weights, not the decoder; every Jacobi output of the speed
settings is still checked against greedy, and in float32 the command exits with 1 when one differs. In bfloat16 "lossless" holds
only up to rounding (a forward over a block rounds otherwise than a forward over one token), so `--jacobi-answers`
adds, per model, a row judging its answers as Jacobi decodes them with its own default settings; how many of them
differ from its greedy answers is reported there, not counted as a failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .arg_types import model_name, positive_int
from .common import DTYPES, MODEL_HELP, CliError, load_model, source_error, writable_output
from .exactness import greedy_verdict

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
    from ..data.prompts import encode_prompts, held_out_split, load_prompts
    from ..quality.protocol import QualityProtocol, load_request_sets

    speed = load_prompts(args.speed_prompts, split=held_out_split(args.speed_prompts), limit=args.num_speed_prompts)
    return QualityProtocol(
        sets=load_request_sets(args.sets, tokenizer, args.num_prompts),
        speed_prompts=encode_prompts(speed, tokenizer, chat=True),
        settings={name: variant_config(name, args.block_size) for name in args.settings},
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )


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


def _base_rows(args: argparse.Namespace, loaded, protocol, record: dict) -> list:
    """The base's greedy row and, with --jacobi-answers, the row of its Jacobi answers: taken from --base-results
    where that run has them (the Jacobi row only when decoded with the settings the base decodes with now), measured
    otherwise."""
    from ..decoding.config import JacobiConfig
    from ..quality.protocol import measure_jacobi_answers, measure_model, own_jacobi_config
    from ..quality.runs import earlier_base

    if args.base_results is not None:
        base, jacobi = earlier_base(args.base_results, record)
    else:
        base, jacobi = measure_model("base", loaded.model, loaded.model, loaded.tokenizer, protocol), None
    if not args.jacobi_answers:
        return [base]
    settings = own_jacobi_config(loaded.model).to_dict()
    if jacobi is None or JacobiConfig(**jacobi.jacobi_settings).to_dict() != settings:
        jacobi = measure_jacobi_answers(base, loaded.model, loaded.model, loaded.tokenizer, protocol)
    return [base, jacobi]


def _adapter_rows(args: argparse.Namespace, label: str, folder: Path, base_loaded, protocol, base) -> list:
    """One adapter's greedy row and, with --jacobi-answers, the row of its Jacobi answers (its own settings)."""
    from ..quality.protocol import measure_jacobi_answers, measure_model

    loaded = load_model(args.model, args.dtype, adapter=folder)
    greedy = measure_model(label, loaded.model, base_loaded.model, loaded.tokenizer, protocol, base)
    if not args.jacobi_answers:
        return [greedy]
    return [greedy, measure_jacobi_answers(greedy, loaded.model, base_loaded.model, loaded.tokenizer, protocol, base)]


def run_quality_command(args: argparse.Namespace) -> int:
    from ..quality.protocol import targets_met
    from ..quality.runs import answers_record, merge_runs, write_outputs

    if args.merge:
        if args.adapters or args.base_results is not None or args.jacobi_answers:
            raise CliError(
                "--merge combines finished runs: it takes no --adapters, --base-results or --jacobi-answers"
            )
        writable_output(args.output_dir, "--output-dir", folder=True)
        return merge_runs(args.merge, args.rename, args.output_dir)
    adapters = _check_inputs(args)
    base_loaded = load_model(args.model, args.dtype)
    protocol = _protocol(args, base_loaded.tokenizer)
    record = _record(args, protocol, base_loaded.name)
    models = _base_rows(args, base_loaded, protocol, record)
    base = models[0]
    for label, folder in adapters:
        models += _adapter_rows(args, label, folder, base_loaded, protocol, base)
    results = {
        "model": base_loaded.name,
        "protocol": {key: value for key, value in record.items() if key != "model"},
        "base_results": None if args.base_results is None else str(args.base_results),
        "adapters": {label: str(folder) for label, folder in adapters},
        "models": [m.to_dict() for m in models],
        "targets_met": {m.name: targets_met(m, base) for m in models[1:]},
    }
    answers = answers_record(models, protocol, base_loaded.tokenizer)
    write_outputs(args.output_dir, results, models, answers, args.sets[0])
    verdict, code = greedy_verdict(args.dtype, sum(m.identical_to_greedy for m in models), len(models), "models")
    if code or not all(m.identical_to_greedy for m in models):
        print(verdict)
    return code


def add_parser(commands) -> None:
    from ..quality.answers import DEFAULT_SETS

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
        "--jacobi-answers",
        action="store_true",
        help="beside each model's greedy row, a row of its answers decoded by Jacobi with its own default settings, "
        "judged the same way and counted against its own greedy answers (bfloat16 rounds them apart)",
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
