"""A batch's greedy answers and the KV cache that holds them, laid out for the parallel collection method.

Why a layout of its own: `block_iterations` reads every row's prompt and answer from one cache, the prompt left-padded
to a common width and the answer from that width on, so that a block's prefix is a column range. Greedy generation
leaves exactly that cache behind (a resumed collection, whose answers are known, fills it in one prefill instead), and
the cache is a plain `DynamicCache` (every layer keeps every slot), so that sliding-window layers keep the slots the
iterations' masks select by position. Its layers write into buffers reserved for the whole answer (`ReservedCache`)
instead of concatenating at every step, and the prompts are prefilled in runs of like length (`length_runs`) rather
than all padded to the longest.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from ..decoding.cache import CACHE_ARGUMENT
from ..decoding.sdpa_gqa import cpu_gqa
from ..measurement import generated_tokens
from .batching import left_padded


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` that writes new keys and values into buffers reserved for `capacity` positions (doubled when
    a write would overflow them) and exposes the filled part as `keys` / `values` views.

    Why: `DynamicLayer.update` concatenates, copying the layer's whole history at every decode step. In the parallel
    method's greedy generation (batch 64, 128 new tokens, the embedded model in bfloat16 on a CPU) those copies took a
    visible share of the phase's time (`torch.profiler`: `aten::cat`; docs/results/campaign-cpu/README.md); here a step
    copies only its own new slots. Operations that rebuild the tensors (row selection, beam reordering) adopt the
    result as the new buffers.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        shape = (*key_states.shape[:-2], max(self.capacity, key_states.shape[-2]))
        self._keys = key_states.new_empty(*shape, key_states.shape[-1])
        self._values = value_states.new_empty(*shape, value_states.shape[-1])
        self._length = 0
        self._expose()
        self.is_initialized = True

    def _expose(self) -> None:
        self.keys = self._keys[..., : self._length, :]
        self.values = self._values[..., : self._length, :]

    def _adopt(self) -> None:
        """Takes `keys` / `values`, rebuilt by an inherited operation, as the buffers (full: the next write grows)."""
        self._keys, self._values, self._length = self.keys, self.values, self.keys.shape[-2]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self._length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            grown = max(end, 2 * self._keys.shape[-2])
            for name in ("_keys", "_values"):
                old = getattr(self, name)
                new = old.new_empty(*old.shape[:-2], grown, old.shape[-1])
                new[..., : self._length, :] = old[..., : self._length, :]
                setattr(self, name, new)
        self._keys[..., self._length : end, :] = key_states
        self._values[..., self._length : end, :] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if self.is_initialized:
            self._length = self.keys.shape[-2]

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.is_initialized:
            self._adopt()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.is_initialized:
            self._adopt()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        if self.is_initialized:
            self._adopt()


class ReservedCache(DynamicCache):
    """A `DynamicCache` of `ReservedLayer`s, one per attention layer as the model updates them, each reserving
    `capacity` positions: a plain cache (every layer keeps every slot) that does not copy its history on each write."""

    def __init__(self, capacity: int) -> None:
        Cache.__init__(self, layer_class_to_replicate=functools.partial(ReservedLayer, capacity))


@dataclass
class AnswerCache:
    """A KV cache holding each row's prompt, left-padded to `width` columns, then its answer from column `width`."""

    cache: DynamicCache
    width: int
    prompt_len: torch.Tensor


MAX_PREFILL_PADDING = 0.25
"""Padding a prefill run may add to its prompts' own tokens (`length_runs`)."""


def length_runs(lengths: Sequence[int], max_padding: float = MAX_PREFILL_PADDING) -> list[list[int]]:
    """Row indices sorted by length and cut into runs whose left padding (every row padded to the run's longest)
    stays within `max_padding` of their own tokens; rows of length 0 are left out."""
    runs: list[list[int]] = []
    current: list[int] = []
    total = 0
    for row in sorted((r for r, n in enumerate(lengths) if n), key=lambda r: lengths[r]):
        if current and lengths[row] * (len(current) + 1) > (1 + max_padding) * (total + lengths[row]):
            runs.append(current)
            current, total = [], 0
        current.append(row)
        total += lengths[row]
    return runs + ([current] if current else [])


@torch.no_grad()
def prefill_context(model, prompts: Sequence[Sequence[int]], cache: ReservedCache, pad_id: int) -> None:
    """Writes the keys and values of every prompt but its last token into the empty `cache` as one left-padded batch
    of `max(len) - 1` columns (zeros where a row pads), computing them in runs of prompts of like length.

    Why: a batch's prompts padded to the longest make a prefill of rows x longest tokens; where prompt lengths vary
    several-fold, most of that prefill is padding, and a short answer's generation is mostly prefill. `generate` then feeds each row's last prompt token on this cache, as
    it continues any cached prefix. The zeros are masked like any padding (and finite, unlike keys computed from pad
    tokens that see nothing)."""
    context = [len(prompt) - 1 for prompt in prompts]
    width = max(context)
    for run in length_runs(context):
        batch = left_padded([prompts[r][:-1] for r in run], pad_id, model.device)
        run_width = batch["input_ids"].shape[1]
        filled = DynamicCache()
        with cpu_gqa(model.device):
            model(
                **batch,
                position_ids=(batch["attention_mask"].cumsum(1) - 1).clamp(min=0),
                use_cache=True,
                logits_to_keep=1,
                **{CACHE_ARGUMENT: filled},
            )
        if cache.get_seq_length() == 0:  # the first run gives the layers' shapes: every row's columns start as zeros
            for index, layer in enumerate(filled.layers):
                zeros = layer.keys.new_zeros(len(prompts), layer.keys.shape[1], width, layer.keys.shape[-1])
                cache.update(zeros, zeros.clone(), index)
        real = batch["attention_mask"].bool()[:, None, :, None]
        rows = torch.tensor(run, device=model.device)
        for layer, computed in zip(cache.layers, filled.layers, strict=True):
            layer.keys[rows, :, width - run_width :] = torch.where(real, computed.keys, 0)
            layer.values[rows, :, width - run_width :] = torch.where(real, computed.values, 0)


@torch.no_grad()
def greedy_answers(
    model, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int, eos_ids: set[int]
) -> tuple[list[list[int]], AnswerCache]:
    """Stock greedy generation of a batch (`generate`), each answer cut after its first EOS, with the cache it filled
    (its prompts prefilled in runs of like length: `prefill_context`)."""
    inputs = left_padded(prompts, pad_id, model.device)
    cache = ReservedCache(inputs["input_ids"].shape[1] + max_new_tokens)
    prefill_context(model, prompts, cache, pad_id)
    out = model.generate(
        **inputs,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_id,
        decoding="greedy",
        return_dict_in_generate=True,
        **{CACHE_ARGUMENT: cache},
    )
    width = inputs["input_ids"].shape[1]
    answers = [generated_tokens(row, eos_ids) for row in out.sequences[:, width:]]
    prompt_len = torch.tensor([len(p) for p in prompts], device=model.device)
    return answers, AnswerCache(cache, width, prompt_len)


@torch.no_grad()
def prefill_answers(
    model, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], pad_id: int
) -> AnswerCache:
    """The cache `greedy_answers` leaves, from answers already known (a resumed collection): one forward over the
    left-padded prompts followed by the answers (right-padded)."""
    inputs = left_padded(prompts, pad_id)
    width, longest = inputs["input_ids"].shape[1], max(len(a) for a in answers)
    ids = torch.full((len(prompts), width + longest), pad_id, dtype=torch.long)
    valid = torch.zeros_like(ids)
    ids[:, :width], valid[:, :width] = inputs["input_ids"], inputs["attention_mask"]
    for row, answer in enumerate(answers):
        ids[row, width : width + len(answer)] = torch.tensor(list(answer), dtype=torch.long)
        valid[row, width : width + len(answer)] = 1
    cache = DynamicCache()
    position_ids = (valid.cumsum(1) - 1).clamp(min=0)
    with cpu_gqa(model.device):
        model(
            input_ids=ids.to(model.device),
            attention_mask=valid.to(model.device),
            position_ids=position_ids.to(model.device),
            use_cache=True,
            logits_to_keep=1,
            **{CACHE_ARGUMENT: cache},
        )
    return AnswerCache(cache, width, torch.tensor([len(p) for p in prompts], device=model.device))
