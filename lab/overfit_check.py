"""The overfit check on a real model: can Jacobi Forcing's loss teach a model to accept many tokens per forward at all?

Trained hard (no anchor, a high learning rate, many epochs) on the trajectories of a few prompts, each from several
initial drafts, with every block noised (block 0 included: the `random` schedule), a model should learn to jump from
those states to their fixed points: the acceptance probe's depth-0 rate on the training states near 0.8 or more, and
plain Jacobi on the same prompts at 2.5 tokens per forward or more. Where the rate gets there and tokens per forward
does not, the states decoding meets are not the ones trained on: the probe on the trained model's own trajectories of
the same prompts says so. tests/test_overfit.py is the same check on a tiny model, in seconds.

Every step resumes from what its folder holds (collection by prompt, training from its last checkpoint), so a run cut
short is started again with the same command. Over the public API only:

    python lab/overfit_check.py --output-dir runs/overfit --json docs/results/probe/overfit.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import datasets
import torch

from hf_jacobi import (
    JacobiConfig,
    JacobiForcingConfig,
    JacobiForcingTrainer,
    collect_trajectories,
    load_default_model,
    load_model,
    load_prompts,
    load_trajectories,
    probe_acceptance,
)


def with_drafts(model, tokenizer, prompts: datasets.Dataset, folder: Path, seeds: int, args) -> datasets.Dataset:
    """Each prompt's trajectories from `seeds` initial drafts, one row per draft (ids made unique per draft); the
    later drafts iterate to the first draft's answers (the model's own), so that greedy generation runs once."""
    parts = []
    for seed in range(seeds):
        part = folder / f"draft{seed}"
        own = {} if seed == 0 else {"answers": folder / "draft0", "answers_of": "embedded"}
        collect_trajectories(model, tokenizer, prompts, part, block_size=args.block_size,
                             max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, draft_seed=seed,
                             method="parallel", model_id="embedded", **own)  # fmt: skip
        rows = load_trajectories(part)
        parts.append(rows.map(lambda row, s=seed: {"prompt_id": f"{row['prompt_id']}#draft{s}"}))
    return datasets.concatenate_datasets(parts)


@torch.inference_mode()
def plain_jacobi(model, rows: datasets.Dataset, block_size: int, max_new_tokens: int) -> dict:
    """Plain Jacobi on each distinct prompt of `rows`, batch 1: tokens per forward, and whether every answer is
    greedy's (float32)."""
    settings = JacobiConfig(block_size=block_size, greedy_devices=()).to_generate_kwargs()
    tokens = forwards = identical = 0
    prompts = list(dict.fromkeys(tuple(ids) for ids in rows["prompt_ids"]))
    for ids in prompts:
        inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        greedy = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True,
                             **settings)  # fmt: skip
        new = out.sequences.shape[1] - len(ids)
        tokens, forwards = tokens + new, forwards + int(out.forward_passes[0])
        identical += int(torch.equal(out.sequences, greedy))
    return {"prompts": len(prompts), "tokens_per_forward": tokens / forwards, "identical_to_greedy": identical}


def train(model, tokenizer, rows: datasets.Dataset, folder: Path, args) -> float:
    """The hard training, resumed from the folder's last checkpoint; seconds spent in this call."""
    config = JacobiForcingConfig(
        output_dir=str(folder),
        noise_schedule="random",
        base_kl_weight=0.0,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_ratio=0.0,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.train_batch_size,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=1,
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        bf16=args.bf16,
        eval_probe_trajectories=0,
        seed=args.seed,
    )
    trainer = JacobiForcingTrainer(model, args=config, train_dataset=rows, processing_class=tokenizer)
    resume = any(folder.glob("checkpoint-*"))
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(str(folder / "final"))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True, help="trajectories, checkpoints (an ignored folder)")
    parser.add_argument("--json", type=Path, required=True, help="where the judged figures go")
    parser.add_argument("--prompts", type=int, default=16, help="packages training prompts (default 16)")
    parser.add_argument("--drafts", type=int, default=3, help="initial drafts per prompt (default 3)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8, help="collection batch (default 8)")
    parser.add_argument("--train-batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="full fine-tune, constant (default 1e-4)")
    parser.add_argument("--epochs", type=float, default=40)
    parser.add_argument("--save-steps", type=int, default=40)
    parser.add_argument(
        "--bf16", action=argparse.BooleanOptionalAction, default=True, help="CPU autocast (default on)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model, tokenizer = load_default_model()  # float32: the probe and decoding below are exact
    prompts = load_prompts("packages", split="train", limit=args.prompts)
    rows = with_drafts(model, tokenizer, prompts, args.output_dir / "trajectories", args.drafts, args)
    report: dict = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    before = args.output_dir / "before.json"  # the untrained model's figures, kept for a resumed run
    if not before.is_file():
        figures = {"probe": probe_acceptance(model, rows).to_dict(),
                   "plain": plain_jacobi(model, rows, args.block_size, args.max_new_tokens)}  # fmt: skip
        before.write_text(json.dumps(figures), encoding="utf-8")
    report["before"] = json.loads(before.read_text(encoding="utf-8"))
    report["train_seconds_this_call"] = train(model, tokenizer, rows, args.output_dir / "run", args)
    # the trained weights as saved, loaded afresh in float32: the figures below are float32's, where Jacobi decoding
    # is exact, and they are those of the model a user would load from the folder
    model, tokenizer = load_model(str(args.output_dir / "run" / "final"))
    report["after"] = {"probe": probe_acceptance(model, rows).to_dict(),
                       "plain": plain_jacobi(model, rows, args.block_size, args.max_new_tokens)}  # fmt: skip
    # its own states from initial drafts it was not trained on (the next seed): on a trained seed's drafts, which a
    # model trained this hard has memorised, the probe reads more than decoding gets (tests/test_overfit.py)
    fresh = args.drafts
    own = collect_trajectories(model, tokenizer, prompts, args.output_dir / f"own-seed{fresh}",
                               block_size=args.block_size, max_new_tokens=args.max_new_tokens,
                               batch_size=args.batch_size, method="parallel", draft_seed=fresh,
                               model_id="overfit-final")  # fmt: skip
    report["after"]["probe_own_states"] = probe_acceptance(model, load_trajectories(own)).to_dict()
    report["after"]["own_states_draft_seed"] = fresh
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("before", "after")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
