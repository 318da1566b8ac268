"""The `hf-jacobi` command line: try Jacobi decoding on one prompt, or measure it against greedy on HumanEval.

Every subcommand that decodes checks the claim the project rests on, that Jacobi decoding returns exactly greedy's
tokens, and exits with 1 when it does not, so a broken build cannot print a good-looking speedup. Forwards are counted
after the prefill on both sides: the prefill yields the first new token either way, so greedy needs new tokens - 1
decoding forwards and Jacobi reports its own count in `forward_passes`.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import constants as hub_constants
from tqdm import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TextStreamer,
)

from hf_jacobi import enable_jacobi, load_default_model
from hf_jacobi.bench.common import (
    MissingDataError,
    eos_token_ids,
    generated_tokens,
    humaneval_prompts,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    timed,
)
from hf_jacobi.models import DEFAULT_MODEL_NAME, ModelNotAvailableError, set_padding

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(RuntimeError):
    """A problem the user can fix (a missing package, too many prompts): reported in one line, no traceback."""


# --- argument types: reject bad values at the boundary, naming them -------------------------------------------------


def checkpoint_dir(value: str) -> Path:
    """A local `save_pretrained` folder. Checked here because nothing can be downloaded, so a typo in the path would
    otherwise surface as a confusing hub lookup error deep inside from_pretrained."""
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value!r} does not exist (expected a local checkpoint folder)")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not a folder (expected a local checkpoint folder)")
    if not (path / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"{value!r} has no config.json (expected a save_pretrained folder)")
    return path


# --- shared helpers --------------------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    """A Jacobi-enabled model with what the output needs to say about it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str

    @property
    def eos_ids(self) -> set[int]:
        return eos_token_ids(self.model.generation_config)

    def describe(self, dtype: str) -> str:
        return f"model: {self.name} | device: {self.model.device} | dtype: {dtype}"


def load_model(path: Path | None, dtype: str) -> LoadedModel:
    """The embedded SmolLM2-135M-Instruct, or a local checkpoint set up the same way (left padding, a pad token)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if path is None:
        model, tokenizer = load_default_model(dtype=DTYPES[dtype], device=device)
        name = f"{DEFAULT_MODEL_NAME} (embedded)"
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation="sdpa")
        model = model.to(device).eval()
        set_padding(model, tokenizer)
        tokenizer.padding_side = "left"  # generation appends on the right, so batches must be padded on the left
        name = str(path)
    return LoadedModel(enable_jacobi(model), tokenizer, name)


def new_token_counts(sequences: torch.Tensor, prompt_width: int, eos_ids: set[int]) -> list[int]:
    """Tokens each row generated, up to and including its first EOS; the padding greedy adds after it is not counted,
    which gives greedy the smallest honest forward count when rows of a batch finish at different times."""
    return [len(generated_tokens(row, eos_ids)) for row in sequences[:, prompt_width:]]


def per_forward(tokens: int, forwards: int) -> str:
    """Tokens per forward, or n/a when the prefill alone produced everything (max-new-tokens 1 or an instant EOS)."""
    return f"{tokens / forwards:.2f}" if forwards else "n/a"


def warm_up(loaded: LoadedModel, inputs: dict[str, torch.Tensor]) -> None:
    """One short untimed generate, so that one-off start-up costs are not charged to whichever mode runs first."""
    loaded.model.generate(**inputs, max_new_tokens=2, do_sample=False)


# --- generate --------------------------------------------------------------------------------------------------------


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, chat: bool) -> dict[str, torch.Tensor]:
    """Instruct models answer a bare prompt poorly, so the chat template is used whenever the tokenizer has one."""
    if chat and tokenizer.chat_template:
        messages = [{"role": "user", "content": prompt}]
        encoded = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    else:
        encoded = tokenizer(prompt, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def run_generate(args: argparse.Namespace) -> int:
    """Streams a Jacobi answer to stdout and summarizes its cost; with --compare, checks it against greedy."""
    loaded = load_model(args.model, args.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    inputs = {
        k: v.to(model.device) for k, v in encode_prompt(tokenizer, args.prompt, not args.no_chat_template).items()
    }
    prompt_width = inputs["input_ids"].shape[1]
    warm_up(loaded, inputs)

    if args.sample and args.compare:
        raise CliError("--compare checks that Jacobi equals greedy decoding; it cannot be combined with --sample")
    sampling = (
        {"do_sample": True, "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
        if args.sample
        else {"do_sample": False}
    )
    torch.manual_seed(args.seed)
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    jacobi, jacobi_s = timed(
        lambda: model.generate(
            **inputs,
            max_new_tokens=args.max_new_tokens,
            decoding="jacobi",
            return_dict_in_generate=True,
            streamer=streamer,
            **sampling,
            **jacobi_settings(args),
        )
    )
    tokens = new_token_counts(jacobi.sequences, prompt_width, loaded.eos_ids)[0]
    forwards = int(jacobi.forward_passes[0])
    print(summary("jacobi", tokens, forwards, jacobi_s) + f" ({describe_settings(args)})")
    if not args.compare:
        return 0

    greedy, greedy_s = timed(lambda: model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False))
    greedy_tokens = new_token_counts(greedy, prompt_width, loaded.eos_ids)[0]
    print(summary("greedy", greedy_tokens, max(greedy_tokens - 1, 0), greedy_s))
    identical = greedy.shape == jacobi.sequences.shape and torch.equal(greedy, jacobi.sequences)
    print(f"identical: {'yes' if identical else 'no'}")
    return 0 if identical else 1


def jacobi_settings(args: argparse.Namespace) -> dict[str, int]:
    """The jacobi_* generate() kwargs the command line sets."""
    return {
        "jacobi_block_size": args.block_size,
        "jacobi_num_blocks": args.num_blocks,
        "jacobi_ngram_pool_size": args.ngram_pool_size,
    }


def describe_settings(args: argparse.Namespace) -> str:
    return f"block size {args.block_size}, blocks {args.num_blocks}, n-gram pool {args.ngram_pool_size}"


def summary(label: str, tokens: int, forwards: int, seconds: float) -> str:
    return (
        f"{label}: {tokens} new tokens, {forwards} forwards (prefill excluded), "
        f"{per_forward(tokens, forwards)} tokens/forward, {tokens / seconds:.1f} tokens/s"
    )


# --- demo ------------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    task_id: str
    tokens: int
    greedy_forwards: int
    jacobi_forwards: int
    identical: bool


def run_demo(args: argparse.Namespace) -> int:
    """Greedy vs Jacobi on HumanEval completions: a Markdown table of forwards per prompt, and a lossless check."""
    try:
        prompts = humaneval_prompts(args.prompts)
    except MissingDataError as error:
        raise CliError(str(error)) from None
    if len(prompts) < args.prompts:
        raise CliError(f"--prompts {args.prompts}: HumanEval has only {len(prompts)} problems")
    loaded = load_model(args.model, args.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    print(f"# hf-jacobi demo: greedy vs Jacobi decoding on HumanEval\n\n{loaded.describe(args.dtype)}")
    print(
        f"settings: first {args.prompts} HumanEval prompts (raw completion, no chat template), "
        f"{describe_settings(args)}, max new tokens {args.max_new_tokens}, batch {args.batch}\n"
        "forwards are decoding forwards, prefill excluded (greedy: new tokens - 1)\n"
    )

    rows: list[Row] = []
    greedy_s = jacobi_s = 0.0
    warmed = False
    progress = tqdm(total=len(prompts), desc="prompts", unit="prompt", file=sys.stderr)
    for start in range(0, len(prompts), args.batch):
        chunk = prompts[start : start + args.batch]
        encoded = tokenizer([prompt for _, prompt in chunk], return_tensors="pt", padding=True)
        inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        if not warmed:
            warm_up(loaded, inputs)
            warmed = True
        greedy, seconds = timed(
            lambda inputs=inputs: model.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False)
        )
        greedy_s += seconds
        jacobi, seconds = timed(
            lambda inputs=inputs: model.generate(
                **inputs,
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                decoding="jacobi",
                return_dict_in_generate=True,
                **jacobi_settings(args),
            )
        )
        jacobi_s += seconds
        same_shape = greedy.shape == jacobi.sequences.shape
        tokens = new_token_counts(greedy, inputs["input_ids"].shape[1], loaded.eos_ids)
        for i, (task_id, _) in enumerate(chunk):
            identical = same_shape and torch.equal(greedy[i], jacobi.sequences[i])
            rows.append(Row(task_id, tokens[i], max(tokens[i] - 1, 0), int(jacobi.forward_passes[i]), identical))
        progress.update(len(chunk))
    progress.close()

    print(demo_report(rows, greedy_s, jacobi_s))
    return 0 if all(row.identical for row in rows) else 1


def demo_report(rows: list[Row], greedy_s: float, jacobi_s: float) -> str:
    """The Markdown table, the totals, and the verdict on losslessness."""
    lines = [
        "| task_id | new tokens | forwards greedy | forwards Jacobi | tokens/forward (Jacobi) | identical |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.task_id} | {row.tokens} | {row.greedy_forwards} | {row.jacobi_forwards} | "
            f"{per_forward(row.tokens, row.jacobi_forwards)} | {'yes' if row.identical else 'no'} |"
        )
    tokens = sum(row.tokens for row in rows)
    greedy = sum(row.greedy_forwards for row in rows)
    jacobi = sum(row.jacobi_forwards for row in rows)
    saved = f"{100 * (1 - jacobi / greedy):.1f}%" if greedy else "n/a"
    all_identical = all(row.identical for row in rows)
    lines.append(
        f"| **total** | {tokens} | {greedy} | {jacobi} | {per_forward(tokens, jacobi)} | "
        f"{'yes' if all_identical else 'no'} |"
    )
    lines += [
        "",
        f"total: {tokens} new tokens, {greedy} greedy forwards, {jacobi} Jacobi forwards, "
        f"{per_forward(tokens, jacobi)} tokens per Jacobi forward, forwards saved {saved}",
        f"wall time: greedy {greedy_s:.2f} s ({tokens / greedy_s:.1f} tokens/s), "
        f"Jacobi {jacobi_s:.2f} s ({tokens / jacobi_s:.1f} tokens/s)",
        f"all outputs identical to greedy: {'yes' if all_identical else 'NO'}",
    ]
    return "\n".join(lines)


# --- bench -----------------------------------------------------------------------------------------------------------


def run_bench_command(args: argparse.Namespace) -> int:
    """Greedy AR baselines and Jacobi configurations on one task: table and notes printed, JSON/Markdown/PNG written."""
    from hf_jacobi.bench import report
    from hf_jacobi.bench.runner import bench_settings, run_bench
    from hf_jacobi.bench.tasks import load_task

    try:  # the task first: a bad --data is reported before a model is loaded
        task = load_task(
            args.task,
            data=args.data,
            split=args.split,
            limit=args.limit,
            chat=args.chat,
            timeout_s=args.timeout,
            workers=args.workers,
        )
    except (MissingDataError, FileNotFoundError, ValueError) as error:
        raise CliError(str(error)) from None
    loaded = load_model(args.model, args.dtype)
    settings = bench_settings(args.block_sizes, args.variants, compiled_baseline=not args.no_compile)
    run = run_bench(loaded.model, loaded.tokenizer, task, settings, args.max_new_tokens, args.batch_size)
    rows = report.summarize(run)
    table = report.markdown_table(rows, task.metric)
    notes = report.notes(run, rows, args.batch_size, args.max_new_tokens)
    print(f"# hf-jacobi bench: {task.name}\n\n{loaded.describe(args.dtype)}\n\n{table}\n\n{notes}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "hf-jacobi " + " ".join(args.argv),
        "model": loaded.name,
        "dtype": args.dtype,
        "task": task.name,
        "metric": task.metric,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
    }
    report.write_json(args.output_dir / "bench.json", run, rows, meta)
    (args.output_dir / "bench.md").write_text(f"{table}\n\n{notes}\n", encoding="utf-8")
    report.plot(args.output_dir / "bench.png", rows, f"{task.name}, {loaded.name}, batch {args.batch_size}")
    print(f"\nwrote {args.output_dir}/bench.json, bench.md, bench.png")
    lossless = all(row["identical"] == row["samples"] for row in rows)
    if not lossless:
        print("error: some outputs differ from greedy (see identical to greedy)", file=sys.stderr)
    return 0 if lossless else 1


# --- tune ------------------------------------------------------------------------------------------------------------


def run_tune_command(args: argparse.Namespace) -> int:
    """Measures, chooses and writes the Jacobi defaults (or greedy) into a generation config."""
    from hf_jacobi.bench import tune
    from hf_jacobi.data.prompts import stdlib_prompts

    if args.model is None and args.output_dir is None:
        raise CliError(
            "the embedded model's cache is checksummed and must not be edited: give --output-dir for its tuned "
            "generation_config.json, or tune a local --model folder"
        )
    target = args.output_dir or args.model
    try:
        candidates = tune.candidate_grid(args.block_sizes, args.num_blocks, args.pool_sizes)
    except ValueError as error:
        raise CliError(str(error)) from None
    loaded = load_model(args.model, args.dtype)
    texts = [row["messages"][0]["content"] for row in stdlib_prompts(limit=args.prompts)]
    prompts = [
        {k: v.to(loaded.model.device) for k, v in encode_prompt(loaded.tokenizer, text, chat=True).items()}
        for text in texts
    ]
    result = tune.tune(loaded.model, prompts, candidates, args.max_new_tokens, repeats=args.repeats)
    config = tune.write_generation_config(copy.deepcopy(loaded.model.generation_config), result.choice)
    target.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(target)
    report_path = tune.save_report(target, result)
    print(tune.summary(result))
    print(f"wrote {target / 'generation_config.json'} and {report_path}")
    return 0


# --- push ------------------------------------------------------------------------------------------------------------


def run_push_command(args: argparse.Namespace) -> int:
    from hf_jacobi.hub.push import publish_checkpoint

    settings = {
        "jacobi_block_size": args.block_size,
        "jacobi_num_blocks": args.num_blocks,
        "jacobi_ngram_pool_size": args.ngram_pool_size,
    }
    try:
        result = publish_checkpoint(
            args.checkpoint,
            args.repo_id,
            base_model=args.base_model,
            datasets=args.dataset,
            training_data=args.training_data,
            recipe_files=args.recipe,
            bench_json=args.bench,
            license=args.license,
            jacobi_settings=settings,
            template=args.template,
            output_dir=args.output_dir,
            dry_run=args.dry_run,
            private=args.private,
            revision=args.revision,
            token=args.token,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        raise CliError(str(error)) from None
    shown = ", ".join(f"{k}={v}" for k, v in result.jacobi_settings.items())
    if args.dry_run:
        print(f"rendered {args.repo_id} into {result.folder} (not uploaded); Jacobi defaults: {shown}")
    else:
        print(f"pushed to {result.url}; Jacobi defaults: {shown}")
    return 0


# --- entry point -----------------------------------------------------------------------------------------------------


def add_model_arguments(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
    parser.add_argument(
        "--model", type=checkpoint_dir, default=None, help="local checkpoint folder (default: embedded SmolLM2-135M)"
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    parser.add_argument("--block-size", type=positive_int, default=16, help="Jacobi block size n (default 16)")
    parser.add_argument(
        "--num-blocks", type=positive_int, default=1, help="Jacobi blocks in flight at most (default 1)"
    )
    parser.add_argument(
        "--ngram-pool-size",
        type=non_negative_int,
        default=0,
        help="rejection recycling: n-grams kept per key, 0 = off (default 0)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=max_new_tokens,
        help=f"tokens to generate at most (default {max_new_tokens})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-jacobi", description="Lossless Jacobi decoding for Hugging Face LMs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    generate = commands.add_parser("generate", help="stream one answer with Jacobi decoding")
    generate.add_argument("prompt", help="the user message (or raw text with --no-chat-template)")
    add_model_arguments(generate, max_new_tokens=128)
    generate.add_argument("--compare", action="store_true", help="also run greedy and check the outputs are identical")
    generate.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    generate.add_argument("--sample", action="store_true", help="sample (exactly as generate would) instead of greedy")
    generate.add_argument("--temperature", type=positive_float, default=1.0, help="with --sample (default 1.0)")
    generate.add_argument("--top-p", type=probability, default=1.0, help="with --sample (default 1.0)")
    generate.add_argument("--top-k", type=non_negative_int, default=0, help="with --sample, 0 = off (default 0)")
    generate.add_argument("--seed", type=int, default=0, help="torch seed, for reproducible sampling (default 0)")
    generate.set_defaults(handler=run_generate)

    demo = commands.add_parser("demo", help="greedy vs Jacobi forwards on HumanEval prompts")
    demo.add_argument("--prompts", type=positive_int, default=4, help="first N HumanEval prompts (default 4)")
    demo.add_argument("--batch", type=positive_int, default=1, help="prompts per left-padded batch (default 1)")
    add_model_arguments(demo, max_new_tokens=64)
    demo.set_defaults(handler=run_demo)

    add_bench_parser(commands)
    add_tune_parser(commands)
    add_push_parser(commands)

    # Listed for --help; their flags are parsed by TRL's parser (see run_recipe_step).
    commands.add_parser("collect", help="record Jacobi trajectories over a prompt set (hf-jacobi collect --help)")
    commands.add_parser("train", help="Jacobi Forcing training from a YAML recipe (hf-jacobi train --help)")
    commands.add_parser("evaluate", help="tokens per forward before and after training (hf-jacobi evaluate --help)")
    return parser


def add_bench_parser(commands) -> None:
    from hf_jacobi.bench.common import VARIANTS
    from hf_jacobi.bench.tasks import TASKS

    bench = commands.add_parser("bench", help="pass@1/accuracy, tokens per forward and tokens/s: AR vs Jacobi")
    bench.add_argument("--task", choices=TASKS, default="humaneval", help="benchmark (default humaneval)")
    bench.add_argument("--data", default=None, help="gsm8k/math: a local .json/.jsonl/.parquet file or a Hub dataset")
    bench.add_argument("--split", default="test", help="dataset split for a Hub dataset (default test)")
    bench.add_argument("--limit", type=positive_int, default=None, help="first N problems only (default all)")
    bench.add_argument(
        "--model", type=checkpoint_dir, default=None, help="local checkpoint folder (default: embedded SmolLM2-135M)"
    )
    bench.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    bench.add_argument(
        "--block-sizes", type=positive_int, nargs="+", default=[8, 16, 32], help="Jacobi block sizes (default 8 16 32)"
    )
    bench.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["plain", "both"],
        help="Jacobi variants per block size: " + "; ".join(f"{k} = {v or 'block only'}" for k, v in VARIANTS.items()),
    )
    bench.add_argument("--batch-size", type=positive_int, default=1, help="prompts per left-padded batch (default 1)")
    bench.add_argument("--max-new-tokens", type=positive_int, default=256, help="token budget (default 256)")
    bench.add_argument(
        "--no-compile", action="store_true", help="skip the static-cache + torch.compile AR baseline (slow to build)"
    )
    bench.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="feed prompts through the chat template (default: no for humaneval, yes for gsm8k/math)",
    )
    bench.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds a HumanEval sample may run (default 10)"
    )
    bench.add_argument("--workers", type=positive_int, default=None, help="parallel HumanEval test processes")
    bench.add_argument(
        "--output-dir",
        type=Path,
        default=Path("bench_results"),
        help="where bench.json/.md/.png go (default bench_results)",
    )
    bench.set_defaults(handler=run_bench_command)


def add_tune_parser(commands) -> None:
    from hf_jacobi.bench.tune import DEFAULT_BLOCK_SIZES, DEFAULT_NUM_BLOCKS, DEFAULT_POOL_SIZES

    tune = commands.add_parser("tune", help="measure this hardware and write the fastest Jacobi settings (or greedy)")
    tune.add_argument("--model", type=checkpoint_dir, default=None, help="local checkpoint folder (written in place)")
    tune.add_argument(
        "--output-dir", type=Path, default=None, help="write generation_config.json here instead of into --model"
    )
    tune.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="weights dtype (default float32)")
    tune.add_argument("--prompts", type=positive_int, default=4, help="sample prompts (stdlib set, default 4)")
    tune.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per sample (default 64)")
    tune.add_argument("--block-sizes", type=positive_int, nargs="+", default=list(DEFAULT_BLOCK_SIZES))
    tune.add_argument("--num-blocks", type=positive_int, nargs="+", default=list(DEFAULT_NUM_BLOCKS))
    tune.add_argument("--pool-sizes", type=non_negative_int, nargs="+", default=list(DEFAULT_POOL_SIZES))
    tune.add_argument("--repeats", type=positive_int, default=5, help="timed repeats per roofline point (default 5)")
    tune.set_defaults(handler=run_tune_command)


def add_push_parser(commands) -> None:
    push = commands.add_parser(
        "push", help="publish a checkpoint with its model card, Jacobi defaults and custom_generate"
    )
    push.add_argument("checkpoint", type=Path, help="a save_pretrained folder (full model or LoRA adapter)")
    push.add_argument("--repo-id", required=True, help="the Hub repository, e.g. your-name/model-jacobi-forcing")
    push.add_argument("--base-model", default=None, help="the model it was trained from (read from an adapter)")
    push.add_argument("--dataset", action="append", default=[], help="a Hub dataset it was trained on (repeatable)")
    push.add_argument("--training-data", default=None, help="one line about the training data, for the card")
    push.add_argument("--recipe", type=Path, action="append", default=[], help="a recipe file to show (repeatable)")
    push.add_argument("--bench", type=Path, default=None, help="bench.json from hf-jacobi bench, for the card's table")
    push.add_argument("--license", default="apache-2.0", help="license id for the card (default apache-2.0)")
    push.add_argument("--template", type=Path, default=None, help="a model card template instead of the bundled one")
    push.add_argument("--block-size", type=positive_int, default=None, help="override jacobi_block_size")
    push.add_argument("--num-blocks", type=positive_int, default=None, help="override jacobi_num_blocks")
    push.add_argument("--ngram-pool-size", type=non_negative_int, default=None, help="override jacobi_ngram_pool_size")
    push.add_argument("--output-dir", type=Path, default=None, help="keep the rendered folder here")
    push.add_argument("--dry-run", action="store_true", help="render into --output-dir without uploading")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.add_argument("--revision", default=None, help="branch to push to (created if missing)")
    push.add_argument("--token", default=None, help="Hub token (default: the stored login or HF_TOKEN)")
    push.set_defaults(handler=run_push_command)


def use_offline_hub() -> None:
    """Nothing can be downloaded here, so default to offline mode instead of waiting on network timeouts.

    huggingface_hub reads HF_HUB_OFFLINE once, when imported, and `import hf_jacobi` has already imported it, so its
    constant is updated too.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if os.environ["HF_HUB_OFFLINE"].strip().upper() in {"1", "ON", "YES", "TRUE"}:
        hub_constants.HF_HUB_OFFLINE = True


RECIPE_STEPS = ("collect", "train", "evaluate")
"""Subcommands whose flags come from dataclasses and YAML recipes (`--config`), parsed by TRL's parser."""


def run_recipe_step(step: str, argv: list[str]) -> int:
    from hf_jacobi.training import scripts

    handler = {"collect": scripts.run_collect, "train": scripts.run_train, "evaluate": scripts.run_evaluate}[step]
    try:
        return handler(argv)
    except (ValueError, FileNotFoundError, ModelNotAvailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand and returns its exit code: 0 ok, 1 Jacobi differed from greedy or setup failed, 2 usage."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in RECIPE_STEPS:
        use_offline_hub()
        return run_recipe_step(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command != "push":  # the only subcommand that talks to the Hub
        use_offline_hub()
    torch.manual_seed(0)
    try:
        with torch.inference_mode():
            return args.handler(args)
    except (CliError, ModelNotAvailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
