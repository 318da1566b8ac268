"""The campaign's five stages in order, each under its deadline, each recording itself in campaign.json as it goes.

`Campaign` holds what the stages share (settings, folders, the models of the first two stages, the budget); each
`stage_*` method does one stage. See gpu_campaign.py for the whole and recipes/smollm2-135m/README.md ("GPU campaign")
for how a call on a lent GPU runs it.
"""

from __future__ import annotations

import gc
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hf_jacobi import load_model

from . import judging, training
from .budget import Budget, Manifest, StageTimer
from .bundle import check_limits, pack_winner
from .lowrank import svd_adapter, to_bfloat16
from .method_study import float32_check, measure_methods
from .prompts import PromptSet, PromptSettings, build_prompt_set
from .runner import SCRIPT, Job, cli, run_jobs, start, wait_all, with_log_tails
from .trajectories import TrajectorySettings, collect_stage, read_completions, write_completions

SAVE_ALLOWANCE_S = 20.0
"""Seconds a training run gets after its deadline step to save its weights and state, within the stage."""


@dataclass
class Campaign:
    """Everything the stages share."""

    out: Path
    work: Path
    model: str
    """'embedded' or a local checkpoint folder (the tiny one in a rehearsal)."""
    budget: Budget
    manifest: Manifest
    prompt_settings: PromptSettings
    trajectory_settings: TrajectorySettings
    judge_settings: judging.JudgeSettings
    variants: list[str]
    svd_budget_bytes: int
    inline: bool
    tiny: bool
    resume_from: Path | None = None
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    _models: dict[str, Any] = field(default_factory=dict, repr=False)
    _prompts: PromptSet | None = field(default=None, repr=False)
    _base_judge: Any = field(default=None, repr=False)

    # -- what the stages share -------------------------------------------------------------------------------------

    def loaded(self, dtype: str):
        """(model, tokenizer) in `dtype` on the campaign's device, loaded once."""
        if dtype not in self._models:
            self._models[dtype] = load_model(self.model, dtype=dtype, device=self.device)
        return self._models[dtype]

    def release_models(self) -> None:
        """Frees the first stages' models before the trainings take the device."""
        self._models.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def resumed(self, name: str) -> Path | None:
        """`name` in the folder resumed from, when it is there."""
        path = self.resume_from / name if self.resume_from is not None else None
        return path if path is not None and path.is_file() else None

    def prompts(self) -> PromptSet:
        """The prompt set: this call's, else the output folder's, else the resumed one."""
        if self._prompts is None:
            source = self.out / "prompts.parquet"
            source = source if source.is_file() else self.resumed("prompts.parquet")
            if source is None:
                raise FileNotFoundError("no prompt set: run the prompts stage or --resume-from a folder with one")
            self._prompts = PromptSet.read(source)
        if not self.judge_file.is_file():
            self.judge_file.parent.mkdir(parents=True, exist_ok=True)
            self._prompts.dataset("judge").to_parquet(str(self.judge_file))
        return self._prompts

    @property
    def judge_file(self) -> Path:
        return self.work / "judge.parquet"

    def runs(self) -> dict[str, Path]:
        return {name: self.work / "runs" / name for name in self.variants}

    def record(self, stage: str, value: dict[str, Any]) -> None:
        self.manifest.update("stages", stage, value=value)

    # -- stage 1 ---------------------------------------------------------------------------------------------------

    def stage_prompts(self, timer: StageTimer) -> None:
        """Magpie sampling at large batch plus the `packages` train prompts, disjoint from every held-out set."""
        previous_file = self.resumed("prompts.parquet")
        previous = PromptSet.read(previous_file) if previous_file else None
        model, tokenizer = self.loaded(self.trajectory_settings.dtype)

        def save(prompt_set: PromptSet, record: dict) -> None:
            prompt_set.write(self.out / "prompts.parquet")
            self.record("prompts", timer.record(**record, **prompt_set.summary()))

        self._prompts, _ = build_prompt_set(model, tokenizer, self.prompt_settings, timer, previous, save)
        self.judge_file.unlink(missing_ok=True)
        self.prompts()  # writes the judging set where the judges read it

    # -- stage 2 ---------------------------------------------------------------------------------------------------

    def stage_trajectories(self, timer: StageTimer) -> None:
        """Both methods measured on a sample (and checked in float32), then every training prompt's trajectory."""
        settings = self.trajectory_settings
        known, note = read_completions(self.resumed("completions.parquet") or Path("-"), settings)
        train = self.prompts().dataset("train")
        model, tokenizer = self.loaded(settings.dtype)
        record: dict[str, Any] = {"resume": note, "settings": vars(settings).copy()}
        if settings.measure_prompts and not timer.expired():
            sample = train.select(range(min(settings.measure_prompts, len(train))))
            record["measured"] = measure_methods(model, tokenizer, sample, self.work, settings)
            self.record("trajectories", timer.record(**record))
        if settings.check_prompts and not timer.expired():
            sample = train.select(range(min(settings.check_prompts, len(train))))
            record["float32_check"] = float32_check(self.loaded("float32")[0], tokenizer, sample, self.work, settings)
            self.record("trajectories", timer.record(**record))

        def save(done: dict[str, list[int]], progress: dict) -> None:
            write_completions(self.out / "completions.parquet", done, settings)
            self.record("trajectories", timer.record(**record, **progress))

        collect_stage(model, tokenizer, train, settings, timer, self.work, known, save)

    # -- stage 3 ---------------------------------------------------------------------------------------------------

    def _train_job(self, name: str, run: Path, deadline: float, share: int) -> Job:
        arguments = training.train_arguments(name, [self.work / "trajectories"], run, self.model, self.tiny)
        argv = [sys.executable, str(SCRIPT), "train-worker", "--deadline", str(deadline), "--", *arguments]

        def call() -> int:  # inline: the runs take turns, each with its share of what is left
            return training.run_variant(arguments, time.time() + max(0.0, deadline - time.time()) / share)

        return Job(name, argv, call, run / "train.log")

    def _base_judge_job(self) -> Job:
        arguments = self.judge_settings.arguments(self._model_flag(), self.judge_file, self.work / "quality" / "base")
        return Job("base", cli(*arguments), lambda: _cli_main(arguments), self.work / "quality" / "base.log")

    def _model_flag(self) -> str | None:
        return None if self.model == "embedded" else self.model

    def stage_training(self, timer: StageTimer) -> None:
        """The variants side by side until the deadline (the base judged meanwhile), then the weights to judge."""
        self.release_models()
        if not self.inline and self.judge_file.is_file():
            self._base_judge = start(self._base_judge_job())  # the base's figures do not depend on training
        deadline = time.time() + max(0.0, timer.seconds_left() - SAVE_ALLOWANCE_S)
        runs = self.runs()
        for run in runs.values():  # an earlier call's checkpoints must not pass for this one's
            shutil.rmtree(run, ignore_errors=True)
        jobs = [self._train_job(name, run, deadline, len(runs) - i) for i, (name, run) in enumerate(runs.items())]
        results = run_jobs(jobs, timer.deadline + 10.0, self.inline)
        variants = {}
        for name, run in runs.items():
            weights, steps = training.newest_weights(run)
            variants[name] = {**results[name], "steps": steps, "weights": str(weights) if weights else None}
            if weights is not None:
                variants[name]["judged"] = self._judged_weights(name, weights)
            self.record("training", timer.record(variants=variants))

    def _judged_weights(self, name: str, weights: Path) -> dict[str, Any]:
        """The folder each variant is judged (and returned) as: its LoRA adapter in bfloat16, or for a full-parameter
        run the SVD approximation of its delta, as a bfloat16 LoRA adapter that fits the return budget."""
        target = self.work / "judged" / name
        shutil.rmtree(target, ignore_errors=True)
        if training.is_adapter(weights):
            to_bfloat16(weights, target)
            return {"folder": str(target), "form": "LoRA adapter, bfloat16"}
        base, _ = load_model(self.model, dtype="float32", device=self.device)
        tuned, _ = load_model(str(weights), dtype="float32", device=self.device)
        report = svd_adapter(base, tuned, target, budget_bytes=self.svd_budget_bytes)
        del base, tuned
        self.release_models()
        return {"folder": str(target), "form": "SVD of the full delta as a LoRA adapter, bfloat16", **report}

    # -- stage 4 ---------------------------------------------------------------------------------------------------

    def _variant_judges(self, judged: dict[str, str], base_dir: Path) -> list[Job]:
        """One judge per variant beside the base's figures (processes), or one judge of them all (inline)."""
        quality = self.work / "quality"
        if self.inline:
            arguments = self.judge_settings.arguments(self._model_flag(), self.judge_file, quality / "all")
            arguments += ["--adapters", *(f"{name}={folder}" for name, folder in judged.items())]
            return [Job("all", cli(*arguments), _cli_caller(arguments), quality / "all.log")]
        # without the base's figures (its judge failed or ran out of time) each judge measures the base itself
        base = ["--base-results", str(base_dir)] if (base_dir / "quality.json").is_file() else []
        jobs = []
        for name, folder in judged.items():
            arguments = self.judge_settings.arguments(self._model_flag(), self.judge_file, quality / name)
            arguments += ["--adapters", f"{name}={folder}", *base]
            jobs.append(Job(name, cli(*arguments), _cli_caller(arguments), quality / f"{name}.log"))
        return jobs

    def stage_judging(self, timer: StageTimer) -> None:
        """Every trained variant's judged weights by `hf-jacobi quality`, beside the base; the table and the winner."""
        base_dir = self.work / "quality" / "base"
        record: dict[str, Any] = {}
        if self._base_judge is not None:
            ended = wait_all({"base": self._base_judge}, timer.deadline)
            record["base"] = with_log_tails(ended, {"base": self._base_judge_job().log})["base"]
        elif not self.inline:
            record["base"] = run_jobs([self._base_judge_job()], timer.deadline, self.inline)["base"]
        trained = self.manifest.data.get("stages", {}).get("training", {}).get("variants", {})
        judged = {name: v["judged"]["folder"] for name, v in trained.items() if v.get("judged")}
        record["judges"] = run_jobs(
            self._variant_judges(judged, base_dir) if judged else [], timer.deadline, self.inline
        )
        folders = [base_dir, self.work / "quality" / "all", *(self.work / "quality" / name for name in judged)]
        rows = judging.read_judged(folders, list(judged))
        winner, rule = judging.choose_winner(rows)
        extra = {
            name: {"steps": trained[name].get("steps"), "judged": trained[name]["judged"]["form"]} for name in judged
        }
        (self.out / "judged.md").write_text(judging.markdown(rows, extra))
        self.record("judging", timer.record(**record, rows=rows, winner=winner, rule=rule))

    # -- stage 5 ---------------------------------------------------------------------------------------------------

    def stage_bundle(self, timer: StageTimer) -> None:
        """Every run's log in the record, the winner's weights (with its log) and a check that the output folder fits
        one call's return. Where no variant was judged (every judge failed or ran out of time), the weights of the one
        that trained most steps come back instead, marked unjudged, so that the window's training is not lost."""
        logs = {name: training.train_log(run) for name, run in self.runs().items() if run.is_dir()}
        winner = self.manifest.data.get("stages", {}).get("judging", {}).get("winner")
        unjudged = None
        if winner is None:
            trained = self.manifest.data.get("stages", {}).get("training", {}).get("variants", {})
            ready = {name: v.get("steps") or 0 for name, v in trained.items() if v.get("judged")}
            winner = unjudged = max(ready, key=ready.get) if ready else None
        files: list[str] = []
        if winner is not None:
            run = self.runs()[winner]
            weights = Path(self.manifest.data["stages"]["training"]["variants"][winner]["judged"]["folder"])
            files = [p.name for p in pack_winner(weights, [run / "train.log", run / "trainer_state.json"], self.out)]
        problems = check_limits(self.out)
        record = timer.record(winner=winner, unjudged=unjudged, winner_files=files, problems=problems, train_logs=logs)
        self.record("bundle", record)


def _cli_main(arguments: list[str]) -> int:
    from hf_jacobi.cli import main

    return main(arguments)


def _cli_caller(arguments: list[str]):
    return lambda: _cli_main(arguments)
