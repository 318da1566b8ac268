"""`hf-jacobi evaluate`: held-out tokens per forward and answer quality of a model before and after training."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trl import ModelConfig

from ..adapters import apply_adapter
from ..atomic import check_writable, write_text
from ..data.prompts import encode_prompts
from .common import CliError
from .exactness import greedy_verdict
from .recipe_args import (
    PromptArguments,
    check_model_arguments,
    check_model_name,
    jacobi_variants,
    load_model_and_tokenizer,
    parse_step_arguments,
)

logger = logging.getLogger(__name__)


@dataclass
class EvaluateArguments(PromptArguments):
    adapter: str | None = field(
        default=None, metadata={"help": "A LoRA adapter folder to evaluate on top of the model."}
    )
    trained_model: str | None = field(default=None, metadata={"help": "A fully fine-tuned checkpoint to compare."})
    block_size: int = field(default=16, metadata={"help": "Jacobi block size n of every measured setting."})
    settings: list[str] = field(
        default_factory=lambda: ["plain", "both"],
        metadata={"help": "Jacobi variants to measure: plain, recycling, multi-block, both (as in hf-jacobi bench)."},
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Tokens to generate per prompt."})
    batch_size: int = field(default=8, metadata={"help": "Prompts decoded together (left-padded)."})
    output_file: str | None = field(default=None, metadata={"help": "Write the results as JSON here."})
    humaneval_nll: bool = field(
        default=False,
        metadata={"help": "Also score the NLL per token of HumanEval's 164 canonical solutions under each model."},
    )
    probe_trajectories: list[str] | None = field(
        default=None,
        metadata={
            "help": "Trajectory folders (hf-jacobi collect) to run the acceptance probe on with each model: how often "
            "its choices after a block's first wrong token are the fixed point's, by depth, and the tokens per "
            "iteration they imply (e.g. the base's trajectories and the trained model's own)."
        },
    )
    probe_limit: int = field(default=64, metadata={"help": "Trajectories of each probe folder read (the first N)."})
    base_results: str | None = field(
        default=None,
        metadata={
            "help": "An earlier --output_file of this command on the same base model, dtype, prompts and settings: "
            "its base figures are reused instead of measured again (the base's greedy answers are still decoded, as "
            "the trained model's reference; where they differ from that report's, the base is measured in full)."
        },
    )

    def __post_init__(self) -> None:
        """Refuses counts a run could not use and two trained models at once, before any model loads."""
        for name in ("block_size", "max_new_tokens", "batch_size", "probe_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if self.adapter is not None and self.trained_model is not None:
            raise ValueError(
                f"adapter={self.adapter!r} and trained_model={self.trained_model!r} both name the trained model: "
                "give one (run evaluate once per trained model)."
            )
        if self.base_results is not None and self.adapter is None and self.trained_model is None:
            raise ValueError(
                f"base_results={self.base_results!r} reuses the base's figures beside a trained model: give --adapter "
                "or --trained_model too (without one, run without --base_results)."
            )


PROTOCOL = (
    "prompts",
    "prompt_split",
    "prompt_column",
    "skip_prompts",
    "num_prompts",
    "chat_template",
    "block_size",
    "settings",
    "max_new_tokens",
    "batch_size",
)
"""The arguments a report's base figures depend on (with the model and its dtype): `--base_results` reuses a report
only where all agree. The batch counts: rows of a batch are padded to one another."""


def read_base_results(path: str) -> tuple[dict, dict]:
    """The report at `path` (`--base_results`): the protocol it was measured with (PROTOCOL's arguments, the model,
    its dtype, each Jacobi setting's full configuration) and its base figures; a `CliError` unless it reads as this
    command's report."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        earlier = {key: report["settings"][key] for key in PROTOCOL}
        earlier |= {"model": report["model"], "dtype": report.get("dtype"), "jacobi": _jacobi(report["base"])}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CliError(
            f"--base_results {path}: not a report of hf-jacobi evaluate --output_file ({type(error).__name__}: {error})"
        ) from error
    return earlier, report["base"]


def refuse_another_protocol(path: str, earlier: dict, protocol: dict) -> None:
    """A `CliError` naming each key of `protocol` whose value the report at `path` (its protocol `earlier`) differs in."""
    changed = sorted(key for key in protocol if earlier.get(key) != protocol[key])
    if changed:
        shown = ", ".join(f"{key}: {earlier.get(key)!r} there, {protocol[key]!r} here" for key in changed)
        raise CliError(f"--base_results {path} was measured with another protocol ({shown}): run without it")


def _jacobi(figures: dict) -> dict:
    """name -> full JacobiConfig dict of a report's settings (fields added since filled with their defaults)."""
    from ..decoding.config import JacobiConfig

    return {entry["name"]: JacobiConfig(**entry["settings"]).to_dict() for entry in figures["settings"]}


def _probe_folders(folders: list[str] | None) -> dict:
    """Each `--probe_trajectories` folder's trajectories, loaded; a `CliError` naming a folder that holds none."""
    from ..data.collection import load_trajectories
    from ..data.trajectory_schema import TrajectoryDataError

    loaded = {}
    for folder in folders or []:
        try:
            loaded[folder] = load_trajectories(folder)
        except (OSError, ValueError, TrajectoryDataError) as error:
            raise CliError(f"--probe_trajectories {folder}: {error}") from error
    return loaded


def _probe(model, probes: dict, limit: int) -> dict:
    """The acceptance probe of `model` on each folder's first `limit` trajectories, by folder."""
    from ..training.probe import probe_acceptance

    return {folder: probe_acceptance(model, rows, limit=limit).to_dict() for folder, rows in probes.items()}


def _trained_model(args: EvaluateArguments, model_args: ModelConfig, model):
    """The trained model to compare: `--adapter` applied to the loaded base, or `--trained_model` loaded with the
    base's dtype and attention; None when neither is given."""
    if args.adapter:
        return apply_adapter(model, args.adapter)
    if args.trained_model:
        trained_args = ModelConfig(
            model_name_or_path=args.trained_model,
            dtype=model_args.dtype,
            attn_implementation=model_args.attn_implementation,
        )
        return load_model_and_tokenizer(trained_args, flag="--trained_model")[0]
    return None


def run_evaluate(argv: list[str]) -> int:
    """Held-out figures of the base model and, if given, the trained one: tokens per forward of each Jacobi variant,
    greedy answers' distinct 3-grams, and the NLL of the base model's answers; exit 1 if any output differs."""
    from ..training.evaluation import ModelFigures, canonical_solution_nll, evaluate_model

    args, model_args = parse_step_arguments("evaluate", (EvaluateArguments, ModelConfig), argv)
    check_model_arguments(model_args, adapter=args.adapter)
    check_model_name(args.trained_model, "--trained_model")
    settings = jacobi_variants(args.settings, args.block_size)
    if args.output_file:
        check_writable(args.output_file, folder=False, what="--output_file")
    probes = _probe_folders(args.probe_trajectories)  # read before any model loads: a bad folder costs nothing
    prompts = args.load()
    args.prompt_split = args.resolved_split()  # the record names the split read, also where the source chose it
    protocol = {key: getattr(args, key) for key in PROTOCOL} | {"model": model_args.model_name_or_path}
    protocol["jacobi"] = {name: config.to_dict() for name, config in settings.items()}
    # the report is checked before the model loads, and its dtype once the model has (the dtype "auto" resolves to)
    earlier = earlier_figures = None
    if args.base_results is not None:
        earlier, earlier_figures = read_base_results(args.base_results)
        refuse_another_protocol(args.base_results, earlier, protocol)
    model, tokenizer = load_model_and_tokenizer(model_args)
    dtype = str(model.dtype).removeprefix("torch.")
    if earlier is not None:
        refuse_another_protocol(args.base_results, earlier, {"dtype": dtype})
    prompt_ids = encode_prompts(prompts, tokenizer, chat=args.chat_template)
    measure = {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}
    known = None if earlier_figures is None else ModelFigures.from_dict(earlier_figures)
    base, base_answers = evaluate_model(model, prompt_ids, settings, known=known, **measure)
    if known is not None and not base.reused:
        logger.warning(
            "--base_results %s: the base's greedy answers differ from that report's; measured it", args.base_results
        )
    results = {"model": model_args.model_name_or_path, "dtype": dtype, "prompts": args.prompts}
    results |= {"split": args.prompt_split, "base_results": args.base_results if base.reused else None}
    results["base"] = base.to_dict()
    if args.humaneval_nll:
        reused = earlier_figures.get("humaneval_canonical_nll") if base.reused else None
        nll = canonical_solution_nll(model, tokenizer) if reused is None else reused
        results["base"]["humaneval_canonical_nll"] = nll
    if probes:
        results["base"]["probe"] = _probe(model, probes, args.probe_limit)
    trained = _trained_model(args, model_args, model)
    if trained is not None:
        figures, _ = evaluate_model(trained, prompt_ids, settings, reference_answers=base_answers, **measure)
        results["trained"] = figures.to_dict()
        if probes:
            results["trained"]["probe"] = _probe(trained, probes, args.probe_limit)
        if args.humaneval_nll:
            nll = canonical_solution_nll(trained, tokenizer)
            results["trained"]["humaneval_canonical_nll"] = nll
            results["trained"]["humaneval_canonical_nll_vs_base"] = nll / results["base"]["humaneval_canonical_nll"]
    print(json.dumps(results, indent=2))
    if args.output_file:
        write_text(args.output_file, json.dumps({**results, "settings": asdict(args)}, indent=2))
    checks = [s["identical_to_greedy"] for k in ("base", "trained") if k in results for s in results[k]["settings"]]
    verdict, code = greedy_verdict(dtype, sum(map(bool, checks)), len(checks), "Jacobi settings")
    if not all(checks):
        logger.warning(verdict)
    return code
