"""One GPU campaign for the embedded SmolLM2-135M-Instruct: prompts, trajectories, three trainings, their
judging and the winner's weights, inside one device call, under one time budget.

Why one script: a lent GPU comes bare, for one call of at most ten minutes, and returns only the files left in $OUT
(8 files, 64 MiB). So every stage runs here under a deadline cut from `--budget-seconds` (campaign/budget.py), writes
what it has into the output folder as it goes, and a later call resumes from what came back (`--resume-from`: the
prompt set first, then the greedy answers the trajectories are rebuilt from).

Stages (campaign/stages.py): 1. prompts (Magpie instructions sampled at large batch + the `packages` train prompts,
disjoint from every held-out set, and a judging set of plain requests); 2. trajectories (both collection methods
measured on a sample and checked against greedy in float32, then every prompt); 3. training (LoRA r16 as shipped,
LoRA r64, full-parameter, side by side, each stopped at the deadline); 4. judging (`hf-jacobi quality` on the judging
set + `requests` + `code-tasks`, tokens per forward, Wilson intervals); 5. bundle (the winner in bfloat16, or the SVD of
a full run's delta, with its log).

    python lab/campaigns/gpu_campaign.py --output-dir $OUT                     # on the GPU machine
    python lab/campaigns/gpu_campaign.py --output-dir runs/gpu-campaign --tiny # every stage on a CPU
    python lab/campaigns/gpu_campaign.py --output-dir $OUT --resume-from DIR   # after a window cut short
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign.budget import STAGES, Budget, Manifest, StageTimer, parse_shares

# name -> (GPU default, --tiny default): sizes of every stage
DEFAULTS: dict[str, tuple] = {
    "budget_seconds": (540.0, 300.0),
    "num_prompts": (20000, 40),
    "judge_prompts": (400, 8),
    "packages": (None, 16),
    "magpie_batch_size": (2048, 32),
    "magpie_max_new_tokens": (96, 24),
    "magpie_temperature": (1.0, 3.0),
    "block_size": (16, 8),
    "max_new_tokens": (128, 32),
    "trajectory_batch_size": (1024, 16),
    "measure_prompts": (256, 8),
    "check_prompts": (64, 8),
    "quality_batch_size": (64, 4),
    "svd_budget_mib": (40.0, 0.02),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The campaign's arguments; the sizes left unset take their GPU default, or with --tiny their rehearsal one."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, required=True, help="the returned files (on the GPU: $OUT)")
    parser.add_argument("--work-dir", type=Path, default=None, help="everything else (default: a temp folder)")
    parser.add_argument("--resume-from", type=Path, default=None, help="a folder an earlier call returned")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="stages to run")
    parser.add_argument("--shares", nargs="*", default=[], metavar="STAGE=SHARE", help="budget shares per stage")
    parser.add_argument("--variants", nargs="+", default=None, help="training variants (default: all)")
    parser.add_argument("--trajectory-method", choices=("parallel", "sequential"), default="parallel")
    parser.add_argument("--dtype", default=None, help="collection dtype (default: bfloat16 on a GPU, else float32)")
    parser.add_argument("--inline", action="store_true", help="jobs one after another in this process")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model and toy sizes: a CPU rehearsal")
    parser.add_argument("--seed", type=int, default=0)
    for name, (gpu, _) in DEFAULTS.items():
        kind = float if isinstance(gpu, float) else int
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=f"default {gpu}")
    args = parser.parse_args(argv)
    for name, (gpu, tiny) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else gpu)
    return args


def _environment() -> dict[str, str]:
    """What the numbers were measured on."""
    import torch
    import transformers

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return {
        "device": device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _stage_settings(args: argparse.Namespace, model: str):
    """The prompt and trajectory settings these arguments ask for."""
    import torch
    from campaign.prompts import PromptSettings
    from campaign.trajectories import TrajectorySettings

    prompts = PromptSettings(
        num_prompts=args.num_prompts,
        judge_prompts=args.judge_prompts,
        batch_size=args.magpie_batch_size,
        max_new_tokens=args.magpie_max_new_tokens,
        temperature=args.magpie_temperature,
        seed=args.seed,
        packages=args.packages,
    )
    trajectories = TrajectorySettings(
        block_size=args.block_size,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.trajectory_batch_size,
        method=args.trajectory_method,
        draft_seed=args.seed,
        dtype=args.dtype or ("bfloat16" if torch.cuda.is_available() else "float32"),
        model_id="tiny" if args.tiny else model,
        measure_prompts=args.measure_prompts,
        check_prompts=args.check_prompts,
    )
    return prompts, trajectories


def build_campaign(args: argparse.Namespace):
    """The `Campaign` these arguments describe, its output and work folders made and its manifest started."""
    from campaign import judging, training
    from campaign.stages import Campaign
    from campaign.tiny import build_tiny_checkpoint

    unknown = sorted(set(args.variants or ()) - set(training.VARIANTS))
    if unknown:
        raise SystemExit(f"--variants {unknown}: unknown; known: {sorted(training.VARIANTS)}")
    work = args.work_dir or Path(tempfile.gettempdir()) / "gpu-campaign-work"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    model = str(build_tiny_checkpoint(work / "tiny-model")) if args.tiny else "embedded"
    prompts, trajectories = _stage_settings(args, model)
    previous = Manifest.read(args.resume_from / "campaign.json") if args.resume_from else {}
    started = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "arguments": vars(args),
        "environment": _environment(),
        "resumed_from": {"folder": args.resume_from, "outcome": previous.get("outcome")} if args.resume_from else None,
    }
    return Campaign(
        out=args.output_dir,
        work=work,
        model=model,
        budget=Budget(args.budget_seconds, parse_shares(args.shares)),
        manifest=Manifest(args.output_dir / "campaign.json", started),
        prompt_settings=prompts,
        trajectory_settings=trajectories,
        judge_settings=judging.JudgeSettings(batch_size=args.quality_batch_size, tiny=args.tiny),
        variants=args.variants or list(training.VARIANTS),
        svd_budget_bytes=int(args.svd_budget_mib * 2**20),
        inline=args.inline,
        tiny=args.tiny,
        resume_from=args.resume_from,
    )


def run_stages(campaign, stages: list[str]) -> dict[str, str]:
    """Runs `stages` in order, each under its deadline; a stage that fails is recorded and the next ones still run
    on whatever exists. Returns each stage's outcome."""
    import traceback

    outcome = {}
    for index, stage in enumerate(stages):
        timer = StageTimer(campaign.budget, stage, campaign.budget.deadline(stage, stages[index:]))
        try:
            getattr(campaign, f"stage_{stage}")(timer)
            outcome[stage] = "done"
        except Exception as error:  # the record says what failed; later stages may still have inputs
            traceback.print_exc()
            outcome[stage] = f"failed: {type(error).__name__}: {error}"
        campaign.manifest.update("outcome", stage, value=outcome[stage])
        record = campaign.manifest.data.get("stages", {}).get(stage, {})
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float, str, bool)) or v is None}
        print(
            f"[campaign] {stage}: {outcome[stage]} at {time.monotonic() - campaign.budget.started:.0f} s "
            f"{json.dumps(scalars, default=str)}",
            flush=True,
        )
    return outcome


def train_worker(argv: list[str]) -> int:
    """`gpu_campaign.py train-worker --deadline EPOCH -- TRAIN ARGS`: one training variant's process."""
    from campaign.training import run_variant

    split = argv.index("--")
    deadline = float(argv[argv.index("--deadline") + 1])
    return run_variant(argv[split + 1 :], deadline)


def main(argv: list[str] | None = None) -> int:
    """Runs the campaign (or, as `train-worker`, one training variant); 0 when every stage it ran succeeded."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train-worker"]:
        return train_worker(argv[1:])
    args = parse_args(argv)
    campaign = build_campaign(args)
    if campaign.model == "embedded":
        from hf_jacobi import load_default_model

        load_default_model()  # converts the GGUF once here, before several processes would race to write the cache
    outcome = run_stages(campaign, [stage for stage in STAGES if stage in args.stages])
    print(json.dumps(outcome, indent=1))
    return 0 if all(value == "done" for value in outcome.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
