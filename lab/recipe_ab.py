"""The recipe's A/Bs (lab/recipe_ab.yaml): which setting of Jacobi Forcing's training moves acceptance, each judged by
the acceptance probe in minutes instead of by a day of decoding.

Every arm is one `hf-jacobi train` over the shipped recipe with one setting changed (a flag, the prompts it trains on,
or its own collection of the base model's trajectories, e.g. longer answers, collected first), for the same number of
optimizer steps, evaluated every `eval_steps` on the same held-out trajectories; its figures are the trainer's own log
(`eval_probe/...`, the consistency diagnostics). An arm resumes from its newest checkpoint, so a
call cut short (`--minutes`) is started again with the same command. The committed table is a record too: an arm it
holds under the same settings is not trained again, and stays in the table when its run is gone (the runs are ignored
files, lost with the machine):

    python lab/recipe_ab.py [--output-dir runs/recipe-ab] [--results docs/results/recipe-ab] run [--arms baseline lr-x4]
        [--minutes 170]
    python lab/recipe_ab.py [--output-dir runs/recipe-ab] [--results docs/results/recipe-ab] table

The winners go on to `hf-jacobi quality` and held-out tokens per forward (recipes/smollm2-135m/README.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

from hf_jacobi import collected_answers
from hf_jacobi.cli import main as hf_jacobi

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = Path(__file__).with_suffix(".yaml")
SAVE_EVERY_S = 20 * 60


def load_settings(path: Path = SETTINGS) -> dict[str, Any]:
    settings = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in ("config", "trajectories", "prompt_order", "train_prompts", "eval_prompts", "steps", "arms"):
        if key not in settings:
            raise SystemExit(f"{path} has no {key!r}")
    return settings


def eval_prompt_file(settings: dict[str, Any], folder: Path) -> Path:
    """The collection order's `eval_prompts` slice as a prompt file: prompts no arm trains on (they come after the
    `train_prompts` every arm trains on), whose base trajectories the collection holds."""
    import pyarrow.parquet as pq

    first, end = settings["eval_prompts"]
    if first < settings["train_prompts"]:
        raise SystemExit(f"eval_prompts {settings['eval_prompts']} overlap the first {settings['train_prompts']}")
    path = folder / f"eval-prompts-{first}-{end}.parquet"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(ROOT / settings["prompt_order"]).slice(first, end - first), path)
    return path


def newest_state(run: Path) -> dict[str, Any] | None:
    """The run's trainer state: the finished run's own, else its newest checkpoint's (None before any)."""
    if (run / "trainer_state.json").is_file():
        return json.loads((run / "trainer_state.json").read_text())
    found = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return json.loads(found[-1].read_text()) if found else None


def recorded_arms(settings: dict[str, Any], results: Path) -> dict[str, dict[str, Any]]:
    """The arms of the committed table (`results`/ab.json) trained under these settings (every key but the arms) and
    each as its arm is defined now, to its steps: what a lost run leaves that still answers the same question."""
    path = results / "ab.json"
    if not path.is_file():
        return {}
    report = json.loads(path.read_text(encoding="utf-8"))
    if report["settings"] != {k: v for k, v in settings.items() if k != "arms"}:
        return {}
    return {
        arm: figures
        for arm, figures in report["arms"].items()
        if arm in settings["arms"]
        and figures["steps"] >= settings["steps"]
        and {k: figures.get(k) for k in ("flags", "prompts", "collect")} == arm_spec(settings, arm)
    }


def arm_spec(settings: dict[str, Any], arm: str) -> dict[str, Any]:
    """An arm as a mapping: `flags` (added to every arm's `hf-jacobi train` flags), and optionally `prompts` (train on
    the order's first `train_prompts` prompts whose id starts with it, instead of its first ones) and `collect` (train
    on the base model's own trajectories of the arm's prompts, collected with the settings' `collect_flags` and these;
    e.g. longer answers). A list is the flags alone."""
    spec = settings["arms"][arm]
    spec = {"flags": spec} if isinstance(spec, list) else dict(spec)
    unknown = sorted(set(spec) - {"flags", "prompts", "collect"})
    if unknown:
        raise SystemExit(f"arm {arm!r} has unknown key(s) {unknown}; an arm has flags, prompts and collect")
    return {"flags": list(spec.get("flags", [])), "prompts": spec.get("prompts"), "collect": spec.get("collect")}


def train_prompt_file(settings: dict[str, Any], prefix: str, folder: Path) -> Path:
    """The order's first `train_prompts` prompts whose id starts with `prefix`, none from the evaluation slice on."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    order = pq.read_table(ROOT / settings["prompt_order"]).slice(0, settings["eval_prompts"][0])
    chosen = order.filter(pc.starts_with(order.column("prompt_id"), prefix))
    if chosen.num_rows < settings["train_prompts"]:
        raise SystemExit(
            f"prompts {prefix!r}: {chosen.num_rows} of them come before the evaluation slice, fewer than "
            f"train_prompts ({settings['train_prompts']})"
        )
    path = folder / f"train-prompts-{prefix.strip('/').replace('/', '-')}.parquet"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(chosen.slice(0, settings["train_prompts"]), path)
    return path


def arm_data(settings: dict[str, Any], spec: dict[str, Any], run: Path, seconds: float) -> tuple[Path, Path] | None:
    """The arm's trajectory folder and prompt file: the settings' own, or the arm's prompts and its own collection
    (collected first within `seconds`, resumed where a call stopped; None while it is not complete)."""
    prompts = ROOT / settings["prompt_order"]
    if spec["prompts"] is not None:
        prompts = train_prompt_file(settings, spec["prompts"], run.parent)
    if spec["collect"] is None:
        return ROOT / settings["trajectories"], prompts
    trajectories = run.parent / f"{run.name}-trajectories"
    collect = [
        "collect", *map(str, settings.get("collect_flags", [])), *map(str, spec["collect"]),
        "--prompts", str(prompts), "--num_prompts", str(settings["train_prompts"]), "--output_dir", str(trajectories),
        *(["--stop_after_seconds", str(int(seconds))] if seconds < 1e9 else []),
    ]  # fmt: skip
    if hf_jacobi(collect) != 0:
        raise SystemExit(f"collecting {run.name}'s trajectories failed: hf-jacobi {' '.join(collect)}")
    if len(collected_answers(trajectories)) < settings["train_prompts"]:
        return None
    return trajectories, prompts


def arm_arguments(
    settings: dict[str, Any], arm: str, run: Path, eval_prompts: Path, seconds: float, data: tuple[Path, Path]
) -> list[str]:
    trajectories, prompts = data
    arguments = [
        "train", "--config", str(ROOT / settings["config"]), *map(str, settings.get("flags", [])),
        "--trajectories", str(trajectories),
        "--trajectory_prompts", str(prompts),
        "--num_trajectory_prompts", str(settings["train_prompts"]),
        "--eval_trajectories", str(ROOT / settings["trajectories"]), "--eval_trajectory_prompts", str(eval_prompts),
        "--eval_strategy", "steps", "--eval_steps", str(settings.get("eval_steps", 10)),
        "--stop_after_steps", str(settings["steps"]), "--stop_after_seconds", str(max(0, int(seconds))),
        "--save_strategy", "steps", "--save_steps", str(settings["steps"]), "--save_only_model", "false",
        "--save_total_limit", "1", "--save_every_seconds", str(SAVE_EVERY_S), "--report_to", "none",
        "--output_dir", str(run), *map(str, arm_spec(settings, arm)["flags"]),
    ]  # fmt: skip
    if any(run.glob("checkpoint-*")):
        arguments += ["--resume_from_checkpoint", "last"]
    return arguments


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    arms = args.arms or list(settings["arms"])
    unknown = sorted(set(arms) - set(settings["arms"]))
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; {args.settings} has {sorted(settings['arms'])}")
    for arm in arms:  # every arm's form is checked before the first one trains
        arm_spec(settings, arm)
    eval_prompts = eval_prompt_file(settings, args.output_dir)
    recorded = recorded_arms(settings, args.results)
    deadline = time.monotonic() + 60 * args.minutes if args.minutes is not None else float("inf")
    for arm in arms:
        folder = args.output_dir / arm
        state = newest_state(folder)
        if state is not None and state["global_step"] >= settings["steps"]:
            continue
        if state is None and arm in recorded:
            print(f"[recipe-ab] {arm}: in {args.results / 'ab.json'} already, not trained again", flush=True)
            continue
        left = deadline - time.monotonic()
        if left < 5 * 60:
            print(f"[recipe-ab] stopping before {arm}: {left / 60:.0f} minutes left", flush=True)
            return 0
        print(f"[recipe-ab] {arm}: from step {state['global_step'] if state else 0}", flush=True)
        data = arm_data(settings, arm_spec(settings, arm), folder, min(left, 1e9))
        if data is None:
            print(
                f"[recipe-ab] {arm}: its own collection stopped at the time limit; the same command goes on",
                flush=True,
            )
            return 0
        left = deadline - time.monotonic()
        code = hf_jacobi(arm_arguments(settings, arm, folder, eval_prompts, min(left, 1e9), data))
        if code != 0:
            return code
        if deadline - time.monotonic() < 60:
            return 0
    return 0


def arm_figures(state: dict[str, Any]) -> dict[str, Any]:
    """An arm's curve (the probe at each evaluation) and its last training log's consistency diagnostics."""
    history = state["log_history"]
    curve = [
        {"step": e["step"], "tokens_per_iteration": e["eval_probe/tokens_per_iteration"],
         "depth0_rate": e["eval_probe/depth0_rate"]}
        for e in history if "eval_probe/tokens_per_iteration" in e
    ]  # fmt: skip
    trained = [e for e in history if "consistency_loss" in e]  # evaluations log eval_consistency_loss
    last = trained[-1] if trained else {}
    keys = ("consistency_loss", "consistency_teacher_entropy", "consistency_agreement", "ar_loss", "base_kl")
    return {"steps": state["global_step"], "curve": curve, "last_log": {k: last[k] for k in keys if k in last}}


def table(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    recorded = recorded_arms(settings, args.results)
    arms = {}
    for arm in settings["arms"]:
        state = newest_state(args.output_dir / arm)
        if state is not None:
            arms[arm] = {**arm_spec(settings, arm), **arm_figures(state)}
        elif arm in recorded:
            arms[arm] = recorded[arm]
    if not arms:
        raise SystemExit(f"no arm has trained yet in {args.output_dir} or {args.results / 'ab.json'}")
    report = {"settings": {k: v for k, v in settings.items() if k != "arms"}, "arms": arms}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "ab.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (args.results / "ab.md").write_text(markdown(report), encoding="utf-8")
    plot(report, args.results / "ab.png")
    print(markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        f"Each arm: {s['steps']} steps of 32 rows on the base's trajectories of the first {s['train_prompts']:,} "
        f"prompts; the probe on those of prompts {s['eval_prompts'][0]}-{s['eval_prompts'][1] - 1} of the same order.",
        "",
        "| arm | flags | steps | probe tokens / iteration (first -> last) | gain | depth-0 rate (last) | agreement | "
        "consistency loss | teacher entropy |",
        "|---|---|---|---|---:|---|---|---|---|",
    ]
    for arm, a in report["arms"].items():
        curve, log = a["curve"], a["last_log"]
        tpi = f"{curve[0]['tokens_per_iteration']:.3f} -> {curve[-1]['tokens_per_iteration']:.3f}" if curve else "-"
        gain = f"{curve[-1]['tokens_per_iteration'] - curve[0]['tokens_per_iteration']:+.3f}" if curve else "-"
        depth0 = f"{curve[-1]['depth0_rate']:.3f}" if curve else "-"
        cells = [f"{log[k]:.3f}" if k in log else "-" for k in ("consistency_agreement", "consistency_loss",
                                                                  "consistency_teacher_entropy")]  # fmt: skip
        change = " ".join([*a["flags"], *([f"prompts {a['prompts']}*"] if a.get("prompts") else []),
                           *([f"collected with {' '.join(a['collect'])}"] if a.get("collect") else [])])  # fmt: skip
        lines.append(f"| {arm} | `{change or '(shipped)'}` | {a['steps']} | {tpi} | {gain} | {depth0} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, a in report["arms"].items():
        if a["curve"]:
            ax.plot([p["step"] for p in a["curve"]], [p["tokens_per_iteration"] for p in a["curve"]], "o-", label=arm)
    ax.set_xlabel("optimizer step (32 rows)")
    ax.set_ylabel("probe: tokens per iteration (held out)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=Path, default=SETTINGS, help="the arms (default lab/recipe_ab.yaml)")
    parser.add_argument(
        "--output-dir", type=Path, default=ROOT / "runs" / "recipe-ab", help="the arms' runs (ignored)"
    )
    parser.add_argument(
        "--results", type=Path, default=ROOT / "docs" / "results" / "recipe-ab", help="the committed table's folder"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    go = commands.add_parser("run", help="train the arms in order, each resumed where it stopped")
    go.add_argument("--arms", nargs="+", help="these arms only (default: all, in the file's order)")
    go.add_argument("--minutes", type=float, help="stop the call after this long (the arm in training saves)")
    go.set_defaults(func=run)
    show = commands.add_parser("table", help="the arms' figures as JSON, a table and the probe's curves")
    show.set_defaults(func=table)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    raise SystemExit(arguments.func(arguments))
