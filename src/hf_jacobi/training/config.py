"""Settings of a Jacobi Forcing run: an `SFTConfig` with the method's own knobs and the paper's optimizer defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import SFTConfig

from .losses import CONSISTENCY_NORMALIZATIONS, CONSISTENCY_TARGETS
from .masks import NOISY_PASTS
from .schedule import NOISE_SCHEDULES


@dataclass
class JacobiForcingConfig(SFTConfig):
    """
    Configuration class for [`JacobiForcingTrainer`].

    Only the settings specific to Jacobi Forcing are listed; see [`trl.SFTConfig`] and
    [`transformers.TrainingArguments`] for the rest. Defaults that differ from `SFTConfig` follow the paper
    (AdamW betas (0.9, 0.95), no weight decay, 3% warmup, cosine decay, learning rate 1e-5) or the data: trajectory
    datasets are already tokenized, so dataset preparation is skipped and no column is removed. `bf16` left unset is
    off on a machine without a bfloat16 accelerator (unless `use_cpu` asks for the CPU's bfloat16 autocast).

    Args:
        noise_schedule (`str`, *optional*, defaults to `"progressive"`):
            How the noisy state of each block is chosen: "progressive" (noise rising linearly over a window of blocks,
            the paper's best), "random" or "reverse".
        noise_window (`int`, *optional*, defaults to `16`):
            Window W of the schedule, in blocks (the paper's n16w16 and n32w16 recipes use 16).
        ar_loss_weight (`float`, *optional*, defaults to `1.0`):
            Weight lambda of the autoregressive loss: total = consistency + lambda * AR. The reference uses 1 in one
            trainer and 10 in another.
        base_kl_weight (`float`, *optional*, defaults to `0.0`):
            Weight of KL(base || model) at the tokens the AR loss covers, where "base" is the model before this run
            (the adapter switched off for LoRA, a frozen copy for full fine-tuning). The AR loss keeps the greedy
            answer; this keeps the rest of the distribution, i.e. the NLL of text the model did not write. Costs one
            more forward (without gradient) per micro-batch, and for full fine-tuning a second copy of the weights.
        consistency_normalization (`str`, *optional*, defaults to `"blocks"`):
            "blocks": average over each block's noisy tokens, then over blocks; "tokens": average over all noisy
            tokens; "reference": the reference code's, each row's average over its noisy tokens divided by its number
            of blocks, then the average over rows (a row's consistency weighs 1/blocks of its AR loss there).
        consistency_targets (`str`, *optional*, defaults to `"soft"`):
            "soft": the paper's soft cross entropy to the clean prediction's whole distribution; "fixed_point": cross
            entropy to the fixed point's token alone, the one token acceptance depends on.
        noisy_past (`str`, *optional*, defaults to `"noisy"`):
            What a noisy block's tokens see before their block: "noisy", the earlier blocks' noisy states (the paper's
            noise-aware mask: the past of multi-block decoding's pseudo-active blocks); "clean", the earlier blocks'
            fixed points (CLLM's: the past of plain Jacobi's active block).
        prompt_ar_loss (`bool`, *optional*, defaults to `True`):
            Whether prompt tokens also get next-token loss, as in the reference.
        stop_after_steps (`int` or `None`, *optional*, defaults to `None`):
            End the run after this optimizer step (saving a checkpoint there) while the learning-rate schedule stays
            the one planned for the whole run (`num_train_epochs` / `max_steps`): a checkpoint taken part-way through
            a long schedule is reproduced without training the rest. `hf-jacobi train` resumed at or past it trains
            nothing; `train()` refuses such a resume.
        stop_after_seconds (`float` or `None`, *optional*, defaults to `None`):
            End the run after the optimizer step during which this many seconds of `train()` have passed, saving a
            checkpoint there; the schedule stays the whole run's, so a job with a time limit stops in time and the
            next one resumes from that checkpoint (`resume_from_checkpoint`) as if never stopped. 0 stops after the
            first step.
        save_every_seconds (`float` or `None`, *optional*, defaults to `None`):
            Also save a checkpoint after the first step that ends this many seconds after the last save, so a run
            that is killed loses at most that much work whatever its step time (`save_steps` bounds it in steps).
        drop_looping_trajectories (`bool`, *optional*, defaults to `False`):
            Leave out of training the trajectories whose answer ends in a loop (`hf_jacobi.measurement.collapsed`,
            the test `hf-jacobi quality` counts loops by). A loop is the cheapest text to accept many tokens of at
            once, so trained on, the consistency and AR losses teach the model to loop; a base model's own answers to
            open requests hold some. Evaluation datasets are kept whole.
        cache_frozen_weights (`bool`, *optional*, defaults to `True`):
            Under bf16 or fp16 mixed precision, cast the frozen float32 weights of linear layers (a LoRA run's base)
            once and swap the casts in for each micro-batch, instead of letting autocast recast them at every forward
            (`training.frozen_casts`). Losses and gradients are bitwise the same; the casts take half the frozen
            weights' memory again. Sharded runs (DeepSpeed, FSDP) never cache.
        eval_probe_trajectories (`int`, *optional*, defaults to `32`):
            At each evaluation, run the acceptance probe (`hf_jacobi.probe_acceptance`) on the first this many
            trajectories of each eval dataset and log its figures beside the eval loss (`eval_probe/...`): how often
            the model's choices after a block's first wrong token are already the fixed point's, and the tokens per
            iteration of plain Jacobi decoding they imply. The loss says little about that; 0 turns it off.
    """

    noise_schedule: str = field(
        default="progressive",
        metadata={"help": f"Noise schedule: one of {list(NOISE_SCHEDULES)}.", "choices": list(NOISE_SCHEDULES)},
    )
    noise_window: int = field(default=16, metadata={"help": "Window of the noise schedule, in blocks."})
    ar_loss_weight: float = field(
        default=1.0, metadata={"help": "Weight of the AR loss: total = consistency + ar_loss_weight * AR."}
    )
    base_kl_weight: float = field(
        default=0.0,
        metadata={"help": "Weight of KL(base || model) at the AR loss's tokens: holds the untrained distribution."},
    )
    consistency_normalization: str = field(
        default="blocks",
        metadata={
            "help": "'blocks': mean over each block's noisy tokens, then over blocks; 'tokens': mean over all.",
            "choices": list(CONSISTENCY_NORMALIZATIONS),
        },
    )
    consistency_targets: str = field(
        default="soft",
        metadata={
            "help": "'soft': the clean prediction's distribution; 'fixed_point': the fixed point's token alone.",
            "choices": list(CONSISTENCY_TARGETS),
        },
    )
    noisy_past: str = field(
        default="noisy",
        metadata={
            "help": "What a noisy block sees before it: 'noisy' (the paper's noise-aware mask) or 'clean' blocks.",
            "choices": list(NOISY_PASTS),
        },
    )
    prompt_ar_loss: bool = field(default=True, metadata={"help": "Whether prompt tokens get next-token loss."})
    stop_after_steps: int | None = field(
        default=None,
        metadata={"help": "End the run after this optimizer step; the schedule stays the whole run's."},
    )
    stop_after_seconds: float | None = field(
        default=None,
        metadata={"help": "End the run after the step during which this many seconds passed; saves a checkpoint."},
    )
    save_every_seconds: float | None = field(
        default=None,
        metadata={"help": "Also save a checkpoint whenever this many seconds passed since the last save."},
    )
    drop_looping_trajectories: bool = field(
        default=False,
        metadata={
            "help": "Leave out the trajectories whose answer ends in a loop (the test quality counts loops by)."
        },
    )

    cache_frozen_weights: bool = field(
        default=True,
        metadata={"help": "Cast frozen float32 linear weights to the autocast dtype once, not at every forward."},
    )

    eval_probe_trajectories: int = field(
        default=32,
        metadata={"help": "Trajectories of each eval dataset the acceptance probe reads at each evaluation (0: off)."},
    )

    # Defaults that differ from SFTConfig.
    learning_rate: float = field(default=1e-5, metadata={"help": "Initial AdamW learning rate."})
    adam_beta2: float = field(default=0.95, metadata={"help": "AdamW beta2."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning rate schedule."})
    warmup_ratio: float = field(default=0.03, metadata={"help": "Share of steps spent warming up."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Must stay False: the collator reads the trajectory columns."}
    )
    dataset_kwargs: dict[str, Any] | str | None = field(
        default_factory=lambda: {"skip_prepare_dataset": True},
        metadata={"help": "Trajectory datasets are tokenized already: preparation is skipped."},
    )

    def __post_init__(self):
        self._settle_bf16()
        self._settle_checkpointing()
        super().__post_init__()
        # The one place the schedule is checked: the collator and the schedule functions trust these values.
        if self.noise_schedule not in NOISE_SCHEDULES:
            raise ValueError(f"noise_schedule must be one of {list(NOISE_SCHEDULES)}, got {self.noise_schedule!r}.")
        window = self.noise_window
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"noise_window must be an integer >= 1, got {window!r}.")
        if self.consistency_normalization not in CONSISTENCY_NORMALIZATIONS:
            raise ValueError(
                f"consistency_normalization must be one of {list(CONSISTENCY_NORMALIZATIONS)}, "
                f"got {self.consistency_normalization!r}."
            )
        if self.consistency_targets not in CONSISTENCY_TARGETS:
            raise ValueError(
                f"consistency_targets must be one of {list(CONSISTENCY_TARGETS)}, got {self.consistency_targets!r}."
            )
        if self.noisy_past not in NOISY_PASTS:
            raise ValueError(f"noisy_past must be one of {list(NOISY_PASTS)}, got {self.noisy_past!r}.")
        if not self.ar_loss_weight >= 0:
            raise ValueError(f"ar_loss_weight must be >= 0, got {self.ar_loss_weight!r}.")
        if not self.base_kl_weight >= 0:
            raise ValueError(f"base_kl_weight must be >= 0 (0 turns the anchor off), got {self.base_kl_weight!r}.")
        stop = self.stop_after_steps
        if stop is not None and (isinstance(stop, bool) or not isinstance(stop, int) or stop < 1):
            raise ValueError(f"stop_after_steps must be an integer >= 1 or None (train the whole run), got {stop!r}.")
        for name, least in (("stop_after_seconds", 0.0), ("save_every_seconds", 1.0)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < least):
                raise ValueError(f"{name} must be a number of seconds >= {least:g} or None (off), got {value!r}.")
        probed = self.eval_probe_trajectories
        if isinstance(probed, bool) or not isinstance(probed, int) or probed < 0:
            raise ValueError(f"eval_probe_trajectories must be an integer >= 0 (0 turns it off), got {probed!r}.")
        if self.remove_unused_columns:
            raise ValueError(
                "remove_unused_columns=True would drop the trajectory columns the Jacobi Forcing collator reads; "
                "set it to False."
            )
        if not (self.dataset_kwargs or {}).get("skip_prepare_dataset", False):
            raise ValueError(
                "Jacobi Forcing trains on tokenized trajectories: dataset_kwargs must keep skip_prepare_dataset=True, "
                f"got {self.dataset_kwargs!r}."
            )

    def _settle_checkpointing(self) -> None:
        """TRL names the setting `gradient_checkpointing` (default on), which transformers now reads as a deprecated
        alias of `activation_checkpointing` and warns about on every config, whatever the user set. The value moves
        to the new name here, as transformers would move it, so the setting holds and no warning is printed for
        TRL's own default."""
        if getattr(self, "activation_checkpointing", True) is None and self.gradient_checkpointing is not None:
            self.activation_checkpointing, self.gradient_checkpointing = self.gradient_checkpointing, None
            kwargs = getattr(self, "gradient_checkpointing_kwargs", None)
            if getattr(self, "activation_checkpointing_kwargs", True) is None and kwargs is not None:
                self.activation_checkpointing_kwargs, self.gradient_checkpointing_kwargs = kwargs, None

    def _settle_bf16(self) -> None:
        """TRL's default, bf16 unless fp16, makes TrainingArguments refuse a machine without a bfloat16 accelerator
        unless `use_cpu` is set, so a first `hf-jacobi train` on a laptop would fail before reading its data. Left
        unset there, bf16 is off (float32, transformers' own default); asked for, the refusal says what to set."""
        from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

        if self.use_cpu or self.fp16 or is_torch_bf16_gpu_available() or is_torch_xla_available():
            return
        if self.bf16 is None:
            self.bf16 = False
        elif self.bf16:
            raise ValueError(
                "bf16=True needs an accelerator with bfloat16, and none is available here: set use_cpu=True "
                "(--use_cpu true) for bfloat16 autocast on the CPU, or bf16=False (--bf16 false) to train in float32."
            )

    @property
    def sampling_seed(self) -> int:
        """What seeds the run's data: the noise drawn for each row and the order of length-grouped batches.
        `data_seed` when set, else `seed`, the rule transformers' Trainer applies to its own samplers, so that a
        user who fixes `data_seed` to vary only the model's initialisation keeps the same data."""
        return self.data_seed if self.data_seed is not None else self.seed
