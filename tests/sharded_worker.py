"""One process of a sharded run that tests/test_sharded_training.py launches: `hf-jacobi <step>` exactly as a user runs
it under `accelerate launch`, plus what the test cannot see from outside the processes.

    accelerate launch ... tests/sharded_worker.py [--fsdp-on-cpu] train <hf-jacobi train flags>

After training, each rank writes `engine-rank<N>.json` to the run's output folder: the engine accelerate chose and how
many parameter elements this rank holds against the model's full count, for the trained model and for the frozen
base the KL anchor reads. A sharded rank holds about 1/world_size of each; a DDP rank holds all of it.

`--fsdp-on-cpu` lets accelerate run FSDP on CPU processes (see `enable_fsdp_on_cpu`); without it a CPU-only machine
runs an FSDP config as plain DDP, which the tests show too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

FSDP_ON_CPU = "--fsdp-on-cpu"


def enable_fsdp_on_cpu() -> None:
    """Makes accelerate honour `distributed_type: FSDP` on CPU processes (a gloo group), for tests only.

    accelerate 1.15 turns FSDP on in `AcceleratorState.__init__` (accelerate/state.py), in the branch
    `elif self.distributed_type in [DistributedType.MULTI_GPU, DistributedType.MULTI_MLU, ...]`: its list names the
    accelerator backends only, so CPU processes (`DistributedType.MULTI_CPU`) skip it and keep `fsdp_plugin=None`; the
    Trainer then wraps the model in DDP and nothing is sharded, silently. This wrapper takes the same branch for
    MULTI_CPU, after the original `__init__`, and does what it does: FSDP as the distributed type (also in
    PartialState's shared state, which the Trainer reads) and the plugin kept. Nothing else differs from a GPU run:
    torch's FSDP2 (`fully_shard`) itself runs on CPU tensors over gloo.
    """
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__

    def __init__(self, *args: Any, fsdp_plugin=None, **kwargs: Any) -> None:
        # The original decides once, while the shared state holds only PartialState's (`initialized` cannot say it
        # before the original has run: it compares the two states).
        fresh = not set(AcceleratorState._shared_state).difference(PartialState._shared_state)
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        wants_fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" or fsdp_plugin is not None
        if fresh and self.distributed_type == DistributedType.MULTI_CPU and wants_fsdp:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    AcceleratorState.__init__ = __init__


def shard_sizes(module: torch.nn.Module) -> dict[str, int]:
    """Parameter elements this rank holds (`local`) and the model's full count (`full`): ZeRO-3 keeps a rank's
    partition in `param.ds_tensor` (the module's own tensor is empty between forwards), FSDP2 makes each parameter a
    DTensor whose local shard is this rank's; any other parameter is whole on every rank."""
    from torch.distributed.tensor import DTensor

    local = full = 0
    for param in module.parameters():
        if hasattr(param, "ds_tensor"):
            local, full = local + param.ds_tensor.numel(), full + param.ds_numel
        elif isinstance(param, DTensor):
            local, full = local + param.to_local().numel(), full + param.numel()
        else:
            local, full = local + param.numel(), full + param.numel()
    return {"local": local, "full": full}


def report(trainer: Any) -> dict[str, Any]:
    """What one rank saw of the run: engine, FSDP version, shard sizes of the trained model and of the anchor's base
    (the frozen copy of a full fine-tune; None for LoRA, whose base is the trained model with its adapter off)."""
    state = trainer.accelerator.state
    plugin = getattr(state, "fsdp_plugin", None)
    base = trainer._frozen_base
    return {
        "distributed_type": str(trainer.accelerator.distributed_type),
        "fsdp_version": getattr(plugin, "fsdp_version", None),
        "num_processes": trainer.accelerator.num_processes,
        "model": shard_sizes(trainer.model),
        "trainable": shard_sizes(torch.nn.ParameterList([p for p in trainer.model.parameters() if p.requires_grad])),
        "base": None if base is None else shard_sizes(base),
        "base_type": None if base is None else type(base).__name__,
    }


def main(argv: list[str]) -> int:
    """Runs `hf-jacobi argv` with a trainer that writes its rank's report after training."""
    if argv[:1] == [FSDP_ON_CPU]:
        enable_fsdp_on_cpu()
        argv = argv[1:]
    import hf_jacobi.cli.train as train_cli
    from hf_jacobi.cli import main as cli_main

    class ReportingTrainer(train_cli.JacobiForcingTrainer):
        def train(self, *args: Any, **kwargs: Any):
            result = super().train(*args, **kwargs)
            rank = self.accelerator.process_index
            path = Path(self.args.output_dir) / f"engine-rank{rank}.json"
            path.write_text(json.dumps(report(self), indent=1))
            return result

    train_cli.JacobiForcingTrainer = ReportingTrainer
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
