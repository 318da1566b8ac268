"""The acceptance probe: what a model's tokens per forward with plain Jacobi decoding depend on, measured in minutes
from trajectories instead of hours of decoding.

A Jacobi iteration on a block whose first wrong token is at offset f commits the token at f (the prediction made from
a correct prefix is greedy's) and then one more token for every consecutive offset after it whose prediction, made
through the wrong tokens before it, is already the fixed point's. So what decides tokens per forward is how often the
model's choice at depth d = 0, 1, 2, ... after the first wrong token equals the fixed point. Consistency training
targets exactly these choices, so their rates can be logged while a run trains and compared across recipes.

Every state of every block is read in one forward per trajectory (a few, for long ones): the prompt and the whole
clean answer come first, then each state at the positions its block occupies, seeing the prompt and the clean blocks
before its own (a clean past, as in decoding, where earlier blocks are committed) and its own tokens causally (the
noise-aware mask within a block). Only the predictions read are projected onto the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from ..data.trajectories import first_mismatch
from ..decoding.masks import AttentionLayout, layer_masks

PROBE_PREFIX = "probe"


@dataclass
class ProbeResult:
    """Counts over the probed states; every figure is a ratio of them, so results over parts add up (`merge`).

    `depth_hits[d]` / `depth_counts[d]`: states whose prediction at depth d after the first wrong token is the fixed
    point's, among those whose block reaches that depth. `committed` / `states`: the tokens per iteration those
    predictions imply (the token at the first wrong offset plus the run of right choices after it, within the block).
    `agreement_hits` / `agreement_counts`: the clean answer's own tokens that the model predicts from the clean past,
    i.e. whether the trajectories' fixed points are this model's greedy answer (1.0 for the model that collected them,
    in float32); where they are not, the other figures measure how fast it would converge to another model's answer.
    """

    depth_hits: list[int] = field(default_factory=list)
    depth_counts: list[int] = field(default_factory=list)
    states: int = 0
    committed: int = 0
    agreement_hits: int = 0
    agreement_counts: int = 0
    trajectories: int = 0

    @property
    def rates(self) -> list[float]:
        """Per depth d = 0, 1, ...: the share of choices at that depth that equal the fixed point."""
        return [hits / count for hits, count in zip(self.depth_hits, self.depth_counts, strict=True) if count]

    @property
    def tokens_per_iteration(self) -> float:
        """The tokens per Jacobi iteration that the choices imply, over the probed states (1.0 where none is right)."""
        return self.committed / self.states if self.states else float("nan")

    @property
    def agreement(self) -> float:
        return self.agreement_hits / self.agreement_counts if self.agreement_counts else float("nan")

    def add_state(self, correct: list[bool]) -> None:
        """One state: whether its choice at each depth (0 first, up to its block's end) is the fixed point's."""
        for depth, right in enumerate(correct):
            if depth == len(self.depth_counts):
                self.depth_hits.append(0)
                self.depth_counts.append(0)
            self.depth_counts[depth] += 1
            self.depth_hits[depth] += int(right)
        run = next((depth for depth, right in enumerate(correct) if not right), len(correct))
        self.states += 1
        self.committed += 1 + run

    def merge(self, other: ProbeResult) -> ProbeResult:
        depths = max(len(self.depth_counts), len(other.depth_counts))

        def added(left: list[int], right: list[int]) -> list[int]:
            return [a + b for a, b in zip(_padded(left, depths), _padded(right, depths), strict=True)]

        return ProbeResult(
            depth_hits=added(self.depth_hits, other.depth_hits),
            depth_counts=added(self.depth_counts, other.depth_counts),
            states=self.states + other.states,
            committed=self.committed + other.committed,
            agreement_hits=self.agreement_hits + other.agreement_hits,
            agreement_counts=self.agreement_counts + other.agreement_counts,
            trajectories=self.trajectories + other.trajectories,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_per_iteration": self.tokens_per_iteration,
            "rates_by_depth": self.rates,
            "choices_by_depth": self.depth_counts,
            "states": self.states,
            "trajectories": self.trajectories,
            "fixed_point_agreement": self.agreement,
        }

    def metrics(self, prefix: str = PROBE_PREFIX, depths: int = 4) -> dict[str, float]:
        """Flat figures for a trainer's log: the implied tokens per iteration and the first `depths` rates."""
        figures = {f"{prefix}/tokens_per_iteration": self.tokens_per_iteration, f"{prefix}/agreement": self.agreement}
        figures |= {f"{prefix}/depth{d}_rate": rate for d, rate in enumerate(self.rates[:depths])}
        return figures


def _padded(counts: list[int], length: int) -> list[int]:
    return counts + [0] * (length - len(counts))


@dataclass
class _Read:
    """One state placed in a probe forward: where its tokens start and what each depth must predict."""

    start: int
    first_wrong: int
    targets: list[int]  # the fixed point's tokens at offsets first_wrong + 1 ... n - 1


def _layout(row: Mapping[str, Any], states: list[tuple[int, list[int]]]) -> tuple[list[int], list[int], list, Any]:
    """Token ids, position ids, reads and the visibility mask [L, L] of one probe forward over `states` ((block,
    state) pairs) of the trajectory `row`."""
    prompt, fixed = list(row["prompt_ids"]), [list(block) for block in row["fixed_points"]]
    n, clean = int(row["block_size"]), [token for block in fixed for token in block]
    ids = prompt + clean
    positions = list(range(len(ids)))
    head = len(ids)
    reads, spans = [], []
    for block, state in states:
        first = len(prompt) + block * n
        reads.append(_Read(len(ids), first_mismatch(state, fixed[block]), fixed[block]))
        spans.append((len(ids), first))
        ids += state
        positions += range(first, first + n)
    mask = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
    mask[head:, :] = False
    for start, first in spans:
        mask[start : start + n, :first] = True  # the prompt and the clean blocks before this one
        mask[start : start + n, start : start + n] = torch.ones(n, n, dtype=torch.bool).tril()
    return ids, positions, reads, mask


@torch.inference_mode()
def probe_trajectory(
    model, row: Mapping[str, Any], max_states_per_forward: int = 64, max_states_per_block: int | None = None
) -> ProbeResult:
    """The probe over one trajectory row (`TrajectoryRow` fields): every state before its block's fixed point."""
    result = ProbeResult(trajectories=1)
    n = int(row["block_size"])
    fixed = [list(block) for block in row["fixed_points"]]
    states = [
        (block, list(state))
        for block, block_states in enumerate(row["states"])
        for state in list(block_states)[: max_states_per_block or None]
        if list(state) != fixed[block]
    ]
    prompt_len = len(row["prompt_ids"])
    first_pass = True
    for chunk_start in range(0, max(len(states), 1), max_states_per_forward):
        chunk = states[chunk_start : chunk_start + max_states_per_forward]
        ids, positions, reads, mask = _layout(row, chunk)
        columns: list[int] = []
        if first_pass:  # the clean answer's own predictions: do the fixed points agree with this model?
            columns += range(prompt_len - 1, prompt_len - 1 + n * len(fixed))
        for read in reads:
            columns += range(read.start + read.first_wrong, read.start + n - 1)
        # a state one token short of its fixed point has no choice to read, and still commits that token
        predicted = _predictions(model, ids, positions, mask, columns) if columns else torch.empty(0, dtype=torch.long)
        cursor = 0
        if first_pass:
            clean = [token for block in fixed for token in block]
            agreement = predicted[: len(clean)] == torch.tensor(clean)
            result.agreement_hits += int(agreement.sum())
            result.agreement_counts += len(clean)
            cursor = len(clean)
            first_pass = False
        for read in reads:
            depths = n - 1 - read.first_wrong
            choices = predicted[cursor : cursor + depths].tolist()
            cursor += depths
            result.add_state([c == t for c, t in zip(choices, read.targets[read.first_wrong + 1 :], strict=True)])
    return result


def _predictions(model, ids: list[int], positions: list[int], mask: torch.Tensor, columns: list[int]) -> torch.Tensor:
    """The model's argmax at `columns` of one forward under `mask` (an additive 4D mask in the model's layout)."""
    device = model.device
    position_ids = torch.tensor([positions], device=device)
    layout = AttentionLayout.from_config(model.config)
    attention = layer_masks(mask[None].to(device), position_ids, position_ids, layout, model.dtype)
    keep = torch.tensor(columns, device=device)
    out = model(
        input_ids=torch.tensor([ids], device=device),
        position_ids=position_ids,
        attention_mask=attention,
        logits_to_keep=keep,
        use_cache=False,
    )
    return out.logits[0].argmax(-1).cpu()


def probe_acceptance(
    model,
    trajectories: Iterable[Mapping[str, Any]],
    *,
    limit: int | None = None,
    max_states_per_block: int | None = None,
    max_states_per_forward: int = 64,
    progress: bool = False,
) -> ProbeResult:
    """How often `model`'s choices after a block's first wrong token are already the fixed point's, over the states of
    `trajectories` (rows as `collect_trajectories` writes them; the first `limit`), and the tokens per iteration of
    plain Jacobi decoding they imply. Run it on a model's own trajectories, or on another model's to see what training
    on them would start from; the model is left in the mode it was in.

    Args:
        max_states_per_block: read only the first states of each block (the early, noisiest ones), to save time.
        max_states_per_forward: states placed in one forward; lower it where memory is short.
    """
    if max_states_per_forward < 1:
        raise ValueError(f"max_states_per_forward must be an integer >= 1, got {max_states_per_forward!r}")
    if max_states_per_block is not None and max_states_per_block < 1:
        raise ValueError(f"max_states_per_block must be an integer >= 1 or None, got {max_states_per_block!r}")
    rows = list(trajectories) if limit is None else [row for _, row in zip(range(limit), trajectories, strict=False)]
    if not rows:
        raise ValueError("probe_acceptance needs at least one trajectory")
    was_training = model.training
    model.eval()
    total = ProbeResult()
    try:
        for row in tqdm(rows, desc="probe", unit="trajectory", disable=not progress):
            total = total.merge(probe_trajectory(model, row, max_states_per_forward, max_states_per_block))
    finally:
        model.train(was_training)
    return total
