"""The campaign on a CPU: the GPU campaign's prompt set, the base model's trajectories of every prompt in bfloat16,
stopping and resuming across runs, its data committed as it grows.

Why a second driver: the GPU campaign (gpu_campaign.py) fits one 10-minute device call; on a small CPU the same work
takes many hours, across many runs and machines. So every stage here resumes from what it finds, and what a fresh
clone needs lives in the committed folder `data/campaign-cpu/` (prompt set, trajectory shards, progress log), never
in an ignored one:

    python lab/campaigns/cpu_campaign.py collect            # resumes; stop it any time (a kill loses a batch)
    python lab/campaigns/cpu_campaign.py status             # what is collected, trained and judged
    python lab/campaigns/cpu_campaign.py train --variant lora-r16 --trajectories 2000 [--minutes 150]
    python lab/campaigns/cpu_campaign.py judge --run lora-r16-n2000     # hf-jacobi quality, beside the base

Training resumes from the newest checkpoint of its run folder (`runs/cpu-campaign/<variant>-n<N>`, ignored), saved
every 20 minutes and at the deadline; `--minutes` stops it and copies the newest checkpoint into the committed
`data/campaign-cpu/checkpoints/<run>/` (one per run, replaced at each stop), from which a fresh clone resumes.

Collection order: the training prompts shuffled (seed 0), then sorted by length within chunks of 1,024 (less
padding per batch), so the first 2,000 or 5,000 collected are a random sample of the whole: the scaling curve's
smaller points train on a prefix of the collection order (`collection_order`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign.judging import HUMANEVAL_FILE, JUDGE_FILES, JUDGE_SPEED_FILE, QUALITY_FILE  # standard library only
from campaign.scaling import SHIPPED_RUN, run_name, run_size, steps_label  # standard library only at import

ROOT = Path(__file__).resolve().parent
SAVE_EVERY_S = 20 * 60
CPU_ROWS_PER_STEP = 32
"""The recipe's 16 x 2 rows a step, as micro-batches that fit a small CPU machine's memory (`cpu_batching`)."""
CPU_BATCH_SIZE, CPU_ACCUMULATION = 4, 8
"""Under bfloat16 autocast, 8 micro-batches of 4: batches grouped by length put the longest rows (anchor texts of
~1,500 tokens) in one batch, and what a training forward keeps for backward grows with rows x length^2 (the attention
of 30 layers) and rows x length x vocabulary (the logits): at 16 and at 8 rows the first step ran out of the campaign
machines' memory (killed), at 4 it fits (docs/training.md, "Batches grouped by length"). The losses are divided by item
counts over the accumulated batch, so the step is the same."""
CPU_TRAIN_FLAGS = [
    "--use_cpu",
    "true",
    "--dataloader_num_workers",
    "0",
    "--save_strategy",
    "steps",
    "--save_steps",
    "100000",  # --save_every_seconds saves by the clock instead
]


def cpu_batching() -> tuple[int, int]:
    """(micro-batch, accumulation) of a step's 32 rows on this CPU: 4 x 8 under bfloat16 autocast, 2 x 16 in float32,
    whose saved activations take twice the bytes (4 rows would need about twice bfloat16's peak). The
    length-grouped order is drawn over the step's 32 rows whatever the split (`LengthGroupedEpochSampler`), so a run
    resumed on a machine of the other kind trains the same rows in each step."""
    batch = CPU_BATCH_SIZE if resolve_dtype("auto") == "bfloat16" else CPU_BATCH_SIZE // 2
    return batch, CPU_ROWS_PER_STEP // batch


def cpu_precision_flags() -> list[str]:
    """bfloat16 autocast where the CPU has bfloat16 units (faster than float32 there), float32 where it has none:
    there bfloat16 is emulated, and a forward runs several times slower than float32's (`resolve_dtype`);
    with the micro-batches of `cpu_batching`. A run resumed on another machine goes on in that machine's precision;
    its optimizer state is float32 in both."""
    batch, accumulation = cpu_batching()
    bf16 = "true" if resolve_dtype("auto") == "bfloat16" else "false"
    return [
        "--bf16",
        bf16,
        "--per_device_train_batch_size",
        str(batch),
        "--gradient_accumulation_steps",
        str(accumulation),
    ]


RESUME_FLAGS = [
    "--save_only_model",
    "false",  # the optimizer and scheduler states travel with a checkpoint, so that a run resumes exactly
    "--save_total_limit",
    "1",
]


@dataclass(frozen=True)
class Layout:
    """Where the campaign keeps what (the committed data folder, the ignored run folder) and which model it trains."""

    data: Path = ROOT.parents[1] / "recipes" / "smollm2-135m" / "data" / "campaign-cpu"
    runs: Path = ROOT.parents[1] / "runs" / "cpu-campaign"
    results: Path = ROOT.parents[1] / "docs" / "results" / "campaign-cpu"
    """Where the scaling curve (`scaling.json`, `.md`, `.png`) goes: the figures the docs render."""
    model: str = "embedded"
    tiny: bool = False
    """A tiny checkpoint and toy sizes: the rehearsal the test suite runs."""

    @property
    def prompts(self) -> Path:
        return self.data / "prompts.parquet"

    @property
    def trajectories(self) -> Path:
        """The first collection's folder (in the dtype the collection started in)."""
        return self.data / "trajectories"

    def trajectory_folder(self, dtype: str) -> Path:
        """Where a collection in `dtype` goes: the first folder while it is empty or was collected in `dtype`, else
        `trajectories-<dtype>/`. Why a second folder: a folder records the model it was collected with, dtype
        included, and refuses rows of another (the same weights decode to other trajectories in another dtype), while
        a machine without bfloat16 units, where a bfloat16 forward runs several times slower than float32's, goes on in
        float32; training reads every folder as one set (`hf-jacobi train --trajectories A B`), since it trains on the
        base model's own fixed points in either dtype."""
        from hf_jacobi import collection_settings

        settings = collection_settings(self.trajectories)
        if settings is None or settings.get("model") == collection_model(self, dtype):
            return self.trajectories
        return self.data / f"trajectories-{dtype}"

    @property
    def trajectory_folders(self) -> list[Path]:
        """Every collection folder there is, the first one first."""
        others = sorted(p for p in self.data.glob("trajectories-*") if p.is_dir())
        return [p for p in (self.trajectories, *others) if p.is_dir()]

    @property
    def progress(self) -> Path:
        return self.data / "progress.jsonl"

    @property
    def order(self) -> Path:
        """The training prompts in collection order (`prompt_id`, `prompt`): the first N are a prompt file to train on."""
        return self.data / "train-order.parquet"

    @property
    def checkpoints(self) -> Path:
        return self.data / "checkpoints"

    @property
    def judged(self) -> Path:
        return self.data / "judged"

    @property
    def adapters(self) -> Path:
        """Each finished run's adapter in bfloat16 (what is judged, and shipped if it wins)."""
        return self.data / "adapters"


def collection_model(layout: Layout, dtype: str) -> str:
    """The model name a collection folder records (`collect_trajectories`' model_id): the model and its dtype."""
    return f"{layout.model} ({dtype})"


def resolve_dtype(dtype: str) -> str:
    """`auto`: bfloat16 where the CPU has bfloat16 units (AMX or AVX-512 BF16), else float32, where bfloat16 is
    emulated and several times slower than float32 (`docs/results/campaign-cpu/dtype/`); any other value as given."""
    if dtype != "auto":
        return dtype
    from hf_jacobi import auto_dtype

    return auto_dtype()


CHUNK = 1024
"""Prompts sorted by length together; also the granularity at which a prefix of the order is a random sample."""
SETTINGS = {"block_size": 16, "max_new_tokens": 128, "draft_seed": 0, "method": "parallel"}
TINY_SETTINGS = {**SETTINGS, "block_size": 4, "max_new_tokens": 12}


def collection_order(prompt_ids: list[str], lengths: list[int], seed: int = 0) -> list[int]:
    """Indices of the training prompts in collection order: shuffled, then by length within each chunk."""
    order = list(range(len(prompt_ids)))
    random.Random(seed).shuffle(order)
    chunks = [order[start : start + CHUNK] for start in range(0, len(order), CHUNK)]
    return [i for chunk in chunks for i in sorted(chunk, key=lambda i: (lengths[i], prompt_ids[i]))]


def ordered_train_prompts(layout: Layout, tokenizer):
    """The training split as a prompt dataset, in collection order (also written to `layout.order`, once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from campaign.prompts import PromptSet

    from hf_jacobi import encode_prompts

    prompt_set = PromptSet.read(layout.prompts)
    train = prompt_set.dataset("train")
    lengths = [len(ids) for ids in encode_prompts(train, tokenizer)]
    ordered = train.select(collection_order(list(train["prompt_id"]), lengths))
    if not layout.order.is_file():
        texts = prompt_set.texts("train")
        ids = list(ordered["prompt_id"])
        table = pa.table({"prompt_id": ids, "prompt": [texts[i] for i in ids]})
        pq.write_table(table, layout.order, compression="zstd")
    return ordered


def _collected_count(layout: Layout) -> tuple[int, int]:
    """(rows, answer tokens) in the committed trajectory folders."""
    from hf_jacobi import collected_answers

    answers = [answer for folder in layout.trajectory_folders for answer in collected_answers(folder).values()]
    return len(answers), sum(len(answer) for answer in answers)


def _collected_ids(folders: list[Path]) -> set[str]:
    """The prompt ids with a trajectory in `folders`."""
    from hf_jacobi import collected_answers

    return {prompt_id for folder in folders for prompt_id in collected_answers(folder)}


def collect(args: argparse.Namespace) -> int:
    """Collects the training prompts' trajectories into the data folder, `--step` prompts at a time (each step's rate
    appended to its progress log), until `--prompts` are collected or `--minutes` have passed, on `--threads` torch
    threads. The process's thread count is restored after: a caller in the same process (the test suite's workers,
    one thread each beside one another) kept its `--threads` threads on busy cores after it, which ran every later
    torch test of that worker several times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _collect(args)
    finally:
        torch.set_num_threads(threads)


def _collect(args: argparse.Namespace) -> int:
    """`collect` on the threads it set."""
    layout = args.layout
    import torch

    from hf_jacobi import collect_trajectories, load_model

    dtype = resolve_dtype(args.dtype)
    folder = layout.trajectory_folder(dtype)
    model, tokenizer = load_model(layout.model, dtype=dtype)
    prompts = ordered_train_prompts(layout, tokenizer)
    elsewhere = _collected_ids([f for f in layout.trajectory_folders if f != folder])  # not collected twice
    ids = list(prompts["prompt_id"])
    wanted = min(args.prompts or len(prompts), len(prompts))
    deadline = time.monotonic() + 60 * args.minutes if args.minutes is not None else float("inf")
    done, tokens = _collected_count(layout)
    while done < wanted and time.monotonic() < deadline:
        goal = min(wanted, (done // args.step + 1) * args.step)
        rows_before, tokens_before = done, tokens
        start = time.perf_counter()
        with torch.inference_mode():
            collect_trajectories(
                model,
                tokenizer,
                prompts.select([i for i in range(goal) if ids[i] not in elsewhere]),
                folder,
                batch_size=args.batch_size,
                shard_size=args.batch_size,
                model_id=collection_model(layout, dtype),
                progress=False,
                **(TINY_SETTINGS if layout.tiny else SETTINGS),
            )
        seconds = time.perf_counter() - start
        done, tokens = _collected_count(layout)
        step = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": done - rows_before,
            "tokens": tokens - tokens_before,
            # 3 decimals: a tiny step can take under 0.05 s, which one decimal made 0 (status then drops its rate)
            "seconds": round(seconds, 3),
            "tokens_per_s": round((tokens - tokens_before) / seconds, 1),
            "collected": done,
            "of": len(prompts),
            "dtype": dtype,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "machine": _machine(),
        }
        with layout.progress.open("a") as log:
            log.write(json.dumps(step) + "\n")
        print(json.dumps(step), flush=True)
    return 0


def _machine() -> str:
    """The CPU model and whether it has bfloat16 units (what the rate depends on)."""
    from hf_jacobi import cpu_description

    return cpu_description()


def _first_collected(layout: Layout, count: int) -> bool:
    """Whether the first `count` prompts of the collection order all have a trajectory."""
    import pyarrow.parquet as pq

    wanted = set(pq.read_table(layout.order, columns=["prompt_id"]).column("prompt_id").to_pylist()[:count])
    return not wanted - _collected_ids(layout.trajectory_folders)


def _finished(run: Path) -> bool:
    """Whether the run saved final weights at the end of its schedule (a run stopped at a deadline saves them too)."""
    from campaign.lowrank import ADAPTER_FILE

    state = run / "trainer_state.json"
    if not (run / ADAPTER_FILE).is_file() or not state.is_file():
        return False
    record = json.loads(state.read_text())
    return record["global_step"] >= record["max_steps"]


def _newest_checkpoint(folder: Path) -> Path | None:
    found = [p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
    return max(found, key=lambda p: int(p.name.split("-")[1])) if found else None


def train(args: argparse.Namespace) -> int:
    """Trains `--variant` on the first `--trajectories` prompts' trajectories for one epoch, resuming from the run
    folder's newest checkpoint, else the committed one; stops after `--minutes` and commits its newest checkpoint."""
    import shutil

    from campaign import training
    from campaign.lowrank import to_bfloat16

    layout = args.layout
    name = run_name(args.variant, args.trajectories)
    run, committed = layout.runs / name, layout.checkpoints / name
    if not layout.order.is_file() or not _first_collected(layout, args.trajectories):
        raise SystemExit(
            f"the first {args.trajectories} prompts of {layout.order} are not all collected yet: collect first"
        )
    if _newest_checkpoint(run) is None and _newest_checkpoint(committed) is not None:
        source = _newest_checkpoint(committed)
        shutil.copytree(source, run / source.name)
        print(f"resuming from the committed {source}", flush=True)
    arguments = training.train_arguments(args.variant, layout.trajectory_folders, run, layout.model, tiny=layout.tiny)
    arguments += ["--trajectory_prompts", str(layout.order), "--num_trajectory_prompts", str(args.trajectories)]
    arguments += ([] if layout.tiny else CPU_TRAIN_FLAGS + cpu_precision_flags()) + RESUME_FLAGS + args.extra
    if _newest_checkpoint(run) is not None:
        arguments += ["--resume_from_checkpoint", "last"]
    deadline = time.time() + 60 * args.minutes if args.minutes is not None else float("inf")
    code = training.run_variant(arguments, deadline, save_every=SAVE_EVERY_S)
    if _finished(run):  # the epoch ended: the adapter is what later stages need, not a checkpoint
        to_bfloat16(run, layout.adapters / name)
        for record in ("trainer_state.json", "jacobi_forcing_training.json"):  # its log and settings, beside it
            if (run / record).is_file():
                shutil.copy(run / record, layout.adapters / name / record)
        shutil.rmtree(committed, ignore_errors=True)
    elif args.commit_checkpoint and (newest := _newest_checkpoint(run)) is not None:
        commit_checkpoint(newest, committed)
    return code


def commit_checkpoint(checkpoint: Path, committed: Path) -> Path:
    """Replaces the run's committed resume checkpoint (`committed`, a folder of one) with a copy of `checkpoint`
    whose optimizer moments are rounded to bfloat16; returns the copy.

    Every committed checkpoint stays in the repository's history, and Adam's two float32 moments are two thirds of
    one: LoRA r64 on the seven projections holds 19.5 M parameters, 78 MB of float32 weights and 156 MB of moments
    at each stop. In bfloat16 the moments take half those bytes, which makes a checkpoint a third smaller. The weights
    stay float32, exact; `torch.optim.Optimizer.load_state_dict` casts each moment back to its parameter's dtype on
    resume, so a resumed step differs from an unbroken one by the moments' rounding (a relative 2^-9 at most) alone.
    custom_generate/ is a copy of the decoding code that every save writes again: resuming never reads it."""
    import shutil

    import torch

    shutil.rmtree(committed, ignore_errors=True)
    copy = committed / checkpoint.name
    shutil.copytree(checkpoint, copy, ignore=shutil.ignore_patterns("custom_generate", "optimizer.pt"))
    if (checkpoint / "optimizer.pt").is_file():
        optimizer = torch.load(checkpoint / "optimizer.pt", map_location="cpu", weights_only=True)
        for moments in optimizer["state"].values():
            for key, value in moments.items():
                if key != "step" and torch.is_tensor(value) and value.dtype == torch.float32:
                    moments[key] = value.to(torch.bfloat16)
        torch.save(optimizer, copy / "optimizer.pt")
    return copy


def judge(args: argparse.Namespace) -> int:
    """`hf-jacobi quality` of the base (once) and of `--run`'s final adapter on the judging requests, `requests`
    and `code-tasks`, with held-out tokens per forward, then `hf-jacobi evaluate` on HumanEval problems (block 8)
    and on 32 of the judging requests (block 16), each reusing the base's figures of an earlier run's report where
    there is one; results in the data folder's `judged/`, with `judged.md`, and the scaling curve in the results
    folder. Each part is skipped where its file exists, so a judge cut short resumes at the part it was in, and a run
    judged before a part was added gets that part alone. Within `minutes` (the run's time), a part is started only
    with its `judge_part_minutes` left."""
    layout = args.layout
    minutes = getattr(args, "minutes", None)
    deadline = time.monotonic() + 60 * minutes if minutes is not None else float("inf")

    stopped: list[str] = []

    def starts(part: str) -> bool:
        """Whether `part` is to run now: not done yet, no part before it stopped, and (where the run has a
        deadline) its time left."""
        if stopped or part not in judge_parts_left(layout, args.run):
            return False
        left, needed = (deadline - time.monotonic()) / 60, judge_part_minutes(layout, part)
        if left < needed:
            print(f"[cpu-campaign] judge {args.run}: stopping before {part} ({left:.0f} of {needed:.0f} minutes)")
            stopped.append(part)
        return not stopped

    from campaign import judging
    from campaign.lowrank import ADAPTER_FILE
    from campaign.prompts import PromptSet

    from hf_jacobi.cli import main as cli_main

    judge_file = layout.runs / "judge.parquet"
    if not judge_file.is_file():
        judge_file.parent.mkdir(parents=True, exist_ok=True)
        PromptSet.read(layout.prompts).dataset("judge").to_parquet(str(judge_file))
    settings = judging.JudgeSettings(batch_size=args.judge_batch_size, tiny=layout.tiny)
    model = None if layout.model == "embedded" else layout.model
    base = layout.judged / "base"
    weights, output = layout.adapters / args.run, layout.judged / args.run
    if args.run == SHIPPED_RUN:
        weights = reference_weights()
    if not (weights / ADAPTER_FILE).is_file():
        raise SystemExit(f"{weights} holds no adapter: train {args.run} to the end of its epoch first")
    if starts(QUALITY_FILE):
        if not (base / QUALITY_FILE).is_file():
            cli_main(settings.arguments(model, judge_file, base))
        arguments = settings.arguments(model, judge_file, output)
        cli_main([*arguments, "--adapters", f"{args.run}={weights}", "--base-results", str(base)])
    if not (output / QUALITY_FILE).is_file():  # cut before its quality part: the evaluations wait for it
        return 0
    if starts(HUMANEVAL_FILE):
        earlier = settings.base_report(layout.judged, HUMANEVAL_FILE)
        cli_main(settings.humaneval_arguments(model, weights, output, earlier))
    if starts(JUDGE_SPEED_FILE):
        earlier = settings.base_report(layout.judged, JUDGE_SPEED_FILE)
        cli_main(settings.judge_speed_arguments(model, weights, judge_file, output, earlier))
    write_judged(layout)
    return 0


def reference_weights() -> Path:
    """The package's adapter folder, where it still holds the reference the campaign judged as `shipped`
    (`scaling.SHIPPED_SHA256`): since the campaign's own point replaced it, judging `shipped` again would put the new
    weights under the old adapter's name and training."""
    from campaign import scaling
    from campaign.lowrank import ADAPTER_FILE

    from hf_jacobi import JACOBI_FORCING_WEIGHTS

    weights = JACOBI_FORCING_WEIGHTS
    with open(weights / ADAPTER_FILE, "rb") as handle:
        found = hashlib.file_digest(handle, "sha256").hexdigest()
    if found != scaling.SHIPPED_SHA256:
        raise SystemExit(
            f"the package's adapter ({weights}, SHA-256 {found[:12]}) is no longer the reference judged as "
            f"{SHIPPED_RUN!r} (base-scale-kl10-step250, SHA-256 {scaling.SHIPPED_SHA256[:12]}): its judge is committed "
            f"in judged/{SHIPPED_RUN}/; to judge it again, run from a checkout of {scaling.SHIPPED_COMMIT}"
        )
    return weights


def write_judged(layout: Layout) -> None:
    """judged.md over every judged run, and the scaling curve in the results folder (`campaign/scaling.py`), each
    with what the runs' training records say (`training_records`)."""
    from campaign import judging, scaling

    runs = sorted(p.name for p in layout.judged.iterdir() if p.is_dir() and p.name != "base")
    rows = judging.read_judged([layout.judged / "base", *(layout.judged / r for r in runs)], runs)
    training = training_records(layout, [r for r in runs if r != SHIPPED_RUN])
    columns = {run: _judged_columns(record) for run, record in training.items()}
    shipped = steps_label(scaling.SHIPPED_TRAINING)
    columns[SHIPPED_RUN] = {
        "steps": shipped,
        "judged": "the package's adapter while the campaign ran, under half an epoch",
    }
    (layout.judged / "judged.md").write_text(judging.markdown(rows, columns))
    scaling.write_curve(rows, layout.results, training)


def training_records(layout: Layout, runs: list[str]) -> dict[str, dict]:
    """What each finished run's trainer state (kept beside its adapter) and the collection order say of its training:
    optimizer steps, rows a step, epoch, tokens, and how many of its prompts are `packages` prompts. The curve's
    points differ in these as well as in data (`scaling.TRAINING_KEYS`)."""
    import pyarrow.parquet as pq

    order = pq.read_table(layout.order, columns=["prompt_id"]).column(0).to_pylist() if layout.order.is_file() else []
    prompts = pq.read_table(layout.prompts, columns=["prompt_id", "source"]).to_pylist()
    packages = {row["prompt_id"] for row in prompts if row["source"] == "packages"}
    records = {}
    for run in runs:
        state = layout.adapters / run / "trainer_state.json"
        if not state.is_file():
            continue
        kept = json.loads(state.read_text())
        records[run] = {
            "steps": kept["global_step"],
            "rows_per_step": None if layout.tiny else CPU_ROWS_PER_STEP,
            "packages_prompts": sum(prompt in packages for prompt in order[: run_size(run)[1]]),
            "epoch": kept["epoch"],
            "tokens": kept.get("num_input_tokens_seen"),
        }
    return records


def _judged_columns(record: dict) -> dict[str, str]:
    """judged.md's steps and weights columns of one run's training record."""
    seen = f", {record['tokens']:,} tokens" if record["tokens"] else ""
    return {"steps": steps_label(record), "judged": f"final adapter, epoch {record['epoch']:.2f}{seen}"}


SCALING_POINTS = (2000, 5000)
"""Trajectory counts of the scaling curve below the full set (the same recipe, one epoch each)."""
JUDGE_PART_MINUTES = {QUALITY_FILE: 45.0, HUMANEVAL_FILE: 20.0, JUDGE_SPEED_FILE: 25.0}
"""The least time left at which each part of a judge (named by the file it writes, JUDGE_FILES) starts: no part resumes, and a part cut short loses all it did.
Each is set from what that part took on the campaign's small CPUs, with a margin (judging times: docs/results.md,
"The CPU campaign")."""
BASE_PART_MINUTES = {QUALITY_FILE: 40.0, HUMANEVAL_FILE: 15.0, JUDGE_SPEED_FILE: 20.0}
"""What a part takes more where it measures the base too (its first run; later runs reuse the base's figures)."""


CURVE_VARIANT = "lora-r16-kl30"
"""The variant of the scaling curve past its first point: the shipped settings with the KL anchor to the base three
times as strong. With the shipped settings (`lora-r16`, anchor x10) the first point looped on far more judging
requests than the base, and about as many with the looping trajectories left out (`lora-r16-clean`; the counts:
docs/results.md, "The CPU campaign"): the loops come from the training, and the anchor's weight is the lever the GPU
sweep measured against them (x3 looped more than x10). The first point trains it too, so the table shows what the
stronger anchor does."""
CAPACITY_VARIANT = "lora-r64-kl30"
"""The higher-capacity variant, on the full set, with the curve's anchor."""


def plan_steps(total: int, tiny: bool) -> list[tuple[str, str | None, int]]:
    """The campaign in order, as (stage, variant or run, trajectories): the first scaling point collected, trained
    with the shipped settings and with CURVE_VARIANT and judged (the shipped adapter judged beside it), then each
    further point collected, trained with CURVE_VARIANT and judged, then CAPACITY_VARIANT on the full set."""
    points = [n for n in ((4,) if tiny else SCALING_POINTS) if n < total] + [total]
    first = points[0]
    steps: list[tuple[str, str | None, int]] = [("collect", None, first)]
    for variant in ("lora-r16", CURVE_VARIANT):
        steps += [("train", variant, first), ("judge", run_name(variant, first), first)]
    if not tiny:  # the shipped adapter judged beside the first point (a tiny model cannot load it)
        steps.insert(3, ("judge", SHIPPED_RUN, 0))
    for n in points[1:]:
        steps += [("collect", None, n), ("train", CURVE_VARIANT, n), ("judge", run_name(CURVE_VARIANT, n), n)]
    steps += [("train", CAPACITY_VARIANT, total), ("judge", run_name(CAPACITY_VARIANT, total), total)]
    return list(dict.fromkeys(steps))


def machine_order(steps: list[tuple[str, str | None, int]], bfloat16_units: bool) -> list[tuple[str, str | None, int]]:
    """The plan's steps in the order this machine runs them. Collection and training run in bfloat16 where the CPU has
    bfloat16 units, at a few times their float32 speed, and judging runs in float32 on every machine: so a machine
    with the units does every collection and training left before any judge, which waits for a run on a machine
    without them; elsewhere the plan's order. Each judge
    needs only its own training, which comes first either way."""
    return sorted(steps, key=lambda step: step[0] == "judge") if bfloat16_units else steps


def _machine_steps(layout: Layout) -> list[tuple[str, str | None, int]]:
    """`plan_steps` in this machine's `machine_order` (the tiny rehearsal keeps the plan's)."""
    units = not layout.tiny and resolve_dtype("auto") == "bfloat16"
    return machine_order(plan_steps(_plan_total(layout), layout.tiny), units)


def _done(layout: Layout, stage: str, name: str | None, n: int) -> bool:
    if stage == "collect":
        return layout.order.is_file() and _first_collected(layout, n)
    if stage == "train":
        return (layout.adapters / run_name(str(name), n) / "adapter_model.safetensors").is_file()
    return all((layout.judged / str(name) / file).is_file() for file in JUDGE_FILES)


def _minutes_needed(layout: Layout, stage: str, name: str | None) -> float:
    """The least time left at which `stage` is started: a judge's, that of its first part not done yet."""
    if stage != "judge":
        return 0.0
    part = next(iter(judge_parts_left(layout, str(name))), None)
    return 0.0 if part is None else judge_part_minutes(layout, part)


def judge_parts_left(layout: Layout, run: str) -> list[str]:
    """The parts of `run`'s judge (JUDGE_FILES) not written yet, in the order the judge runs them."""
    return [file for file in JUDGE_FILES if not (layout.judged / run / file).is_file()]


def judge_part_minutes(layout: Layout, part: str) -> float:
    """JUDGE_PART_MINUTES of `part`, with BASE_PART_MINUTES where no judged run holds the base's figures for it yet
    (0 for the tiny rehearsal, whose parts take seconds)."""
    from campaign import judging

    if layout.tiny:
        return 0.0
    if part == QUALITY_FILE:
        base_done = (layout.judged / "base" / QUALITY_FILE).is_file()
    else:
        base_done = judging.JudgeSettings(tiny=False).base_report(layout.judged, part) is not None
    return JUDGE_PART_MINUTES[part] + (0.0 if base_done else BASE_PART_MINUTES[part])


def _plan_total(layout: Layout) -> int:
    """The training prompts the plan runs to: the collection order's (written by the first collection step), else
    the prompt set's train split."""
    import pyarrow.parquet as pq

    if layout.order.is_file():
        return pq.read_metadata(layout.order).num_rows
    return sum(row["split"] == "train" for row in pq.read_table(layout.prompts, columns=["split"]).to_pylist())


def run_plan(args: argparse.Namespace) -> int:
    """Every step of `plan_steps` not done yet, in this machine's `machine_order`, within `--minutes` (each step
    resumes; a run ends at a step cut by the deadline, or before a judge that would not fit)."""
    layout = args.layout
    deadline = time.monotonic() + 60 * args.minutes if args.minutes is not None else float("inf")
    for stage, name, n in _machine_steps(layout):
        if _done(layout, stage, name, n):
            continue
        left = (deadline - time.monotonic()) / 60
        if left <= 0 or left < _minutes_needed(layout, stage, name):
            print(f"[cpu-campaign] stopping before {stage} {name or ''} {n}: {left:.0f} minutes left", flush=True)
            return 0
        minutes = None if left == float("inf") else left
        print(f"[cpu-campaign] {stage} {name or ''} {n}", flush=True)
        step = argparse.Namespace(layout=layout, minutes=minutes, **args.step_defaults)
        if stage == "collect":
            collect(argparse.Namespace(**vars(step), prompts=n))
        elif stage == "train":
            train(argparse.Namespace(**vars(step), variant=name, trajectories=n))
        else:
            judge(argparse.Namespace(**vars(step), run=name))
        if not _done(layout, stage, name, n):
            print(f"[cpu-campaign] {stage} {name or ''} {n} stopped at the deadline; run again to resume", flush=True)
            return 0
    print("[cpu-campaign] every step is done", flush=True)
    return 0


def status(args: argparse.Namespace) -> int:
    """Rows and tokens collected, the rate over the progress log, and the runs trained and judged."""
    layout = args.layout
    rows, tokens = _collected_count(layout)
    steps = (
        [json.loads(line) for line in layout.progress.read_text().splitlines()] if layout.progress.is_file() else []
    )
    timed = [s for s in steps if "note" not in s]  # a noted step was paused (the machine timed other work)
    seconds = sum(s["seconds"] for s in timed)
    report = {"rows": rows, "tokens": tokens, "logged_seconds": round(seconds), "tokens_per_s": _rates(timed)}
    report["folders"] = {folder.name: len(_collected_ids([folder])) for folder in layout.trajectory_folders}
    report["checkpoints"] = sorted(str(p.relative_to(layout.data)) for p in layout.checkpoints.glob("*/checkpoint-*"))
    report["trained"] = sorted(p.name for p in layout.adapters.iterdir()) if layout.adapters.is_dir() else []
    report["training"] = _unfinished_runs(layout, set(report["trained"]))
    report["judged"] = sorted(p.name for p in layout.judged.iterdir() if p.is_dir()) if layout.judged.is_dir() else []
    steps_left = [] if not layout.prompts.is_file() else _machine_steps(layout)
    report["plan_left"] = [" ".join(map(str, filter(None, step))) for step in steps_left if not _done(layout, *step)]
    print(json.dumps(report))
    return 0


def _rates(steps: list[dict]) -> dict[str, float]:
    """Answer tokens per second over `steps`, per machine and dtype (what the rate depends on)."""
    totals: dict[str, list[float]] = {}
    for step in steps:
        total = totals.setdefault(f"{step.get('machine', '?')}, {step['dtype']}", [0.0, 0.0])
        total[0], total[1] = total[0] + step["tokens"], total[1] + step["seconds"]
    return {key: round(tokens / seconds, 1) for key, (tokens, seconds) in totals.items() if seconds}


def _unfinished_runs(layout: Layout, trained: set[str]) -> dict[str, str]:
    """Each run not in `trained` that stopped mid-epoch, as `step/steps` of its newest checkpoint here (the ignored
    run folder) or else the committed one: what a resumed `train` starts from."""
    found: dict[str, str] = {}
    for folder in (layout.checkpoints, layout.runs):  # a run folder's own checkpoint is newer than the committed one
        for run in sorted(folder.iterdir()) if folder.is_dir() else []:
            if run.name not in trained and (newest := _newest_checkpoint(run)):
                state = json.loads((newest / "trainer_state.json").read_text())
                found[run.name] = f"{state['global_step']}/{state['max_steps']}"
    return found


def padding(args: argparse.Namespace) -> int:
    """Real and padded tokens of a training epoch on the first `--trajectories` prompts, random batches against
    batches grouped by length (`campaign/padding.py`), printed and written to `--output` when given."""
    from campaign import training
    from campaign.padding import padding_report
    from transformers import AutoTokenizer

    from hf_jacobi import resolve_model_path

    layout = args.layout
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(layout.model))
    report = padding_report(
        training.RECIPE,
        layout.trajectory_folders,
        layout.order,
        args.trajectories,
        tokenizer,
        batch := args.micro_batch or cpu_batching()[0],
        CPU_ROWS_PER_STEP // batch,
    )
    text = json.dumps(report, indent=1)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="the committed folder (default data/campaign-cpu)")
    parser.add_argument("--runs-dir", type=Path, default=None, help="the ignored folder (default runs/cpu-campaign)")
    parser.add_argument(
        "--results-dir", type=Path, default=None, help="the scaling curve's folder (default docs/results/campaign-cpu)"
    )
    parser.add_argument("--model", default="embedded", help="the base model (default: the embedded SmolLM2-135M)")
    parser.add_argument("--tiny", action="store_true", help="toy sizes for a tiny --model: the suite's rehearsal")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("collect", help="collect trajectories (resumes)")
    run.add_argument("--prompts", type=int, default=None, help="stop once this many are collected (default: all)")
    run.add_argument("--minutes", type=float, default=None, help="stop after the step running at this time")
    run.add_argument("--step", type=int, default=256, help="prompts per logged step")
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--dtype", default="auto", help="bfloat16, float32, or auto (default): bfloat16 units or not")
    run.add_argument("--threads", type=int, default=2)
    run.set_defaults(func=collect)
    fit = commands.add_parser("train", help="train one variant on the first N trajectories (resumes)")
    fit.add_argument("--variant", default="lora-r16", help="a campaign variant: lora-r16, lora-r64 or full")
    fit.add_argument("--trajectories", type=int, required=True, help="the first N prompts of the collection order")
    fit.add_argument("--minutes", type=float, default=None, help="stop (saved) after this long")
    fit.add_argument(
        "--no-commit-checkpoint", dest="commit_checkpoint", action="store_false", help="keep the checkpoint local"
    )
    fit.add_argument("extra", nargs="*", help="more `hf-jacobi train` flags, after --")
    fit.set_defaults(func=train)
    rate = commands.add_parser("judge", help="hf-jacobi quality of a finished run beside the base")
    rate.add_argument("--run", required=True, help="a run folder name under runs/cpu-campaign, e.g. lora-r16-n2000")
    rate.add_argument("--batch-size", dest="judge_batch_size", type=int, default=16, help="quality's batch")
    rate.set_defaults(func=judge)
    commands.add_parser("status", help="what is collected, trained and judged").set_defaults(func=status)
    pad = commands.add_parser("padding", help="padded tokens of a training epoch, random against grouped batches")
    pad.add_argument("--trajectories", type=int, required=True, help="the first N prompts of the collection order")
    pad.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    pad.add_argument(
        "--micro-batch",
        type=int,
        choices=(1, 2, 4, 8, 16, 32),
        default=None,
        help="rows a micro-batch (default: what training runs on this CPU, 4 with bfloat16 units, else 2)",
    )
    pad.set_defaults(func=padding)
    whole = commands.add_parser("run", help="every step of the campaign not done yet, in order (resumes)")
    whole.add_argument("--minutes", type=float, default=None, help="this run's time (default: to the end)")
    whole.add_argument(
        "--dtype", default="auto", help="collection dtype (default auto: bfloat16 where the CPU has its units)"
    )
    whole.add_argument("--threads", type=int, default=2)
    whole.add_argument("--batch-size", type=int, default=64, help="collection batch")
    whole.set_defaults(func=run_plan)
    args = parser.parse_args(argv)
    if args.command == "run":  # what each step takes besides its own arguments
        args.step_defaults = {
            "dtype": args.dtype,
            "threads": args.threads,
            "batch_size": args.batch_size,
            "step": 256 if not args.tiny else 4,
            "commit_checkpoint": True,
            "judge_batch_size": 16,
            "extra": [],
        }
    args.layout = Layout(
        **{k: v for k, v in (("data", args.data_dir), ("runs", args.runs_dir), ("results", args.results_dir)) if v},
        model=args.model,
        tiny=args.tiny,
    )
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
