"""What a Jacobi Forcing run records about itself: the training record saved beside its weights (the evidence a model
card's claim of training rests on) and the recipe section of its card."""

from __future__ import annotations

from typing import Any

from .._version import __version__
from .config import JacobiForcingConfig


def training_record(
    args: JacobiForcingConfig,
    *,
    base_model: str | None,
    adapter: bool,
    global_step: int,
    trajectories: int,
    trained_block_size: int | None,
) -> dict[str, Any]:
    """What the saved weights come out of: the method, base model, steps, data and recipe of this run (the trainer
    passes what it knows, so that this module needs nothing of the trainer's)."""
    return {
        "method": "Jacobi Forcing",
        "hf_jacobi_version": __version__,
        "base_model": base_model,
        "adapter": adapter,
        "global_step": global_step,
        "trajectories": trajectories,
        "trained_block_size": trained_block_size,
        "noise_schedule": args.noise_schedule,
        "noise_window": args.noise_window,
        "ar_loss_weight": args.ar_loss_weight,
        "base_kl_weight": args.base_kl_weight,
        "learning_rate": args.learning_rate,
        "num_train_epochs": args.num_train_epochs,
        "stop_after_steps": args.stop_after_steps,
    }


def recipe_markdown(args: JacobiForcingConfig, model: Any) -> str:
    """The settings that define this run, as the card's recipe section."""
    lines = [
        f"noise schedule `{args.noise_schedule}` (window {args.noise_window}), AR loss weight {args.ar_loss_weight}, "
        f"consistency ({args.consistency_targets} targets) normalized per {args.consistency_normalization}"
        + (f", KL to the base model weight {args.base_kl_weight}" if args.base_kl_weight > 0 else ""),
        f"learning rate {args.learning_rate} ({args.lr_scheduler_type}, warmup ratio {args.warmup_ratio}), "
        f"{args.num_train_epochs} epochs, batch {args.per_device_train_batch_size} x "
        f"{args.gradient_accumulation_steps} accumulation x {args.world_size} processes, max length {args.max_length}"
        + (f", stopped after step {args.stop_after_steps}" if args.stop_after_steps is not None else ""),
    ]
    peft_config = getattr(model, "peft_config", None)
    if peft_config:
        lora = next(iter(peft_config.values()))
        lines.append(
            f"LoRA r={getattr(lora, 'r', '?')}, alpha={getattr(lora, 'lora_alpha', '?')} on "
            f"{sorted(getattr(lora, 'target_modules', None) or [])}"
        )
    return "\n".join(f"  - {line}" for line in lines)


def base_model_name(model: Any) -> str | None:
    """The id or path the trained model (or adapter) was built from, as its config records it."""
    peft_config = getattr(model, "peft_config", None)
    if peft_config:
        return next(iter(peft_config.values())).base_model_name_or_path
    return getattr(model.config, "_name_or_path", None) or None
