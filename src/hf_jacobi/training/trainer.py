"""JacobiForcingTrainer: SFTTrainer on the model's own Jacobi trajectories, with the consistency and AR losses.

Everything SFTTrainer offers (LoRA through `peft_config`, gradient checkpointing, accelerate/DeepSpeed/FSDP, resume,
Hub push with a generated model card) is kept; the trainer only swaps the collator for one that packs noisy and clean
blocks under the noise-aware mask, and the loss for the paper's two-term loss, both computed in one forward.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path
from typing import Any, ClassVar

import datasets
from transformers import TrainerCallback
from trl import SFTTrainer

from ..data.masks import noise_aware_block_mask
from ..data.packing import JacobiForcingCollator
from ..decoding.kv import AttentionLayout
from ..hub.card import CITATION, CardInfo, render_model_card
from ..hub.export import prepare_publish_folder
from ..hub.upload import is_checkpoint_folder
from .config import JacobiForcingConfig
from .losses import ar_loss, consistency_loss

logger = logging.getLogger(__name__)

TRAJECTORY_COLUMNS = ("prompt_id", "prompt_ids", "completion_ids", "block_size", "states", "fixed_points")


class _CollatorEpoch(TrainerCallback):
    """Tells the collator which epoch is starting, so that each epoch draws fresh noisy views (and a resumed run the
    same views as an uninterrupted one)."""

    def __init__(self, collator: JacobiForcingCollator) -> None:
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)


class JacobiForcingTrainer(SFTTrainer):
    """Trainer for Jacobi Forcing (arXiv 2512.14681): progressive consistency distillation on Jacobi trajectories.

    Args:
        model: a model id, a local path, a `PreTrainedModel` or a `PeftModel`.
        args: a `JacobiForcingConfig`.
        train_dataset / eval_dataset: trajectories, as `collect_trajectories` writes them (`load_trajectories`).
        data_collator: defaults to a `JacobiForcingCollator` set up from `args`.
        peft_config: a peft config (e.g. `LoraConfig`) to train an adapter instead of the full model.
        Other arguments are SFTTrainer's.
    """

    _tag_names: ClassVar[list[str]] = ["trl", "sft", "jacobi-forcing", "hf_jacobi"]
    _name = "Jacobi Forcing"
    _paper: ClassVar[dict[str, str]] = {
        "title": "Fast and Accurate Causal Parallel Decoding using Jacobi Forcing",
        "id": "2512.14681",
        "citation": CITATION,
    }

    def __init__(
        self,
        model,
        args: JacobiForcingConfig | None = None,
        train_dataset: datasets.Dataset | None = None,
        eval_dataset: datasets.Dataset | dict[str, datasets.Dataset] | None = None,
        processing_class=None,
        data_collator: JacobiForcingCollator | None = None,
        peft_config=None,
        callbacks: list[TrainerCallback] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = JacobiForcingConfig(output_dir="jacobi-forcing")
        elif not isinstance(args, JacobiForcingConfig):
            raise TypeError(f"args must be a JacobiForcingConfig, got {type(args).__name__}.")
        if train_dataset is None:
            raise ValueError("train_dataset is required: trajectories from hf_jacobi.collect_trajectories.")
        if data_collator is None:
            data_collator = JacobiForcingCollator(
                pad_token_id=0,  # replaced below once the tokenizer is known
                noise_schedule=args.noise_schedule,
                noise_window=args.noise_window,
                max_length=args.max_length,
                prompt_ar_loss=args.prompt_ar_loss,
                seed=args.data_seed if args.data_seed is not None else args.seed,
            )
        train_dataset = _usable_trajectories(train_dataset, data_collator, "train")
        if isinstance(eval_dataset, dict):
            eval_dataset = {k: _usable_trajectories(v, data_collator, k) for k, v in eval_dataset.items()}
        elif eval_dataset is not None:
            eval_dataset = _usable_trajectories(eval_dataset, data_collator, "eval")
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=[*(callbacks or []), _CollatorEpoch(data_collator)],
            **kwargs,
        )
        pad = self._tokenizer.pad_token_id
        data_collator.pad_token_id = pad if pad is not None else (self._tokenizer.eos_token_id or 0)
        data_collator.mask_dtype = self.model.dtype
        attn = getattr(self.model.config, "_attn_implementation", None) or "eager"
        if attn.startswith("flash"):
            raise ValueError(
                f"Jacobi Forcing needs an arbitrary 4D attention mask, which {attn!r} cannot express; load the model "
                "with attn_implementation='sdpa', 'eager' or 'flex_attention'."
            )
        data_collator.mask_format = "flex" if attn == "flex_attention" else "additive"
        data_collator.layout = AttentionLayout.from_config(self.model.config)
        sizes = collections.Counter(train_dataset["block_size"])
        self._trained_block_size = sizes.most_common(1)[0][0] if sizes else None

    def create_model_card(
        self,
        model_name: str | None = None,
        dataset_name: str | None = None,
        tags: str | list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Writes hf_jacobi's model card instead of TRL's, and completes `output_dir` for publishing.

        `push_to_hub` calls this between saving and uploading, so the upload carries a generation_config.json with
        `decoding="jacobi"` and the block size the model was trained at, and `custom_generate/` for users without
        hf_jacobi.
        """
        if not self.is_world_process_zero():
            return
        peft_config = getattr(self.model, "peft_config", None)
        if peft_config:
            base_model = next(iter(peft_config.values())).base_model_name_or_path
        else:
            base_model = getattr(self.model.config, "_name_or_path", None) or None
        output_dir = Path(self.args.output_dir)
        card = CardInfo(
            repo_id=self.hub_model_id or self.args.hub_model_id or model_name or output_dir.name,
            base_model=base_model,
            adapter=bool(peft_config),
            datasets=[dataset_name] if dataset_name else [],
            training_data=(
                f"{len(self.train_dataset)} Jacobi trajectories of the base model's own greedy outputs "
                f"(block size n={self._trained_block_size}), collected with `hf-jacobi collect`"
            ),
            recipe=self._recipe_markdown(),
        )
        settings = {"jacobi_block_size": self._trained_block_size} if self._trained_block_size else {}
        if is_checkpoint_folder(output_dir):
            prepare_publish_folder(output_dir, card, settings)
        else:  # a checkpoint save: the weights are in checkpoint-*/, only the card goes at the top
            output_dir.mkdir(parents=True, exist_ok=True)
            card.jacobi_settings = settings
            render_model_card(card).save(output_dir / "README.md")

    def _recipe_markdown(self) -> str:
        """The settings that define this run, as the card's recipe section."""
        args = self.args
        lines = [
            f"noise schedule `{args.noise_schedule}` (window {args.noise_window}), AR loss weight {args.ar_loss_weight}, "
            f"consistency normalized per {args.consistency_normalization}",
            f"learning rate {args.learning_rate} ({args.lr_scheduler_type}, warmup ratio {args.warmup_ratio}), "
            f"{args.num_train_epochs} epochs, batch {args.per_device_train_batch_size} x "
            f"{args.gradient_accumulation_steps} accumulation x {args.world_size} processes, max length {args.max_length}",
        ]
        peft_config = getattr(self.model, "peft_config", None)
        if peft_config:
            lora = next(iter(peft_config.values()))
            lines.append(
                f"LoRA r={getattr(lora, 'r', '?')}, alpha={getattr(lora, 'lora_alpha', '?')} on "
                f"{sorted(getattr(lora, 'target_modules', None) or [])}"
            )
        return "\n".join(f"  - {line}" for line in lines)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        ar_targets = inputs.pop("ar_targets")
        teacher_index = inputs.pop("teacher_index")
        block_ids = inputs.pop("block_ids")
        segment_ids = inputs.pop("segment_ids")
        if "attention_mask" not in inputs:
            layout = self.data_collator.layout
            inputs["attention_mask"] = noise_aware_block_mask(segment_ids, inputs["position_ids"], layout)
        outputs = model(**inputs, use_cache=False)
        logits = outputs.logits
        consistency = consistency_loss(logits, teacher_index, block_ids, self.args.consistency_normalization)
        autoregressive = ar_loss(logits, ar_targets)
        loss = consistency + self.args.ar_loss_weight * autoregressive

        gather = self.accelerator.gather_for_metrics
        self._metrics[mode]["consistency_loss"].append(gather(consistency.detach()).mean().item())
        self._metrics[mode]["ar_loss"].append(gather(autoregressive.detach()).mean().item())
        noisy = (teacher_index >= 0).sum()
        self._metrics[mode]["noisy_tokens"].append(gather(noisy).float().mean().item())
        if mode == "train":
            tokens = gather((segment_ids != 3).sum()).sum().item()
            self._total_train_tokens += tokens
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss


def _usable_trajectories(dataset: datasets.Dataset, collator: JacobiForcingCollator, name: str) -> datasets.Dataset:
    """Checks the columns, and drops (with a count) the trajectories that hold no block that fits in max_length:
    a completion shorter than one block, or a prompt too long. Nothing else is dropped."""
    missing = [c for c in TRAJECTORY_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"the {name} dataset lacks the trajectory columns {missing} (it has {dataset.column_names}); "
            "collect it with hf_jacobi.collect_trajectories and load it with hf_jacobi.load_trajectories."
        )

    def fits(example: dict[str, Any]) -> bool:
        blocks = collator.blocks_that_fit(
            len(example["prompt_ids"]), example["block_size"], len(example["fixed_points"])
        )
        return blocks > 0

    kept = dataset.filter(fits, desc=f"checking {name} trajectories")
    if len(kept) == 0:
        raise ValueError(
            f"none of the {len(dataset)} {name} trajectories holds a complete block that fits in max_length="
            f"{collator.max_length}: raise max_length or collect with more max_new_tokens."
        )
    if len(kept) < len(dataset):
        logger.warning(
            "%d of %d %s trajectories hold no complete block within max_length=%s and are skipped.",
            len(dataset) - len(kept),
            len(dataset),
            name,
            collator.max_length,
        )
    return kept
