"""JacobiForcingTrainer: SFTTrainer on the model's own Jacobi trajectories, with the consistency and AR losses.

Everything SFTTrainer offers (LoRA through `peft_config`, gradient checkpointing, accelerate/DeepSpeed/FSDP, resume,
Hub push with a generated model card) is kept; the trainer only swaps the collator for one that packs noisy and clean
blocks, builds the noise-aware mask its model reads, and replaces the loss with the paper's two-term loss, both terms
computed in one forward and normalized over the whole accumulated batch; an optional third term (`base_kl_weight`)
holds the distribution to the model's own before training, read from a second forward without gradient over the
clean tokens only (`CleanView`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import datasets
import torch
from peft import PeftModel
from transformers import AutoTokenizer, TrainerCallback
from trl import SFTTrainer
from trl.trainer.utils import get_config_model_id

from ..card import CITATION, CardInfo, render_model_card, tuning_note
from ..checkpoint import base_generation_config, complete_checkpoint, write_training_record
from ..decoding.config import JacobiConfig
from .adapter_switch import AdapterSwitch
from .collator import ANCHOR_TEXT, CleanView, JacobiForcingCollator
from .config import JacobiForcingConfig
from .dataset import CollatorEpoch, training_collator, training_datasets
from .frozen_base import prepare_frozen_base
from .frozen_casts import FrozenWeightCasts, cached_cast_dtype
from .losses import NO_TEACHER, LossItems, ar_loss, base_kl_loss, consistency_loss
from .masks import NoiseAwareMask, Segment
from .probe import probe_acceptance
from .run_record import base_model_name, recipe_markdown, training_record
from .sampling import LENGTH_STRATEGIES, LengthGroupedEpochSampler
from .stopping import clock_callbacks


class JacobiForcingTrainer(SFTTrainer):
    """Trainer for Jacobi Forcing (arXiv 2512.14681): progressive consistency distillation on Jacobi trajectories.

    Args:
        model: a model id, a local path, a `PreTrainedModel` or a `PeftModel`.
        args: a `JacobiForcingConfig`.
        train_dataset / eval_dataset: trajectories, as `collect_trajectories` writes them (`load_trajectories`).
        processing_class: the tokenizer (its pad token, else its EOS token, pads batches); loaded from the model's
            name when not given.
        data_collator: a `JacobiForcingCollator`, used as given; by default one is built from `args`.
        peft_config: a peft config (e.g. `LoraConfig`) to train an adapter instead of the full model.
        anchor_dataset: human-written texts (`text_id`, `input_ids`; `load_anchor_texts` + `encode_anchor_texts`)
            mixed into the training rows, where the KL anchor holds the model to the base and nothing else trains
            (needs `base_kl_weight` > 0): the anchor at the model's own answers does not keep the NLL of other text.
        Other arguments are SFTTrainer's.
    """

    # The loss is divided by item counts taken over the whole accumulated batch (see `get_batch_samples`), so Trainer
    # must not divide it again by the number of accumulation steps.
    loss_is_scaled_for_ga = True

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
        anchor_dataset: datasets.Dataset | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = JacobiForcingConfig(output_dir="jacobi-forcing")
        elif not isinstance(args, JacobiForcingConfig):
            raise TypeError(f"args must be a JacobiForcingConfig, got {type(args).__name__}.")
        if train_dataset is None:
            raise ValueError("train_dataset is required: trajectories from hf_jacobi.collect_trajectories.")
        if processing_class is None:
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            processing_class = AutoTokenizer.from_pretrained(name, trust_remote_code=args.trust_remote_code)
        data_collator = training_collator(data_collator, args, processing_class)
        train_dataset, eval_dataset, trained_block_size = training_datasets(
            train_dataset,
            eval_dataset,
            anchor_dataset,
            data_collator,
            args.base_kl_weight,
            args.length_column_name if args.train_sampling_strategy in LENGTH_STRATEGIES else None,
            drop_looping=args.drop_looping_trajectories,
        )
        callbacks = [*(callbacks or []), *clock_callbacks(args)]
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=[*(callbacks or []), CollatorEpoch(data_collator)],
            **kwargs,
        )
        self.noise_aware_mask = NoiseAwareMask.for_model(self.model, args.noisy_past)
        # The KL anchor's base: a LoRA run's adapter switched off; a full fine-tune's frozen copy, sharded as trained.
        self._frozen_base = None
        self._adapter_switch: tuple[torch.nn.Module, AdapterSwitch] | None = None  # on first use, once wrapped
        if args.base_kl_weight > 0 and not isinstance(self.model, PeftModel):
            self._frozen_base = prepare_frozen_base(self.model, self.accelerator)
        self._trained_block_size = trained_block_size
        cast = cached_cast_dtype(args, sharded=self.is_deepspeed_enabled or self.is_fsdp_enabled)
        self._frozen_casts = FrozenWeightCasts.for_models([self.model, self._frozen_base], cast)

    def train(self, *args: Any, **kwargs: Any):
        """Trainer's training; then the model's forward is its own again. Under mixed precision accelerate wraps the
        forward in its autocast for training and leaves the wrapper on: decoding the trained model right after (with
        `generate`, the probe, a collection of its own trajectories) would run in the training's half precision, and
        on a cache in the model's own dtype fail."""
        try:
            return super().train(*args, **kwargs)
        finally:
            for module in {id(m): m for m in (self.model, self.accelerator.unwrap_model(self.model))}.values():
                if "_original_forward" in vars(module):
                    module.forward = vars(module).pop("_original_forward")

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Trainer's evaluation (the losses on the eval trajectories), then the acceptance probe on the first
        `eval_probe_trajectories` of them, logged as `{metric_key_prefix}_probe/...`: what the losses are meant to
        move, measured without decoding. Every process runs it (a sharded model's forward needs them all)."""
        metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(eval_dataset, str):  # Trainer names one set of a dict of eval sets
            dataset = self.eval_dataset[eval_dataset]
        if isinstance(dataset, dict) or dataset is None or not self.args.eval_probe_trajectories:
            return metrics  # a dict of eval sets comes back here once per set, with its own prefix
        rows = (row for row in dataset if not row.get(ANCHOR_TEXT, False))
        probe = probe_acceptance(self.model, rows, limit=self.args.eval_probe_trajectories)
        figures = probe.metrics(f"{metric_key_prefix}_probe")
        self.log(figures)
        return {**metrics, **figures}

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """Trainer's step (one micro-batch's forward and backward) with the frozen weights' casts swapped in."""
        with self._frozen_casts.swapped():
            return super().training_step(model, inputs, num_items_in_batch)

    def _get_train_sampler(self, train_dataset: datasets.Dataset | None = None):
        """`group_by_length` on the packed lengths, in an order drawn from (seed, epoch) (`LengthGroupedEpochSampler`:
        a run resumed in any epoch skips the batches it trained); any other strategy as Trainer has it."""
        if self.args.train_sampling_strategy != "group_by_length":
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return LengthGroupedEpochSampler(dataset[self.args.length_column_name], batch, self.args.sampling_seed)

    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device) -> tuple[list, LossItems]:
        """The micro-batches of one optimizer step, and the items both losses are divided by, counted over all of them
        (and over all processes with `average_tokens_across_devices`); `compute_loss` receives the counts as
        `num_items_in_batch`."""
        batches, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        items = LossItems.count(batches, self.args.consistency_normalization)
        counts = torch.stack(list(items)).to(device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            counts = self.accelerator.gather(counts).view(-1, len(items)).sum(0)
        return batches, LossItems(*counts)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch: LossItems | None = None):
        """consistency + ar_loss_weight * AR, each summed over this micro-batch and divided by its item count over the
        accumulated batch (`num_items_in_batch`; None, as in evaluation, counts this batch's items)."""
        mode = "train" if self.model.training else "eval"
        ar_targets = inputs.pop("ar_targets")
        teacher_index = inputs.pop("teacher_index")
        block_ids = inputs.pop("block_ids")
        segment_ids = inputs.pop("segment_ids")
        anchored = inputs.pop("anchored", None)
        inputs["attention_mask"] = self.noise_aware_mask(segment_ids, inputs["position_ids"], block_ids)
        outputs = model(**inputs, use_cache=False)
        items = num_items_in_batch
        diagnostics: dict[str, torch.Tensor] = {}
        consistency = consistency_loss(
            outputs.logits,
            teacher_index,
            block_ids,
            self.args.consistency_normalization,
            items.consistency if items is not None else None,
            diagnostics,
            self.args.consistency_targets,
            ar_targets,
        )
        autoregressive = ar_loss(outputs.logits, ar_targets, items.ar if items is not None else None)
        anchor = None
        if self.args.base_kl_weight > 0:
            anchor = self._base_kl(model, inputs, outputs.logits, segment_ids, ar_targets, anchored, items)
        if items is not None and self.args.average_tokens_across_devices:
            # The counts cover every process and DDP averages the gradients over processes: scale back to a sum.
            consistency = consistency * self.accelerator.num_processes
            autoregressive = autoregressive * self.accelerator.num_processes
            if anchor is not None:
                anchor = anchor * self.accelerator.num_processes
        loss = consistency + self.args.ar_loss_weight * autoregressive
        if anchor is not None:
            loss = loss + self.args.base_kl_weight * anchor

        # Each micro-batch holds a share of its step's loss: logged x the micro-batches, their mean is the step's.
        shares = self.current_gradient_accumulation_steps if items is not None else 1
        gather = self.accelerator.gather_for_metrics
        metrics = self._metrics[mode]
        metrics["consistency_loss"].append(gather(consistency.detach()).mean().item() * shares)
        metrics["ar_loss"].append(gather(autoregressive.detach()).mean().item() * shares)
        if anchor is not None:
            metrics["base_kl"].append(gather(anchor.detach()).mean().item() * shares)
        # the noisy tokens, and the loss's floor and argmax agreement per noisy token, in one gather on every rank (a
        # rank without noisy tokens sends zeros), so that the processes' collectives stay in step
        noisy = (teacher_index != NO_TEACHER).sum().float()
        zero = torch.zeros((), device=noisy.device)
        sums = torch.stack([diagnostics.get("teacher_entropy", zero), diagnostics.get("agreement", zero), noisy])
        gathered = gather(sums.reshape(1, 3))  # one row per process
        metrics["noisy_tokens"].append(gathered[:, 2].mean().item())
        entropy, agreement, count = gathered.sum(0).tolist()
        if count > 0:
            metrics["consistency_teacher_entropy"].append(entropy / count)
            metrics["consistency_agreement"].append(agreement / count)
        if mode == "train":
            self._total_train_tokens += gather((segment_ids != Segment.PADDING).sum()).sum().item()
            metrics["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss

    def _base_kl(
        self,
        model,
        inputs: dict[str, torch.Tensor],
        logits: torch.Tensor,
        segment_ids: torch.Tensor,
        ar_targets: torch.Tensor,
        anchored: torch.Tensor | None,
        items: LossItems | None,
    ) -> torch.Tensor:
        """The KL anchor, with the base model run on the clean view only and projected through the LM head only where
        some row is anchored (AR targets, anchor texts): the anchor reads nothing else, and a base forward over the
        whole packed batch (4D mask, full-vocabulary logits at every noisy token) costs several times more (the
        measured step times are in docs/training.md)."""
        view = CleanView.of(inputs["input_ids"], inputs["position_ids"], segment_ids, ar_targets, anchored)
        columns = view.targeted_columns()
        if columns.numel() == 0:
            return logits.sum() * 0.0
        with torch.no_grad(), self._base_model(model) as base:
            base_logits = base(
                input_ids=view.input_ids,
                position_ids=view.position_ids,
                attention_mask=view.attention_mask,
                logits_to_keep=columns,
                use_cache=False,
            ).logits
        packed = view.order[:, columns, None].expand(-1, -1, logits.size(-1))
        return base_kl_loss(
            logits.gather(1, packed),
            base_logits,
            view.anchored[:, columns],
            items.anchored if items is not None else None,
        )

    @contextlib.contextmanager
    def _base_model(self, model) -> Iterator[torch.nn.Module]:
        """The model as it was before this run, for the KL anchor, under the model's mixed precision: the frozen copy,
        or the (unwrapped) PEFT model with its adapter switched off for the duration."""
        if self._frozen_base is not None:  # not prepared, so not wrapped in the model's autocast: under it here
            with self.accelerator.autocast():
                yield self._frozen_base
            return
        if self._adapter_switch is None or self._adapter_switch[0] is not model:  # unwrapping costs: once
            self._adapter_switch = (model, AdapterSwitch(self.accelerator.unwrap_model(model)))
        with self._adapter_switch[1].off() as base:
            yield base

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """Saves the weights as Trainer does, then completes the folder (each `checkpoint-N/` and the final save):
        generation_config.json with `decoding="jacobi"` at the trained block size, `custom_generate/` for users
        without hf_jacobi, and the training record a card's claim of training rests on."""
        super()._save(output_dir, state_dict)
        if not self.args.should_save:
            return
        folder = Path(output_dir if output_dir is not None else self.args.output_dir)
        complete_checkpoint(folder, self._jacobi_settings(folder))
        record = training_record(
            self.args,
            base_model=base_model_name(self.model),
            adapter=bool(getattr(self.model, "peft_config", None)),
            global_step=self.state.global_step,
            trajectories=len(self.train_dataset),
            trained_block_size=self._trained_block_size,
        )
        write_training_record(folder, record)

    def _jacobi_settings(self, folder: Path) -> JacobiConfig:
        """A saved folder's Jacobi defaults: those it carries (e.g. tuned earlier) at the trained block size."""
        return JacobiConfig.from_generation_config(base_generation_config(folder), block_size=self._trained_block_size)

    def create_model_card(
        self,
        model_name: str | None = None,
        dataset_name: str | None = None,
        tags: str | list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Writes hf_jacobi's model card (README.md in `output_dir`) instead of TRL's, and nothing else: the folder's
        generation config, `custom_generate/` and training record are written where the weights are saved (`_save`)."""
        if not self.is_world_process_zero():
            return
        output_dir = Path(self.args.output_dir)
        card = CardInfo(
            repo_id=self.hub_model_id or self.args.hub_model_id or model_name or output_dir.name,
            base_model=base_model_name(self.model),
            adapter=bool(getattr(self.model, "peft_config", None)),
            datasets=[dataset_name] if dataset_name else [],
            training_data=(
                f"{len(self.train_dataset)} Jacobi trajectories of the base model's own greedy outputs "
                f"(block size n={self._trained_block_size}), collected with `hf-jacobi collect`"
            ),
            recipe=recipe_markdown(self.args, self.model),
            jacobi=self._jacobi_settings(output_dir),
            tuning_note=tuning_note(output_dir),
        )
        output_dir.mkdir(parents=True, exist_ok=True)
        render_model_card(card).save(output_dir / "README.md")
