"""The plain model folder a serving engine loads: a Jacobi Forcing adapter merged into its base, Jacobi settings kept.

Engines such as vLLM load safetensors weights, not a PEFT adapter over the embedded GGUF, so the adapter is merged
(`adapters.apply_adapter`, the same merge `load_default_model(jacobi_forcing=True)` does) and the result saved with
its tokenizer. The generation config keeps the base's own defaults and gains the adapter's `jacobi_*` settings with
`decoding="jacobi"`, as a published checkpoint carries them (`checkpoint.jacobi_generation_config`): that is where
`JacobiProposer` reads its block size.

    python -m hf_jacobi.integrations.merged OUTPUT_DIR            # the embedded model with the shipped adapter
    python -m hf_jacobi.integrations.merged OUTPUT_DIR --model BASE_DIR --adapter ADAPTER_DIR
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..adapters import JACOBI_FORCING_WEIGHTS, apply_adapter
from ..atomic import atomic_folder
from ..checkpoint import jacobi_generation_config
from ..decoding.config import JacobiConfig
from ..loading import EMBEDDED, is_embedded, load_model


def write_merged_model(
    target: str | os.PathLike[str],
    model: str | os.PathLike[str] = EMBEDDED,
    adapter: str | os.PathLike[str] | None = JACOBI_FORCING_WEIGHTS,
    dtype: str = "float32",
    *,
    vllm_drafts: str | None = None,
    vllm_verify_cost: float | None = None,
) -> Path:
    """Writes `model` (the embedded model, a local save_pretrained folder or a Hub id) with `adapter` merged into
    `target`.

    Args:
        adapter: a PEFT adapter folder; the shipped Jacobi Forcing adapter by default; None saves the model as it is.
        dtype: the dtype of the saved weights (float32 keeps vLLM's greedy equal to transformers' float32 greedy).
        vllm_drafts: `JacobiProposer`'s draft mode, written as `jacobi_vllm_drafts` (None: the proposer's default).
        vllm_verify_cost: its verify cost c, written as `jacobi_vllm_verify_cost` (None: the proposer's default).

    Returns the folder. A `target` that exists and is not empty is refused, so a typo cannot overwrite a model.
    """
    from .vllm import DRAFT_MODE_KEY, VERIFY_COST_KEY, draft_mode, verify_cost

    options = {DRAFT_MODE_KEY: vllm_drafts, VERIFY_COST_KEY: vllm_verify_cost}
    options = {key: value for key, value in options.items() if value is not None}
    draft_mode(options), verify_cost(options)  # refused by name before any model is loaded
    target = Path(target)
    loaded, tokenizer = load_model(model, dtype=dtype)
    if adapter is not None:
        loaded = apply_adapter(loaded, adapter)
    settings = JacobiConfig.settings_in(loaded.generation_config)
    if settings:
        loaded.generation_config = jacobi_generation_config(
            loaded.generation_config, JacobiConfig.from_generation_config(loaded.generation_config)
        )
    for key, value in options.items():
        setattr(loaded.generation_config, key, value)
    with atomic_folder(target) as staging:
        loaded.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hf_jacobi.integrations.merged",
        description="Write a model with a Jacobi Forcing adapter merged in, for vLLM and other engines.",
    )
    parser.add_argument("output_dir", type=Path, help="a new folder for the merged model")
    parser.add_argument(
        "--model", default=EMBEDDED, help="'embedded' (default), a local save_pretrained folder or a Hub model id"
    )
    parser.add_argument(
        "--adapter", type=Path, default=None, help="a PEFT adapter folder (default: the shipped one, embedded model)"
    )
    parser.add_argument("--no-adapter", action="store_true", help="save the model without merging any adapter")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--vllm-drafts", default=None, help="the proposer's draft mode: lookup (default), fill or plain"
    )
    parser.add_argument("--vllm-verify-cost", type=float, default=None, help="its verify cost c (0: whole chains)")
    args = parser.parse_args(argv)
    adapter = None if args.no_adapter else args.adapter
    if adapter is None and not args.no_adapter:
        if not is_embedded(args.model):
            parser.error("--adapter is required for a model other than the embedded one (or pass --no-adapter)")
        adapter = JACOBI_FORCING_WEIGHTS
    options = {"vllm_drafts": args.vllm_drafts, "vllm_verify_cost": args.vllm_verify_cost}
    try:
        folder = write_merged_model(args.output_dir, args.model, adapter, args.dtype, **options)
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {folder}; serve it with:")
    print(
        f"  vllm serve {folder} --dtype {args.dtype} --enforce-eager --speculative-config '{serving_config(folder)}'"
    )
    return 0


def serving_config(folder: str | os.PathLike[str]) -> str:
    """The `--speculative-config` JSON for a merged folder: JacobiProposer verifying the folder's own chain."""
    from .vllm import PROPOSER_PATH, checkpoint_settings, default_chain_length

    config = json.loads((Path(folder) / "generation_config.json").read_text(encoding="utf-8"))
    k = default_chain_length(checkpoint_settings(config) or JacobiConfig())
    return json.dumps({"method": "custom_class", "model": PROPOSER_PATH, "num_speculative_tokens": k})


if __name__ == "__main__":
    raise SystemExit(main())
