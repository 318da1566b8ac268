"""What every `hf-jacobi` command shares: error reporting, the model loader, prompt encoding, the shared flags and
the one-line summaries (argument types are in `arg_types`). Commands live one per module beside this one, each with
its parser and its runner."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..atomic import OutputPathError, check_writable
from ..data.chat import encode_chat
from ..decoding.config import JacobiConfig
from ..gguf_cache import DEFAULT_MODEL_NAME, ModelNotAvailableError
from ..loading import DTYPES, EMBEDDED, ModelLoadError, eos_token_ids
from ..loading import load_model as _load_model
from ..measurement import Decoded, decode
from ..quality.runs import QualityRunError
from .arg_types import AUTO_DTYPE, model_name, non_negative_int, positive_int

DEBUG_ENV = "HF_JACOBI_DEBUG"


class CliError(RuntimeError):
    """A problem the user can fix (a missing package, too many prompts): reported in one line, no traceback."""


USER_ERRORS = (CliError, ModelNotAvailableError, ModelLoadError, OutputPathError, QualityRunError)
"""What every command reports in one line (`main` for the argparse commands, `recipe.run_step` for the recipe steps):
inputs the user can fix, a model that does not load among them. Anything else is a bug and keeps its traceback."""


def debug_requested(argv: list[str]) -> bool:
    """`hf-jacobi --debug ...` or HF_JACOBI_DEBUG=1: errors show their traceback."""
    flag = os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    return flag or argv[:1] == ["--debug"]


def report_error(error: BaseException, debug: bool) -> int:
    """Prints `error` as one line on stderr (after its traceback when `debug`) and returns the exit code 1."""
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    message = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    print(f"error: {message or type(error).__name__}", file=sys.stderr)
    return 1


INTERRUPTED = 130
"""The exit code of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""


def report_interrupt(error: KeyboardInterrupt, debug: bool) -> int:
    """A command stopped by Ctrl-C: one line (the traceback only when `debug`) and exit code 130. The commands write
    their outputs under a temporary name and rename them when complete, so what an interrupted command leaves is the
    previous state or, for `collect` and `train`, the shards and checkpoints it completed, from which they resume."""
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    print("error: interrupted (Ctrl-C)", file=sys.stderr)
    return INTERRUPTED


def writable_output(path: Path, flag: str, folder: bool = True) -> Path:
    """`path` once it is known to be writable, checked before any model is loaded or anything measured: a run must
    not be lost to an output path that was wrong from the start."""
    try:
        return check_writable(path, folder=folder, what=flag)
    except OutputPathError as error:
        raise CliError(str(error)) from error


MODEL_HELP = "a local checkpoint folder or a Hub model id (downloaded unless HF_HUB_OFFLINE=1)"
"""What a --model flag takes, for its help."""


# --- shared helpers --------------------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    """A Jacobi-enabled model with what the output needs to say about it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    adapter_sha256: str | None = None  # of the merged adapter's weights: what a figure was measured on, beyond a name

    @property
    def eos_ids(self) -> set[int]:
        return eos_token_ids(self.model.generation_config)

    def describe(self, dtype: str) -> str:
        return f"model: {self.name} | device: {self.model.device} | dtype: {dtype}"

    def decode(self, inputs: dict[str, torch.Tensor], max_new_tokens: int, settings=None, **kwargs) -> Decoded:
        """One measured generate (`hf_jacobi.measurement.decode`): greedy when `settings` is None."""
        pad_id = self.model.generation_config.pad_token_id
        return decode(self.model, inputs, max_new_tokens, settings, eos_ids=self.eos_ids, pad_id=pad_id, **kwargs)


def load_model(
    path: Path | str | None,
    dtype: str,
    jacobi_forcing: bool = False,
    adapter: Path | None = None,
    flag: str = "--model",
) -> LoadedModel:
    """The embedded SmolLM2-135M-Instruct (with the shipped Jacobi Forcing adapter merged when `jacobi_forcing`), or a
    local checkpoint or Hub model id set up the same way (left padding, a pad token, Jacobi-enabled); `adapter` merges
    another PEFT adapter (a `hf-jacobi train` run folder), so a candidate is timed exactly as the shipped one would be.
    A model that does not load is a `CliError` naming `flag`, the command-line option `path` came from."""
    if jacobi_forcing and path is not None:
        raise CliError("--jacobi-forcing applies the adapter shipped for the embedded model: drop --model, or drop it")
    if jacobi_forcing and adapter is not None:
        raise CliError(f"--adapter {adapter} and --jacobi-forcing both name an adapter: keep one")
    if adapter is not None:
        from ..adapters import adapter_folder_problem

        if problem := adapter_folder_problem(adapter):
            raise CliError(f"--adapter {adapter} {problem}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model, tokenizer = _load_model(EMBEDDED if path is None else path, dtype=dtype, device=device)
    except ModelLoadError as error:
        raise CliError(f"{flag} {error}") from error
    name = f"{DEFAULT_MODEL_NAME} (embedded)" if path is None else str(path)
    loaded = LoadedModel(model, tokenizer, name)
    if adapter is not None:
        return with_adapter(loaded, adapter, f"{name} + adapter {adapter}")
    return with_jacobi_forcing(loaded) if jacobi_forcing else loaded


def with_adapter(loaded: LoadedModel, folder: Path, name: str) -> LoadedModel:
    """`loaded` with the PEFT adapter in `folder` merged in (its weights change in place; its generation config gains
    the adapter's Jacobi defaults), named `name` for the output."""
    from ..adapters import apply_adapter
    from ..file_manifest import sha256_file

    weights = sha256_file(Path(folder) / "adapter_model.safetensors")
    return LoadedModel(apply_adapter(loaded.model, folder), loaded.tokenizer, name, weights)


def with_jacobi_forcing(loaded: LoadedModel) -> LoadedModel:
    """The embedded model with the shipped Jacobi Forcing adapter merged in (still Jacobi-enabled)."""
    from ..adapters import JACOBI_FORCING_WEIGHTS

    return with_adapter(loaded, JACOBI_FORCING_WEIGHTS, f"{DEFAULT_MODEL_NAME} + Jacobi Forcing adapter (embedded)")


def per_forward(tokens: int, forwards: int) -> str:
    """Tokens per forward, or n/a when the prefill alone produced everything (max-new-tokens 1 or an instant EOS)."""
    return f"{tokens / forwards:.2f}" if forwards else "n/a"


def warm_up(loaded: LoadedModel, inputs: dict[str, torch.Tensor]) -> None:
    """One short untimed generate, so that one-off start-up costs are not charged to whichever mode runs first."""
    loaded.model.generate(**inputs, max_new_tokens=2, do_sample=False)


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: str | list[dict[str, str]], chat: bool
) -> dict[str, torch.Tensor]:
    """Instruct models answer a bare prompt poorly, so the chat template is used whenever the tokenizer has one."""
    ids = torch.tensor([encode_chat(tokenizer, prompt, chat=chat and bool(tokenizer.chat_template))])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def jacobi_config(args: argparse.Namespace, generation_config: GenerationConfig | None) -> JacobiConfig:
    """The Jacobi settings the command line sets, on top of those `generation_config` carries (a checkpoint's, or the
    shipped adapter's tuned defaults), on top of the library defaults; a bad value in the file is named."""
    flags = (
        "block_size",
        "num_blocks",
        "ngram_pool_size",
        "verify_size",
        "ngram_size",
        "cache_implementation",
        "greedy_devices",
    )
    try:
        return JacobiConfig.from_generation_config(generation_config, **{f: getattr(args, f, None) for f in flags})
    except ValueError as error:
        raise CliError(str(error)) from error


def add_jacobi_setting_flags(parser: argparse.ArgumentParser, source: str) -> None:
    """--block-size, --num-blocks and --ngram-pool-size, each unset by default: `jacobi_config` then keeps the value
    `source` carries (named in the help), else the library's default."""
    defaults = JacobiConfig()
    for flag, kind, what, default in (
        ("--block-size", positive_int, "Jacobi block size n", defaults.block_size),
        ("--num-blocks", positive_int, "Jacobi blocks in flight at most", defaults.num_blocks),
        ("--ngram-pool-size", non_negative_int, "rejection recycling: n-grams kept per key, 0 = off",
         defaults.ngram_pool_size),
    ):  # fmt: skip
        parser.add_argument(flag, type=kind, default=None, help=f"{what} (default: {source}, else {default})")


def describe_settings(jacobi: JacobiConfig) -> str:
    """Every setting the flags control, including those left at their default, so that two runs compare at a glance."""
    text = f"block size {jacobi.block_size}, blocks {jacobi.num_blocks}, n-gram pool {jacobi.ngram_pool_size}"
    if jacobi.ngram_pool_size and (jacobi.verify_size is not None or jacobi.ngram_size is not None):
        text += f" ({jacobi.candidates_per_step} candidates of {jacobi.candidate_length} tokens verified per step)"
    return text


def summary(label: str, tokens: int, forwards: int, seconds: float) -> str:
    return (
        f"{label}: {tokens} new tokens, {forwards} forwards (prefill excluded), "
        f"{per_forward(tokens, forwards)} tokens/forward, {tokens / seconds:.1f} tokens/s"
    )


def add_prompt_source_arguments(parser: argparse.ArgumentParser, source: str, split: str, why: str) -> None:
    """--prompts N, --prompt-source and --split, for commands that run on a few prompts of a prompt source (what
    `load_source_prompts` reads). `split` is the command's usual split, taken where the source has it: a source
    without it (stdlib has no test split, a local file is one) is read in its own split rather than refused."""
    parser.add_argument("--prompts", type=positive_int, default=4, help="prompts of the source to run on (default 4)")
    parser.add_argument(
        "--prompt-source",
        default=source,
        help=f"a named prompt source (packages, stdlib, humaneval, ...), a local file or a Hub dataset (default {source}: "
        f"{why})",
    )
    parser.add_argument(
        "--split",
        default=None,
        help=f"split of the prompt source (default {split} where the source has one, else the source's own, e.g. "
        "train for stdlib and a local file)",
    )
    parser.set_defaults(usual_split=split)


def load_source_prompts(args: argparse.Namespace, skip: int = 0) -> list[tuple[str, list[dict[str, str]]]]:
    """(id, chat turns) of prompts `skip` to `skip + args.prompts` of the source, all of them there, or a one-line
    error naming the source; read before any model is loaded. `args.split` becomes the split read (see
    `add_prompt_source_arguments`), for the command's report."""
    from ..data.prompts import load_prompts, resolve_split

    try:
        args.split = resolve_split(args.prompt_source, args.split, prefer=getattr(args, "usual_split", None))
        rows = load_prompts(args.prompt_source, split=args.split, limit=skip + args.prompts)
    except (FileNotFoundError, ValueError) as error:
        raise source_error(error) from error
    if len(rows) < skip + args.prompts:
        raise CliError(
            f"--prompts {args.prompts}"
            + (f" after --skip-prompts {skip}" if skip else "")
            + f": {args.prompt_source!r} ({args.split}) has only {len(rows)} prompts"
        )
    return list(zip(map(str, rows["prompt_id"]), rows["messages"], strict=True))[skip:]


def source_error(error: Exception, prefix: str = "") -> CliError:
    """A prompt source's refusal as a one-line `CliError` (after `prefix`) for a command with no flag to choose the
    prompt column: a missing one is reported without the library's `column=` hint, a Python keyword."""
    from ..data.prompt_rows import PromptColumnError

    message = error.message(None) if isinstance(error, PromptColumnError) else str(error)
    return CliError(prefix + message)


def add_jacobi_forcing_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jacobi-forcing",
        action="store_true",
        help="the embedded model with the Jacobi Forcing adapter shipped in the package (trained to accept more "
        "tokens per forward)",
    )
    parser.add_argument(
        "--adapter",
        type=Path,
        default=None,
        help="a PEFT adapter folder to merge into the model first (e.g. a `hf-jacobi train` run with use_peft), with "
        "the Jacobi defaults of its generation_config.json",
    )


def add_model_arguments(parser: argparse.ArgumentParser, max_new_tokens: int, dtype: str = "float32") -> None:
    """The model flags and the Jacobi settings; a Jacobi flag left out takes the model's generation config value (the
    shipped adapter's tuned one with --jacobi-forcing), else the library default. `dtype`: the default of --dtype
    ("auto" accepted too when it is the default)."""
    parser.add_argument(
        "--model", type=model_name, default=None, help=f"{MODEL_HELP} (default: embedded SmolLM2-135M)"
    )
    add_jacobi_forcing_argument(parser)
    choices = sorted(DTYPES) + ([AUTO_DTYPE] if dtype == AUTO_DTYPE else [])
    about = " (auto: bfloat16 on a CPU with bfloat16 units, else float32)" if dtype == AUTO_DTYPE else ""
    parser.add_argument("--dtype", choices=choices, default=dtype, help=f"weights dtype (default {dtype}){about}")
    add_jacobi_setting_flags(parser, "the model's generation config")
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=max_new_tokens,
        help=f"tokens to generate at most (default {max_new_tokens})",
    )
