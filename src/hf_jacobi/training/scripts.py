"""The recipe steps behind `hf-jacobi collect`, `hf-jacobi train` and `hf-jacobi evaluate`.

Each step reads its settings from a YAML recipe (`--config`) and/or command-line flags through TRL's parser, in the
alignment-handbook way: recipes are data, one entry point per step, and every flag of `JacobiForcingConfig`,
`SFTConfig`, `TrainingArguments` and TRL's `ModelConfig` (LoRA included) is accepted. All three run under
`accelerate launch` as well as alone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
from trl import ModelConfig, TrlParser, get_peft_config

from ..atomic import check_writable, staged_files, write_text
from ..data.collection import collect_trajectories, load_trajectories, select_trajectories
from ..data.prompts import PROMPT_SOURCES, encode_prompts, load_prompts
from ..loading import EMBEDDED, apply_adapter, load_model, missing_adapter_files, process_state
from .config import JacobiForcingConfig
from .trainer import JacobiForcingTrainer

logger = logging.getLogger(__name__)


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


@dataclass
class CollectArguments(PromptArguments):
    output_dir: str = field(default="trajectories", metadata={"help": "Folder of the trajectory shards."})
    block_size: int = field(default=16, metadata={"help": "Jacobi block size n of the recorded trajectories."})
    max_new_tokens: int = field(default=256, metadata={"help": "Tokens to generate per prompt."})
    batch_size: int = field(default=1, metadata={"help": "Prompts decoded together per process."})
    shard_size: int = field(
        default=64,
        metadata={
            "help": "Rows per parquet file (layout only: every batch is on disk as soon as it finishes; the file being "
            "filled is rewritten each batch, so very large shards cost more writes)."
        },
    )
    max_prompt_tokens: int | None = field(default=None, metadata={"help": "Refuse prompts longer than this."})
    draft_seed: int = field(default=0, metadata={"help": "Seed of the random initial drafts."})
    adapter: str | None = field(
        default=None,
        metadata={
            "help": "A LoRA adapter folder (as `hf-jacobi train` writes) merged into the model before collecting: "
            "a second round collects the round-1 model's own trajectories"
        },
    )

    def model_id(self, model_args: ModelConfig) -> str:
        """What the trajectories come from, recorded in the folder so that a resumed collection cannot mix models."""
        name = model_args.model_name_or_path or EMBEDDED
        return name if self.adapter is None else f"{name} + {self.adapter}"


def _lora_modules(config) -> set[str]:
    """A LoRA config's target modules as a set; peft also takes one string (e.g. "all-linear")."""
    modules = config.target_modules or ()
    return {modules} if isinstance(modules, str) else set(modules)


@dataclass
class TrainScriptArguments:
    trajectories: list[str] = field(
        default_factory=lambda: ["trajectories"],
        metadata={
            "help": "Folder(s) written by `hf-jacobi collect`; several (e.g. one per prompt source) train as one "
            "dataset, as long as no prompt is in two of them."
        },
    )
    trajectory_prompts: list[str] | None = field(
        default=None,
        metadata={
            "help": "Train only on the trajectories of these prompt sources' prompts (as collect's --prompts), e.g. "
            "to reproduce a run on folders that have grown since (default: every trajectory in the folders)"
        },
    )
    trajectory_prompt_split: str = field(default="train", metadata={"help": "Split of --trajectory_prompts."})
    num_trajectory_prompts: list[int] | None = field(
        default=None,
        metadata={
            "help": "Only the first N prompts of each --trajectory_prompts source, one N per source (default: all)."
        },
    )
    eval_fraction: float = field(default=0.0, metadata={"help": "Share of trajectories held out for evaluation."})
    init_adapter: str | None = field(
        default=None,
        metadata={
            "help": "A LoRA adapter folder to keep training instead of a fresh adapter (with use_peft, the same rank "
            "and target modules): a second round continues the round-1 adapter on the round-1 model's trajectories"
        },
    )
    anchor_texts: str | None = field(
        default=None,
        metadata={
            "help": "Human-written texts the KL anchor holds the model to the base on, mixed into the training rows "
            "(needs base_kl_weight > 0): 'packages-source' (shipped: the source code of the `packages` train "
            "prompts' functions) or a local .parquet/.json/.jsonl file with a 'text' column (default: none)"
        },
    )
    num_anchor_texts: int | None = field(
        default=None, metadata={"help": "Only the first N anchor texts (default: all of --anchor_texts)."}
    )
    heldout_prompts: str | None = field(
        default=None,
        metadata={"help": "A prompt source to measure held-out tokens per forward on during training (off if unset)."},
    )
    heldout_split: str = field(default="test", metadata={"help": "Split of the held-out prompt source."})
    heldout_num_prompts: int = field(default=16, metadata={"help": "Held-out prompts measured each time."})
    heldout_every_steps: int = field(default=50, metadata={"help": "Optimizer steps between held-out measurements."})
    heldout_max_new_tokens: int = field(default=64, metadata={"help": "Tokens generated per held-out prompt."})
    heldout_block_size: int = field(default=16, metadata={"help": "Jacobi block size of the held-out settings."})
    heldout_settings: list[str] = field(
        default_factory=lambda: ["plain", "both"], metadata={"help": "Jacobi variants measured on held-out prompts."}
    )

    def __post_init__(self) -> None:
        # A recipe (or a Python caller) may name one folder, source or count without a list.
        if isinstance(self.trajectories, str):
            self.trajectories = [self.trajectories]
        if isinstance(self.trajectory_prompts, str):
            self.trajectory_prompts = [self.trajectory_prompts]
        if isinstance(self.num_trajectory_prompts, int):
            self.num_trajectory_prompts = [self.num_trajectory_prompts]
        if self.num_anchor_texts is not None and self.anchor_texts is None:
            raise ValueError(f"num_anchor_texts={self.num_anchor_texts} needs anchor_texts: the texts it counts in.")
        if self.num_anchor_texts is not None and self.num_anchor_texts < 1:
            raise ValueError(f"num_anchor_texts must be >= 1, got {self.num_anchor_texts}.")
        counts = self.num_trajectory_prompts
        if counts is None:
            return
        if self.trajectory_prompts is None:
            raise ValueError("num_trajectory_prompts needs trajectory_prompts: the prompt source(s) it counts in.")
        if len(counts) != len(self.trajectory_prompts):
            raise ValueError(
                f"num_trajectory_prompts {counts} must give one count per trajectory_prompts source "
                f"{self.trajectory_prompts}."
            )
        if any(count < 1 for count in counts):
            raise ValueError(f"num_trajectory_prompts must each be >= 1, got {counts}.")

    def load(self) -> datasets.Dataset:
        """The trajectories to train on: every one in `--trajectories`, or only those of the prompts
        `--trajectory_prompts` names, all of which must be there."""
        dataset = load_trajectories(self.trajectories)
        if self.trajectory_prompts is None:
            return dataset
        counts = self.num_trajectory_prompts or [None] * len(self.trajectory_prompts)
        wanted: list[str] = []
        for source, count in zip(self.trajectory_prompts, counts, strict=True):
            wanted += list(load_prompts(source, split=self.trajectory_prompt_split, limit=count)["prompt_id"])
        return select_trajectories(
            dataset, wanted, f"{' + '.join(map(repr, self.trajectory_prompts))} ({self.trajectory_prompt_split})"
        )

    def load_anchor_texts(self) -> datasets.Dataset | None:
        """The `--anchor_texts` (the first `--num_anchor_texts`), or None; read before the model loads, so that a bad
        source is reported at once."""
        if self.anchor_texts is None:
            return None
        from ..data.anchor_texts import load_anchor_texts

        return load_anchor_texts(self.anchor_texts, self.num_anchor_texts)

    def check_init_adapter(self, peft_config) -> None:
        """Refuse an `--init_adapter` that is not the LoRA the run asks for, before the base model loads: one adapter
        trained over two rounds ships as one small file, where a second adapter on a merged first would not."""
        from peft import PeftConfig

        if self.init_adapter is None:
            return
        if peft_config is None:
            raise ValueError(f"init_adapter={self.init_adapter!r} continues a LoRA adapter: set use_peft true.")
        missing = missing_adapter_files(self.init_adapter)
        if missing:
            raise ValueError(f"init_adapter {self.init_adapter} is not a PEFT adapter folder (missing {missing}).")
        saved = PeftConfig.from_pretrained(self.init_adapter)
        wanted, found = (peft_config.r, _lora_modules(peft_config)), (saved.r, _lora_modules(saved))
        if wanted != found:
            raise ValueError(
                f"init_adapter {self.init_adapter} has LoRA rank {found[0]} on {sorted(found[1])}, but the run asks "
                f"for rank {wanted[0]} on {sorted(wanted[1])}; set lora_r and lora_target_modules to the adapter's."
            )

    def continued_adapter(self, model, peft_config):
        """`model` with the checked `--init_adapter` loaded trainable."""
        from peft import PeftModel

        self.check_init_adapter(peft_config)
        return PeftModel.from_pretrained(model, self.init_adapter, is_trainable=True)

    def callback(self, tokenizer):
        """The held-out speed callback these settings ask for, or None."""
        if self.heldout_prompts is None:
            return None
        from .heldout import HeldOutSpeedCallback

        prompts = load_prompts(self.heldout_prompts, split=self.heldout_split, limit=self.heldout_num_prompts)
        return HeldOutSpeedCallback(
            encode_prompts(prompts, tokenizer),
            _variants(self.heldout_settings, self.heldout_block_size),
            every_steps=self.heldout_every_steps,
            max_new_tokens=self.heldout_max_new_tokens,
        )


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


def _variants(names: list[str], block_size: int) -> dict:
    """name -> JacobiConfig of the benchmark's named variants (plain, recycling, multi-block, both)."""
    from ..bench.common import VARIANTS, variant_config

    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise ValueError(f"settings {unknown} are not Jacobi variants; accepted: {list(VARIANTS)}")
    return {name: variant_config(name, block_size) for name in names}


RESUME_LAST = ("true", "last")
"""`--resume_from_checkpoint` values that mean: the newest complete checkpoint in the output folder."""


def resolve_checkpoint(output_dir: str, value: str | bool | None) -> str | None:
    """The checkpoint folder to resume from: a path as given; `true` / `last` the newest `checkpoint-*` in `output_dir`
    that holds a trainer_state.json (transformers writes it last, so a run killed while saving leaves a folder without
    it, which transformers itself would pick and then fail on); None when there is nothing to resume."""
    if value is None or value is False or (isinstance(value, str) and value.lower() in ("", "false", "none")):
        return None
    if value is not True and str(value).lower() not in RESUME_LAST:
        if not Path(str(value)).is_dir():
            raise ValueError(f"resume_from_checkpoint={value!r} is not a folder; pass a checkpoint folder, or 'last'")
        return str(value)
    folders = sorted(Path(output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[-1]), reverse=True)
    complete = [p for p in folders if (p / "trainer_state.json").is_file()]
    for incomplete in folders[: folders.index(complete[0])] if complete else folders:
        logger.warning("skipping %s: it has no trainer_state.json (the run stopped while saving it)", incomplete)
    if not complete:
        logger.warning("no complete checkpoint in %s: training starts from the beginning", output_dir)
        return None
    return str(complete[0])


def run_collect(argv: list[str]) -> int:
    parser = TrlParser((CollectArguments, ModelConfig))
    args, model_args = parser.parse_args_and_config(args=argv)
    source = PROMPT_SOURCES.get(args.prompts)
    if source is not None and source.evaluation_only:
        raise ValueError(
            f"prompt source {args.prompts!r} is an evaluation set: collecting training trajectories from it would leak "
            "it into the model; use a training source such as 'packages' or 'stdlib'"
        )
    check_writable(args.output_dir, folder=True, what="--output_dir")
    prompts = args.load()  # a bad prompt source is reported before the model loads
    state = process_state()
    model, tokenizer = load_model_and_tokenizer(model_args, device=state.device)
    if args.adapter is not None:
        model = apply_adapter(model, args.adapter)
    with torch.inference_mode():
        output = collect_trajectories(
            model,
            tokenizer,
            prompts,
            args.output_dir,
            block_size=args.block_size,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            shard_size=args.shard_size,
            chat=args.chat_template,
            max_prompt_tokens=args.max_prompt_tokens,
            draft_seed=args.draft_seed,
            model_id=args.model_id(model_args),
        )
    if state.is_main_process:
        collected = load_trajectories(output)
        blocks = sum(len(s) for s in collected["states"])
        states = sum(len(b) for s in collected["states"] for b in s)
        print(f"{len(collected)} trajectories, {blocks} blocks, {states} states in {output}")
    return 0


def run_train(argv: list[str]) -> int:
    parser = TrlParser((TrainScriptArguments, JacobiForcingConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config(args=argv)
    check_writable(training_args.output_dir, folder=True, what="--output_dir")
    # bad data, a folder without the prompts asked for, or an adapter the run cannot continue is reported before the
    # model loads
    dataset = script_args.load()
    if script_args.anchor_texts is not None and not training_args.base_kl_weight > 0:
        raise ValueError(
            f"anchor_texts={script_args.anchor_texts!r} is read only by the KL anchor, which is off: set "
            "base_kl_weight > 0."
        )
    anchor_texts = script_args.load_anchor_texts()
    peft_config = get_peft_config(model_args)
    script_args.check_init_adapter(peft_config)
    model, tokenizer = load_model_and_tokenizer(model_args, eval_mode=False)
    eval_dataset = None
    if script_args.eval_fraction:
        if not 0 < script_args.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {script_args.eval_fraction}.")
        split = dataset.train_test_split(test_size=script_args.eval_fraction, seed=training_args.seed)
        dataset, eval_dataset = split["train"], split["test"]
    heldout = script_args.callback(tokenizer)
    if anchor_texts is not None:
        from ..data.anchor_texts import encode_anchor_texts

        anchor_texts = encode_anchor_texts(anchor_texts, tokenizer, training_args.max_length)
    if script_args.init_adapter is not None:
        model, peft_config = script_args.continued_adapter(model, peft_config), None
    trainer = JacobiForcingTrainer(
        model,
        args=training_args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[heldout] if heldout is not None else None,
        anchor_dataset=anchor_texts,
    )
    checkpoint = resolve_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
    trainer.train(resume_from_checkpoint=checkpoint)
    # The final weights appear whole or not at all: a run stopped while saving leaves the previous files in place.
    with staged_files(training_args.output_dir) as staging:
        trainer.save_model(str(staging))
    # The run's own trainer_state.json (checkpoints hold only what was known when they were saved): the log history
    # with the final held-out measurement, which the callback takes after the last checkpoint.
    trainer.save_state()
    if trainer.accelerator.is_main_process:
        trainer.create_model_card(model_name=Path(training_args.output_dir).name)
    if training_args.push_to_hub:
        trainer.push_to_hub()
    return 0


def run_evaluate(argv: list[str]) -> int:
    """Held-out figures of the base model and, if given, the trained one: tokens per forward of each Jacobi variant,
    greedy answers' distinct 3-grams, and the NLL of the base model's answers; exit 1 if any output differs."""
    from .evaluation import canonical_solution_nll, evaluate_model

    parser = TrlParser((EvaluateArguments, ModelConfig))
    args, model_args = parser.parse_args_and_config(args=argv)
    settings = _variants(args.settings, args.block_size)
    if args.output_file:
        check_writable(args.output_file, folder=False, what="--output_file")
    prompts = args.load()
    model, tokenizer = load_model_and_tokenizer(model_args)
    prompt_ids = encode_prompts(prompts, tokenizer, chat=args.chat_template)
    measure = {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}
    base, base_answers = evaluate_model(model, prompt_ids, settings, **measure)
    results = {"model": model_args.model_name_or_path, "prompts": args.prompts, "split": args.prompt_split}
    results["base"] = base.to_dict()
    if args.humaneval_nll:
        results["base"]["humaneval_canonical_nll"] = canonical_solution_nll(model, tokenizer)
    trained = None
    if args.adapter:
        trained = apply_adapter(model, args.adapter)
    elif args.trained_model:
        trained, _ = load_model_and_tokenizer(
            ModelConfig(model_name_or_path=args.trained_model, dtype=model_args.dtype)
        )
    if trained is not None:
        figures, _ = evaluate_model(trained, prompt_ids, settings, reference_answers=base_answers, **measure)
        results["trained"] = figures.to_dict()
        if args.humaneval_nll:
            nll = canonical_solution_nll(trained, tokenizer)
            results["trained"]["humaneval_canonical_nll"] = nll
            results["trained"]["humaneval_canonical_nll_vs_base"] = nll / results["base"]["humaneval_canonical_nll"]
    print(json.dumps(results, indent=2))
    if args.output_file:
        write_text(args.output_file, json.dumps({**results, "settings": asdict(args)}, indent=2))
    ok = all(s["identical_to_greedy"] for k in ("base", "trained") if k in results for s in results[k]["settings"])
    return 0 if ok else 1
