"""What the recipe steps (`hf-jacobi collect`, `train`, `evaluate`) share: the prompt settings, the model they load and
the named Jacobi variants they measure.

Each step reads its settings from a YAML recipe (`--config`) and/or command-line flags through TRL's parser, in the
alignment-handbook way: recipes are data, one entry point per step, and every flag of the step's dataclasses (for
training also `JacobiForcingConfig`, `SFTConfig`, `TrainingArguments`) and TRL's `ModelConfig` (LoRA included) is
accepted. All three run under `accelerate launch` as well as alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import datasets
from trl import ModelConfig

from ..data.prompts import load_prompts
from ..loading import EMBEDDED, load_model


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
    prompt_split: str = field(default="train", metadata={"help": "Split of a named source or a hub dataset."})
    prompt_column: str | None = field(default=None, metadata={"help": "Column holding the prompt (default: guessed)."})
    skip_prompts: int = field(default=0, metadata={"help": "Prompts to skip first (e.g. to hold some out)."})
    num_prompts: int | None = field(default=None, metadata={"help": "Prompts to use after the skipped ones."})
    chat_template: bool = field(default=True, metadata={"help": "Format prompts with the tokenizer's chat template."})

    def load(self) -> datasets.Dataset:
        if self.skip_prompts < 0:
            raise ValueError(f"skip_prompts must be >= 0, got {self.skip_prompts}.")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {self.num_prompts}.")
        limit = None if self.num_prompts is None else self.skip_prompts + self.num_prompts
        prompts = load_prompts(self.prompts, split=self.prompt_split, limit=limit, column=self.prompt_column)
        if self.skip_prompts >= len(prompts):
            raise ValueError(f"skip_prompts={self.skip_prompts} leaves none of the {len(prompts)} prompts.")
        return prompts.select(range(self.skip_prompts, len(prompts)))


def load_model_and_tokenizer(model_args: ModelConfig, *, device=None, eval_mode: bool = True):
    """The model a recipe names (`embedded` or a local folder / hub id) with the dtype and attention it asks for;
    without `--model_name_or_path`, the embedded model, as `hf-jacobi generate` does."""
    return load_model(
        model_args.model_name_or_path or EMBEDDED,
        dtype=model_args.dtype or "float32",
        device=device,
        attn_implementation=model_args.attn_implementation or "sdpa",
        eval_mode=eval_mode,
    )


def jacobi_variants(names: list[str], block_size: int) -> dict:
    """name -> JacobiConfig of the benchmark's named variants (plain, recycling, multi-block, both)."""
    from ..bench.common import VARIANTS, variant_config

    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"settings {unknown} are not Jacobi variants; accepted: {list(VARIANTS)}")
    return {name: variant_config(name, block_size) for name in names}
