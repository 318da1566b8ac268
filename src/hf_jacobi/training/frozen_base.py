"""The KL anchor's base for a full fine-tune: a frozen copy of the model as training starts, sharded as the trained
model is (TRL prepares its reference models the same way), so that no rank of a ZeRO-3 or FSDP run holds the whole
base. A LoRA run needs no copy: its base is the same model with the adapter switched off (`adapter_switch.py`).
"""

from __future__ import annotations

import copy

import torch
from accelerate import Accelerator


def _zero3_partitioned(model: torch.nn.Module) -> bool:
    """Whether DeepSpeed ZeRO-3 partitioned `model`'s parameters when it was built (`zero3_init_flag`: transformers
    loads it under `deepspeed.zero.Init`), leaving each rank its partition and an empty tensor in the module."""
    return any(hasattr(param, "ds_id") for param in model.parameters())


def _zero3_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a model that ZeRO-3 partitioned at load, partitioned the same way, without gathering any parameter.

    `copy.deepcopy` would copy the empty tensors and none of DeepSpeed's partition state (the anchor's forward then
    fails with "'weight' must be 2-D"). transformers builds the same architecture partitioned while ZeRO-3 is on
    (`_from_config` under `zero.Init`); each rank then copies its own partitions (`ds_tensor`) into it. Buffers are not
    partitioned and are copied whole.
    """
    base = type(model)._from_config(model.config, dtype=model.dtype)
    targets = dict(base.named_parameters())
    for name, param in model.named_parameters():
        target = targets[name]
        if not hasattr(target, "ds_tensor") or target.ds_tensor.shape != param.ds_tensor.shape:
            raise RuntimeError(
                f"the KL anchor's frozen base could not be partitioned like the model ({name}): transformers did not "
                "build it under DeepSpeed ZeRO-3's zero.Init"
            )
        target.ds_tensor.data.copy_(param.ds_tensor.data)
    for name, buffer in model.named_buffers():
        base.get_buffer(name).copy_(buffer)
    return base


def prepare_frozen_base(model: torch.nn.Module, accelerator: Accelerator) -> torch.nn.Module:
    """A frozen copy of `model` as it starts, for the KL anchor of a full fine-tune, prepared the way TRL prepares a
    reference model, so that under ZeRO-3 or FSDP no rank keeps the whole base for the run.

    DeepSpeed: TRL's `prepare_deepspeed` (an inference engine; ZeRO-3 partitions the copy as it partitions the
    trained model, other stages keep it whole on each rank, as TRL does). FSDP2: accelerate's `fsdp2_prepare_model`,
    the preparation the trained model itself gets (one unit per decoder layer, rank 0's weights broadcast under
    `fsdp_cpu_ram_efficient_loading`), rather than TRL's `prepare_fsdp`, which calls `fully_shard` on the root only,
    so that each anchor forward would gather the whole base on every rank at once; every unit of the copy then
    reshards after its forward. FSDP1: TRL's `prepare_fsdp`. Otherwise (one process, DDP) the copy stays as it is:
    it takes no gradient to reduce.
    """
    base = _zero3_copy(model) if _zero3_partitioned(model) else copy.deepcopy(model)
    # SFTTrainer binds a patched forward (its fused LM head) to the model instance, closing over the original
    # model's bound forward: the copy would keep that closure and run the weights being trained.
    vars(base).pop("forward", None)
    base.eval().requires_grad_(False)
    # the tests Trainer itself makes (`is_deepspeed_enabled`, `is_fsdp_enabled`): which plugin accelerate holds
    deepspeed = getattr(accelerator.state, "deepspeed_plugin", None) is not None
    fsdp = getattr(accelerator.state, "fsdp_plugin", None) is not None
    if deepspeed:
        from trl.models import prepare_deepspeed

        return prepare_deepspeed(base, accelerator)
    if fsdp and accelerator.is_fsdp2:
        from accelerate.utils.fsdp_utils import fsdp2_prepare_model

        base = fsdp2_prepare_model(accelerator, base).eval()
        # accelerate keeps the root's and the LM head's parameters gathered after a forward, for the backward that
        # follows; the base has no backward, so they would stay whole on every rank for the rest of the run.
        base.set_reshard_after_forward(True)
        return base
    if fsdp:
        from trl.models import prepare_fsdp

        return prepare_fsdp(base, accelerator)
    return base
