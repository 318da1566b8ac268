"""What the recipe steps (`hf-jacobi collect`, `train`, `evaluate`) share: the prompt settings, the model they load and
the named Jacobi variants they measure.

Each step reads its settings from a YAML recipe (`--config`) and/or command-line flags through TRL's parser, in the
alignment-handbook way: recipes are data, one entry point per step, and every flag of the step's dataclasses (for
training also `JacobiForcingConfig`, `SFTConfig`, `TrainingArguments`) and TRL's `ModelConfig` (LoRA included) is
accepted. All three run under `accelerate launch` as well as alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from trl import ModelConfig

from ..data.prompt_rows import PromptColumnError
from ..data.prompts import load_prompts, resolve_split
from ..decoding.checks import SUPPORTED_ATTENTION
from ..loading import EMBEDDED, ModelLoadError, load_model, model_name_problem
from .common import CliError

TRAINING_ATTENTION = (*SUPPORTED_ATTENTION, "flex_attention")
"""Attention implementations that take the Jacobi Forcing training masks (`training.masks.NoiseAwareMask`); the
steps that decode take `SUPPORTED_ATTENTION`, those that express the 4D masks of Jacobi decoding."""


@dataclass
class PromptArguments:
    """Which prompts a step runs on."""

    prompts: str = field(
        default="stdlib",
        metadata={
            "help": "A named prompt source (hf_jacobi.data.prompts.PROMPT_SOURCES: stdlib, packages, magpie, humaneval, "
            "opencodeinstruct, openthoughts2), a hub dataset name or a local json/jsonl/parquet"
        },
    )
    prompt_split: str | None = field(
        default=None,
        metadata={
            "help": "Split of the prompt source (default: the source's own: train for stdlib, packages, magpie and a "
            "hub dataset, test for humaneval, requests, code-tasks; a local file has one split)."
        },
    )
    prompt_column: str | None = field(default=None, metadata={"help": "Column holding the prompt (default: guessed)."})
    skip_prompts: int = field(default=0, metadata={"help": "Prompts to skip first (e.g. to hold some out)."})
    num_prompts: int | None = field(default=None, metadata={"help": "Prompts to use after the skipped ones."})
    chat_template: bool = field(default=True, metadata={"help": "Format prompts with the tokenizer's chat template."})

    def load(self) -> datasets.Dataset:
        """The prompts after `skip_prompts`; a file without a prompt column is a `CliError` naming `--prompt_column`
        (the library's message names its Python keyword)."""
        if self.skip_prompts < 0:
            raise ValueError(f"skip_prompts must be >= 0, got {self.skip_prompts}.")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {self.num_prompts}.")
        limit = None if self.num_prompts is None else self.skip_prompts + self.num_prompts
        try:
            prompts = load_prompts(self.prompts, split=self.prompt_split, limit=limit, column=self.prompt_column)
        except PromptColumnError as error:
            raise CliError(error.message("--prompt_column NAME")) from error
        if self.skip_prompts >= len(prompts):
            raise ValueError(f"skip_prompts={self.skip_prompts} leaves none of the {len(prompts)} prompts.")
        return prompts.select(range(self.skip_prompts, len(prompts)))

    def resolved_split(self) -> str:
        """The split `load` reads (`prompt_split`, else the source's own), for a run's record of what it used."""
        return resolve_split(self.prompts, self.prompt_split)


def parse_step_arguments(step: str, dataclass_types: tuple, argv: list[str]) -> tuple:
    """The step's dataclasses from `argv` by TRL's parser (a `--config` YAML recipe, then the flags); a recipe that is
    not there or not YAML, or a key or flag no dataclass has, is a one-line `CliError` naming it (and the nearest
    accepted name), before anything runs."""
    import yaml
    from trl import TrlParser

    config = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    if config is not None and not Path(config).is_file():
        raise CliError(f"--config {config!r} is not a file (expected a YAML recipe)")
    parser = TrlParser(dataclass_types)
    try:
        *parsed, from_config, from_flags = parser.parse_args_and_config(
            args=list(argv), return_remaining_strings=True, separate_remaining_strings=True
        )
    except yaml.YAMLError as error:
        raise CliError(f"--config {config!r} is not valid YAML ({' '.join(str(error).split())})") from error
    accepted = [option for option in parser._option_string_actions if option.startswith("--")]
    for where, leftover, key in (
        (f"--config {config!r} has unknown key(s)", from_config, True),
        ("unknown argument(s)", from_flags, False),
    ):
        names = [s for s in leftover if s.startswith("-")] or leftover
        if names:
            hints = [hint for name in names for hint in difflib.get_close_matches(name, accepted, n=1)]
            shown = ", ".join(name.lstrip("-") if key else name for name in names)
            guess = f" (did you mean {', '.join(h.lstrip('-') if key else h for h in hints)}?)" if hints else ""
            raise CliError(f"{where} {shown}{guess}; the accepted ones: hf-jacobi {step} --help")
    return tuple(parsed)


def check_model_name(name: str | None, flag: str) -> None:
    """Refuses a model name that is neither a checkpoint folder nor a Hub id, naming `flag`, before anything runs."""
    problem = None if name is None else model_name_problem(name)
    if problem is not None:
        raise CliError(f"{flag} {name!r} {problem}")


def check_attention(attn_implementation: str, accepted: Sequence[str]) -> None:
    """Refuses an attention implementation that cannot take the step's 4D masks (flash attention among them, installed
    or not), before the model loads."""
    if attn_implementation not in accepted:
        raise CliError(
            f"--attn_implementation {attn_implementation!r} cannot take the 4D attention masks this step builds; "
            f"accepted: {', '.join(accepted)}"
        )


def check_model_arguments(
    model_args: ModelConfig, *, eval_mode: bool = True, adapter: str | None = None, flag: str = "--model_name_or_path"
) -> None:
    """The model flags' checks that need no download, run before a step reads its prompts or data: the attention
    implementation (a model loaded to decode, `eval_mode`, takes `SUPPORTED_ATTENTION`, one loaded to train
    `TRAINING_ATTENTION`), the form of the model name and the `--adapter` folder."""
    check_attention(model_args.attn_implementation or "sdpa", SUPPORTED_ATTENTION if eval_mode else TRAINING_ATTENTION)
    check_model_name(model_args.model_name_or_path, flag)
    if adapter is not None:
        from ..adapters import adapter_folder_problem

        if problem := adapter_folder_problem(adapter):
            raise CliError(f"--adapter {adapter!r} {problem}")


def load_model_and_tokenizer(
    model_args: ModelConfig, *, device=None, eval_mode: bool = True, flag: str = "--model_name_or_path"
):
    """The model a recipe names (`embedded`, a local folder or a Hub id, at `--model_revision`) with the dtype and
    attention it asks for; without `--model_name_or_path`, the embedded model, as `hf-jacobi generate` does. A name,
    attention (see `check_model_arguments`) or download that fails is a one-line `CliError` naming `flag`."""
    check_model_arguments(model_args, eval_mode=eval_mode, flag=flag)
    try:
        return load_model(
            model_args.model_name_or_path or EMBEDDED,
            dtype=model_args.dtype or "float32",
            device=device,
            attn_implementation=model_args.attn_implementation or "sdpa",
            eval_mode=eval_mode,
            revision=model_args.model_revision,
        )
    except ModelLoadError as error:
        raise CliError(f"{flag} {error}") from error


def jacobi_variants(names: list[str], block_size: int) -> dict:
    """name -> JacobiConfig of the benchmark's named variants (plain, recycling, multi-block, both)."""
    from ..bench.common import VARIANTS, variant_config

    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"settings {unknown} are not Jacobi variants; accepted: {list(VARIANTS)}")
    return {name: variant_config(name, block_size) for name in names}
