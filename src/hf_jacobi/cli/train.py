"""`hf-jacobi train`: Jacobi Forcing training of a model on collected trajectories, from a YAML recipe and/or flags.

Every flag of `JacobiForcingConfig`, `SFTConfig`, `TrainingArguments` and TRL's `ModelConfig` (LoRA included) is
accepted besides `TrainScriptArguments`' own; the run resumes from a checkpoint, saves its final weights atomically
and writes its model card.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from trl import ModelConfig, get_peft_config

from ..adapters import adapter_folder_problem
from ..atomic import check_writable, staged_files
from ..data.collection import load_trajectories, select_trajectories
from ..data.prompts import encode_prompts, held_out_split, load_prompts
from ..training.config import JacobiForcingConfig
from ..training.stopping import checkpoint_step
from ..training.trainer import JacobiForcingTrainer
from .recipe_args import jacobi_variants, load_model_and_tokenizer, parse_step_arguments
from .train_checks import check_trajectories

logger = logging.getLogger(__name__)


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
    trajectories_of_another_model: bool = field(
        default=False,
        metadata={
            "help": "Train on trajectories whose recorded model (model_identity.json) is not this one, knowingly; by "
            "default such folders are refused, since Jacobi Forcing trains a model on its own trajectories"
        },
    )
    eval_fraction: float = field(default=0.0, metadata={"help": "Share of trajectories held out for evaluation."})
    eval_trajectories: list[str] | None = field(
        default=None,
        metadata={
            "help": "Folder(s) of trajectories of other prompts to evaluate on at every eval (the eval loss and the "
            "acceptance probe's eval_probe/... figures; set eval_strategy): a fixed held-out set, where eval_fraction "
            "takes one out of the training data"
        },
    )
    eval_trajectory_prompts: str | None = field(
        default=None,
        metadata={
            "help": "Only the trajectories of this prompt source's prompts (as --trajectory_prompts, split "
            "--trajectory_prompt_split) in --eval_trajectories (default: all)"
        },
    )
    num_eval_trajectory_prompts: int | None = field(
        default=None, metadata={"help": "Only the first N prompts of --eval_trajectory_prompts (default: all)."}
    )
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
        if isinstance(self.eval_trajectories, str):
            self.eval_trajectories = [self.eval_trajectories]
        if self.eval_trajectories and self.eval_fraction:
            raise ValueError(
                f"eval_trajectories={self.eval_trajectories} and eval_fraction={self.eval_fraction} both choose the "
                "eval set: set one of them."
            )
        if self.eval_trajectory_prompts is not None and not self.eval_trajectories:
            raise ValueError(f"eval_trajectory_prompts={self.eval_trajectory_prompts!r} needs eval_trajectories.")
        if self.num_eval_trajectory_prompts is not None and self.eval_trajectory_prompts is None:
            raise ValueError(
                f"num_eval_trajectory_prompts={self.num_eval_trajectory_prompts} needs eval_trajectory_prompts: the "
                "prompt source it counts in."
            )
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

    def load_eval(self, train: datasets.Dataset) -> datasets.Dataset | None:
        """The `--eval_trajectories` (those of `--eval_trajectory_prompts` where named), or None; refused where a
        prompt is also one the run trains on, since an eval on training prompts says nothing of held-out ones."""
        if not self.eval_trajectories:
            return None
        dataset = load_trajectories(self.eval_trajectories)
        if self.eval_trajectory_prompts is not None:
            wanted = load_prompts(
                self.eval_trajectory_prompts,
                split=self.trajectory_prompt_split,
                limit=self.num_eval_trajectory_prompts,
            )["prompt_id"]
            dataset = select_trajectories(dataset, list(wanted), repr(self.eval_trajectory_prompts))
        shared = sorted(set(dataset["prompt_id"]) & set(train["prompt_id"]))
        if shared:
            raise ValueError(
                f"--eval_trajectories {' '.join(self.eval_trajectories)} hold {len(shared)} prompt(s) the run also "
                f"trains on (e.g. {shared[0]!r}): evaluate on prompts it does not train on."
            )
        return dataset

    def load_anchor_texts(self, base_kl_weight: float) -> datasets.Dataset | None:
        """The `--anchor_texts` (the first `--num_anchor_texts`), or None; read before the model loads, so that a bad
        source is reported at once. Refused when the KL anchor that reads them is off (`base_kl_weight`)."""
        if self.anchor_texts is None:
            return None
        if not base_kl_weight > 0:
            raise ValueError(
                f"anchor_texts={self.anchor_texts!r} is read only by the KL anchor, which is off: set base_kl_weight > 0."
            )
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
        if problem := adapter_folder_problem(self.init_adapter):
            raise ValueError(f"init_adapter {self.init_adapter} {problem}.")
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

    def load_heldout_prompts(self) -> datasets.Dataset | None:
        """The `--heldout_prompts` to measure on, or None; read before the model loads, so that a bad source is
        reported at once."""
        if self.heldout_prompts is None:
            return None
        split = held_out_split(self.heldout_prompts, self.heldout_split)
        return load_prompts(self.heldout_prompts, split=split, limit=self.heldout_num_prompts)

    def callback(self, prompts: datasets.Dataset | None, tokenizer):
        """The held-out speed callback on `prompts` (`load_heldout_prompts`), or None."""
        if prompts is None:
            return None
        from ..training.heldout import HeldOutSpeedCallback

        return HeldOutSpeedCallback(
            encode_prompts(prompts, tokenizer),
            jacobi_variants(self.heldout_settings, self.heldout_block_size),
            every_steps=self.heldout_every_steps,
            max_new_tokens=self.heldout_max_new_tokens,
        )


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


def run_train(argv: list[str]) -> int:
    script_args, training_args, model_args = parse_step_arguments(
        "train", (TrainScriptArguments, JacobiForcingConfig, ModelConfig), argv
    )
    check_writable(training_args.output_dir, folder=True, what="--output_dir")
    checkpoint = resolve_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
    stop = training_args.stop_after_steps
    if stop is not None and checkpoint is not None and (reached := checkpoint_step(checkpoint)) >= stop:
        # Trainer would train one more step before a callback could stop it; the run that reached the step saved it.
        logger.warning("%s is at step %d, stop_after_steps=%d: nothing left to train", checkpoint, reached, stop)
        return 0
    # bad data, a folder without the prompts asked for, or an adapter the run cannot continue is reported before the
    # model loads
    dataset = script_args.load()
    eval_dataset = script_args.load_eval(dataset)
    if eval_dataset is not None and training_args.eval_strategy == "no":
        raise ValueError("eval_trajectories are read at each evaluation: set eval_strategy (steps or epoch).")
    anchor_texts = script_args.load_anchor_texts(training_args.base_kl_weight)
    heldout_prompts = script_args.load_heldout_prompts()
    peft_config = get_peft_config(model_args)
    script_args.check_init_adapter(peft_config)
    model, tokenizer = load_model_and_tokenizer(model_args, eval_mode=False)
    check_trajectories(dataset, model, script_args, model_args.model_name_or_path)
    if eval_dataset is not None:
        check_trajectories(
            eval_dataset, model, script_args, model_args.model_name_or_path, script_args.eval_trajectories
        )
    if script_args.eval_fraction:
        if not 0 < script_args.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {script_args.eval_fraction}.")
        split = dataset.train_test_split(test_size=script_args.eval_fraction, seed=training_args.seed)
        dataset, eval_dataset = split["train"], split["test"]
    heldout = script_args.callback(heldout_prompts, tokenizer)
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
