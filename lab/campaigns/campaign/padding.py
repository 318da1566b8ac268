"""How much of a training epoch's batches is padding, with random batches and with batches grouped by length.

Why: a batch is right-padded to its longest packed row, and the campaign's rows (a prompt and two copies of each
block of an answer of 16 to 256 tokens, mixed with anchor texts of any length) vary several-fold in length, so the
sampling strategy decides how many token-forwards an epoch costs. This counts them for the campaign's own rows and
recipe, without a model: the packed length of every row (what the collator packs), the batches each sampler draws in
epoch 0, and the tokens they pad to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml

from hf_jacobi import JacobiForcingCollator
from hf_jacobi.cli.train import TrainScriptArguments
from hf_jacobi.training.dataset import training_datasets
from hf_jacobi.training.sampling import LengthGroupedEpochSampler


def _padded(lengths: list[int], order: list[int], batch: int) -> int:
    chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
    return sum(max(lengths[i] for i in chunk) * len(chunk) for chunk in chunks)


def padding_report(
    recipe: Path, trajectories: list[Path], order: Path, count: int, tokenizer: Any, batch: int, accumulation: int
) -> dict[str, Any]:
    """Real and padded tokens of one epoch of the first `count` prompts' trajectories (and the recipe's anchor texts)
    under random batches and length-grouped ones, at micro-batches of `batch` (`accumulation` a step) and the recipe's
    seed."""
    settings = yaml.safe_load(recipe.read_text())
    script = TrainScriptArguments(
        trajectories=[str(folder) for folder in trajectories],
        trajectory_prompts=[str(order)],
        num_trajectory_prompts=[count],
        anchor_texts=settings.get("anchor_texts"),
        num_anchor_texts=settings.get("num_anchor_texts"),
    )
    anchors = script.load_anchor_texts(settings["base_kl_weight"])
    if anchors is not None:
        from hf_jacobi import encode_anchor_texts

        anchors = encode_anchor_texts(anchors, tokenizer, settings["max_length"])
    collator = JacobiForcingCollator(pad_token_id=0, max_length=settings["max_length"])
    rows, _, _ = training_datasets(script.load(), None, anchors, collator, settings["base_kl_weight"], "length")
    lengths = rows["length"]
    random_order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(settings["seed"])).tolist()
    grouped_order = list(LengthGroupedEpochSampler(lengths, batch * accumulation, settings["seed"]))
    real = sum(lengths)
    report = {
        "recipe": recipe.name,
        "trajectories": count,
        "rows": len(lengths),
        "batch_size": batch,
        "accumulation": accumulation,
    }
    report["anchor_texts"] = len(anchors) if anchors is not None else 0
    report["real_tokens"] = real
    for name, order_ in (("random", random_order), ("group_by_length", grouped_order)):
        padded = _padded(lengths, order_, batch)
        report[name] = {"padded_tokens": padded, "padded_over_real": round(padded / real, 3)}
    report["random_over_grouped"] = round(
        report["random"]["padded_tokens"] / report["group_by_length"]["padded_tokens"], 2
    )
    return report
