"""`hf-jacobi collect`: record the model's Jacobi trajectories over a prompt set (the first step of a recipe)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import ModelConfig

from ..adapters import apply_adapter
from ..atomic import check_writable
from ..data.collection import check_stop_after_seconds, collect_trajectories, load_trajectories
from ..data.prompts import PROMPT_SOURCES
from ..data.shards import list_shards
from ..loading import EMBEDDED, process_state
from .recipe_args import PromptArguments, check_model_arguments, load_model_and_tokenizer, parse_step_arguments


@dataclass
class CollectArguments(PromptArguments):
    output_dir: str = field(default="trajectories", metadata={"help": "Folder of the trajectory shards."})
    block_size: int = field(default=16, metadata={"help": "Jacobi block size n of the recorded trajectories."})
    max_new_tokens: int = field(default=256, metadata={"help": "Tokens to generate per prompt."})
    batch_size: int = field(default=1, metadata={"help": "Prompts decoded together per process."})
    shard_size: int = field(
        default=64,
        metadata={
            "help": "Rows per parquet file (layout only: every batch is on disk as soon as it finishes; the file being "
            "filled is rewritten each batch, so very large shards cost more writes)."
        },
    )
    max_prompt_tokens: int | None = field(default=None, metadata={"help": "Refuse prompts longer than this."})
    draft_seed: int = field(default=0, metadata={"help": "Seed of the random initial drafts."})
    method: str = field(
        default="sequential",
        metadata={
            "help": "How trajectories are recorded: 'sequential' (the decoding loop's own states, one block of one "
            "prompt per forward) or 'parallel' (greedy answers first, then every block's Jacobi iterations of a batch "
            "at once: several times faster with a large --batch_size, e.g. 64 on a CPU)",
            "choices": ["sequential", "parallel"],
        },
    )
    adapter: str | None = field(
        default=None,
        metadata={
            "help": "A LoRA adapter folder (as `hf-jacobi train` writes) merged into the model before collecting: "
            "a second round collects the round-1 model's own trajectories"
        },
    )

    stop_after_seconds: float | None = field(
        default=None,
        metadata={
            "help": "Start no batch after this many seconds (what is collected stays; the same command goes on "
            "where it stopped), to fit a time slot"
        },
    )
    answers: str | None = field(
        default=None,
        metadata={
            "help": "A trajectory folder whose answers the recorded states converge to, instead of this model's own "
            "greedy ones (--method parallel): a trained model's states on the base's answers"
        },
    )

    def __post_init__(self) -> None:
        """Refuses a time limit a collection could not keep, before any model loads."""
        check_stop_after_seconds(self.stop_after_seconds)

    def model_id(self, model_args: ModelConfig) -> str:
        """What the trajectories come from, recorded in the folder so that a resumed collection cannot mix models."""
        name = model_args.model_name_or_path or EMBEDDED
        return name if self.adapter is None else f"{name} + {self.adapter}"


def run_collect(argv: list[str]) -> int:
    args, model_args = parse_step_arguments("collect", (CollectArguments, ModelConfig), argv)
    check_model_arguments(model_args, adapter=args.adapter)
    source = PROMPT_SOURCES.get(args.prompts)
    if source is not None and source.evaluation_only:
        raise ValueError(
            f"prompt source {args.prompts!r} is an evaluation set: collecting training trajectories from it would leak "
            "it into the model; use a training source such as 'packages' or 'stdlib'"
        )
    check_writable(args.output_dir, folder=True, what="--output_dir")
    if args.answers is not None and args.method != "parallel":
        raise ValueError(f"--answers {args.answers} is iterated to by --method parallel only, got {args.method!r}")
    prompts = args.load()  # a bad prompt source is reported before the model loads
    state = process_state()
    model, tokenizer = load_model_and_tokenizer(model_args, device=state.device)
    if args.adapter is not None:
        model = apply_adapter(model, args.adapter)
    with torch.inference_mode():
        output = collect_trajectories(
            model,
            tokenizer,
            prompts,
            args.output_dir,
            block_size=args.block_size,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            shard_size=args.shard_size,
            chat=args.chat_template,
            max_prompt_tokens=args.max_prompt_tokens,
            draft_seed=args.draft_seed,
            model_id=args.model_id(model_args),
            adapter=args.adapter,
            method=args.method,
            answers=args.answers,
            stop_after_seconds=args.stop_after_seconds,
        )
    if state.is_main_process:
        collected = load_trajectories(output) if list_shards(output) else None
        if collected is not None:
            blocks = sum(len(s) for s in collected["states"])
            states = sum(len(b) for s in collected["states"] for b in s)
            print(f"{len(collected)} trajectories, {blocks} blocks, {states} states in {output}")
        left = len(set(prompts["prompt_id"]) - set(collected["prompt_id"] if collected is not None else []))
        if left > 0:
            print(f"{left} prompts left: run the same command again to go on")
    return 0
