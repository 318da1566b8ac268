"""Several Jacobi Forcing runs on one GPU at once, each judged by `hf-jacobi quality`, inside one device call.

Why one script: a lent GPU comes for minutes, bare, and goes back soon after a call ends, so training and the
judging must run in one command under one clock. A 135M model at batch 1 leaves a data-centre GPU mostly idle, so the
variants train side by side (one process each) instead of one after another; each is stopped at its deadline and
judged on its newest weights (final, or the last checkpoint) so a slow run still yields an answer.

    python lab/campaigns/gpu_sweep.py --output-dir runs/gpu-sweep            # on the GPU machine
    python lab/campaigns/gpu_sweep.py --output-dir /tmp/sweep --tiny         # every phase on a CPU, quickly

Why it runs as it does: PEFT's adapter switch for the KL anchor's base forward took most of a step, so
training/adapter_switch.py replaces it, and activation checkpointing is off (a 135M model needs no memory saved). Even
so, one call trains only part of the epoch's 556 steps and leaves the judges little time (step times and how far the
runs got: docs/results/quality-gpu-sweep/README.md). Size a call with --train-seconds (the runs are judged on their
newest checkpoint) or pass --max_steps in VARIANTS.

Writes, under --output-dir: NAME/ (the run: checkpoints, final adapter, train.log), quality-NAME/ (`hf-jacobi
quality` of NAME beside the base), sweep.json (per variant: flags, steps done, the weights judged, wall times, exit
codes). `hf-jacobi quality --merge` reads the quality folders as one table and front.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from campaign.runner import cli, wait_all  # beside this script: the campaign's process helpers

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "smollm2-135m" / "jacobi_forcing" / "train_base_scale.yaml"

# name -> flags over the recipe. The recipe itself is the anchored one (KL x3, lr 2e-4); two trade anchor for
# acceptance and one holds the base harder, so the front shows what the anchor costs on both sides.
VARIANTS: dict[str, list[str]] = {
    "base-scale-kl3": [],
    "base-scale-kl3-lr5e-4": ["--learning_rate", "5e-4"],
    "base-scale-kl1-lr5e-4": ["--base_kl_weight", "1.0", "--learning_rate", "5e-4"],
    "base-scale-kl10": ["--base_kl_weight", "10.0"],
}

# A CPU check of the whole script: two optimizer steps on a handful of trajectories, a few short answers.
TINY_TRAIN = ["--num_trajectory_prompts", "4", "2", "--num_anchor_texts", "2", "--max_steps", "2", "--save_steps", "1"]
TINY_QUALITY = ["--num-prompts", "1", "--num-speed-prompts", "2", "--max-new-tokens", "8", "--batch-size", "2"]


def _start(command: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    # A process group of its own, so a deadline stops the run and anything it started.
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def newest_weights(run: Path) -> tuple[Path | None, int | None]:
    """The run's final adapter if it finished, else its newest checkpoint, with the optimizer steps behind it."""
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda folder: int(folder.name.split("-")[1]))
    steps = None
    if checkpoints:
        state = checkpoints[-1] / "trainer_state.json"
        steps = json.loads(state.read_text())["global_step"] if state.exists() else None
    if (run / "adapter_model.safetensors").exists():
        state = run / "trainer_state.json"
        if state.exists():
            steps = json.loads(state.read_text())["global_step"]
        return run, steps
    return (checkpoints[-1], steps) if checkpoints else (None, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--train-seconds", type=float, default=300.0, help="deadline of the training phase")
    parser.add_argument("--quality-seconds", type=float, default=150.0, help="deadline of the judging phase")
    parser.add_argument("--tiny", action="store_true", help="every phase at toy sizes (a CPU check of the script)")
    args = parser.parse_args()
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    # Converting the embedded GGUF once, before several processes would race to write the same cache.
    subprocess.run([sys.executable, "-c", "from hf_jacobi import load_model; load_model()"], check=True)

    runs = {name: out / name for name in args.variants}
    tiny_train = [*TINY_TRAIN, "--use_cpu", "true"] if args.tiny else []
    training = {
        name: _start(
            cli("train", "--config", str(RECIPE), "--output_dir", str(run), *VARIANTS[name], *tiny_train),
            run / "train.log",
        )
        for name, run in runs.items()
    }
    trained = wait_all(training, time.monotonic() + args.train_seconds)

    judged, record = {}, {}
    for name, run in runs.items():
        weights, steps = newest_weights(run)
        record[name] = {"flags": VARIANTS[name], "train": trained[name], "steps": steps, "weights": str(weights)}
        if weights is not None:
            quality = ["--adapters", f"{name}={weights}", "--output-dir", str(out / f"quality-{name}")]
            quality += TINY_QUALITY if args.tiny else []
            judged[name] = _start(cli("quality", *quality), out / f"quality-{name}.log")
    for name, result in wait_all(judged, time.monotonic() + args.quality_seconds).items():
        record[name]["quality"] = result
    (out / "sweep.json").write_text(json.dumps({"recipe": str(RECIPE), "tiny": args.tiny, "runs": record}, indent=2))
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
