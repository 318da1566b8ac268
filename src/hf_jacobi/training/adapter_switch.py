"""The KL anchor's base model from a LoRA run: the same model with its adapter switched off, every micro-batch.

PEFT's `PeftModel.disable_adapter()` walks every module of the model on the way in and out and resets
`requires_grad` on every adapter weight. Per micro-batch that walk cost more than the base forward it wraps (measured
on a GPU: lab/campaigns/gpu_sweep.py). The anchor's base forward runs under `torch.no_grad()`, so only the layers' switch
matters: the adapter layers are found once, and their flag is flipped and restored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from peft import PeftModel
from peft.tuners.tuners_utils import BaseTunerLayer
from peft.utils.other import AuxiliaryTrainingWrapper


class AdapterSwitch:
    """Switches a PEFT model's adapter layers off for the duration of a `with`, and back to their earlier state.

    Falls back to PEFT's own `disable_adapter()` where flipping the layers' flag would not give the base model:
    prompt-learning methods (they change the forward, not layers) and auxiliary wrappers (`modules_to_save`,
    trainable tokens), which swap modules rather than skip them.
    """

    def __init__(self, model: PeftModel) -> None:
        self.model = model
        self.layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
        self.flip = not model.active_peft_config.is_prompt_learning and not any(
            isinstance(module, AuxiliaryTrainingWrapper) for module in model.modules()
        )

    @contextlib.contextmanager
    def off(self) -> Iterator[torch.nn.Module]:
        """The model with every adapter layer switched off (use under `torch.no_grad()`: requires_grad is untouched)."""
        if not self.flip:
            with self.model.disable_adapter():
                yield self.model
            return
        before = [layer._disable_adapters for layer in self.layers]
        for layer in self.layers:
            layer._disable_adapters = True
        try:
            yield self.model
        finally:
            for layer, state in zip(self.layers, before, strict=True):
                layer._disable_adapters = state
