"""Multi-block chains and rejection recycling: their parts, and the loop with them staying identical to greedy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from transformers import DynamicCache
from transformers.generation.streamers import BaseStreamer

from hf_jacobi import enable_jacobi
from hf_jacobi.decoding.acceptance import Verdict, greedy_verdict, matched_drafts
from hf_jacobi.decoding.cache import KVSlots
from hf_jacobi.decoding.chain import DraftChain, _continuation
from hf_jacobi.decoding.masks import AttentionLayout, host_layer_masks, layer_masks
from hf_jacobi.decoding.recycling import NgramPool
from hf_jacobi.decoding.step_layout import Branch, StepLayout
from tiny_models import EAGER_ONLY, FAMILIES, fresh_tiny_model, random_prompts, tiny_model

# ---- the n-gram pool ----


def test_pool_files_ngrams_under_every_key_suffix_and_prefers_the_longest():
    pool = NgramPool(capacity=4, ngram_size=3, key_size=2)
    pool.add([7, 8], [1, 2, 3])
    pool.add([9, 8], [4, 5, 6])
    # Context ending in 7, 8 matches the 2-token key first, then backs off to the 1-token key [8].
    assert pool.candidates([7, 8], limit=4) == [(1, 2, 3), (4, 5, 6)]
    assert pool.candidates([9, 8], limit=1) == [(4, 5, 6)]
    assert pool.candidates([5], limit=4) == []


def test_pool_keeps_the_most_recent_ngrams_per_key():
    pool = NgramPool(capacity=2, ngram_size=2, key_size=1)
    for ngram in ([1, 1], [2, 2], [3, 3]):
        pool.add([0], ngram)
    assert pool.candidates([0], limit=5) == [(3, 3), (2, 2)]
    pool.add([0], [2, 2])  # seen again: moves to the front
    assert pool.candidates([0], limit=5) == [(2, 2), (3, 3)]


def test_pool_skips_what_the_draft_already_proposes_and_too_short_ngrams():
    pool = NgramPool(capacity=4, ngram_size=3, key_size=1)
    pool.add([0], [1, 2, 3])
    pool.add([0], [1, 2, 4])
    pool.add([0], [5])  # one token is not worth a branch
    assert pool.candidates([0], limit=4, exclude=[1, 2, 3, 9]) == [(1, 2, 4)]


def test_pool_add_sequence_keys_each_ngram_on_what_precedes_it():
    pool = NgramPool(capacity=4, ngram_size=2, key_size=1)
    pool.add_sequence([10, 11, 12, 13], first_start=1, last_start=2)
    assert pool.candidates([10], limit=4) == [(11, 12)]
    assert pool.candidates([11], limit=4) == [(12, 13)]
    assert pool.candidates([12], limit=4) == []


class _PlainPool:
    """The pool's rules written as plainly as possible (a list per key, oldest first), to check the fast one against."""

    def __init__(self, capacity, ngram_size, key_size):
        self.capacity, self.ngram_size, self.key_size = capacity, ngram_size, key_size
        self.entries = {}

    def add(self, key, ngram):
        ngram = tuple(ngram[: self.ngram_size])
        if len(ngram) < min(2, self.ngram_size) or not key:
            return
        key = tuple(key[-self.key_size :])
        for length in range(1, len(key) + 1):
            bucket = self.entries.setdefault(key[-length:], [])
            if ngram in bucket:
                bucket.remove(ngram)
            bucket.append(ngram)
            if len(bucket) > self.capacity:
                bucket.pop(0)

    def add_sequence(self, tokens, first_start, last_start=None):
        last = len(tokens) - min(2, self.ngram_size) if last_start is None else last_start
        for start in range(max(first_start, 1), min(last, len(tokens) - min(2, self.ngram_size)) + 1):
            self.add(tokens[max(0, start - self.key_size) : start], tokens[start : start + self.ngram_size])


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 3)),
    calls=st.lists(
        st.tuples(st.lists(st.integers(0, 4), max_size=14), st.integers(0, 15), st.none() | st.integers(0, 15)),
        max_size=8,
    ),
)
def test_pool_files_exactly_what_adding_ngrams_one_by_one_files(shape, calls):
    """add_sequence is one tight loop over a window of the tokens; it must keep the same buckets, in the same order,
    as filing each n-gram on its own (a plain list per key); candidates read nothing else."""
    capacity, ngram_size, key_size = shape
    pool, plain = NgramPool(capacity, ngram_size, key_size), _PlainPool(capacity, ngram_size, key_size)
    for tokens, first, last in calls:
        pool.add_sequence(tokens, first, last)
        plain.add_sequence(tokens, first, last)
        pool.add(tokens[:first], tokens[first:])
        plain.add(tokens[:first], tokens[first:])
    assert {key: list(bucket) for key, bucket in pool._entries.items()} == plain.entries


# ---- the multi-block chain ----


def test_chain_rolls_and_a_block_joins_once_the_newest_has_accepted_its_share():
    fresh = iter(range(100, 200))

    def fill(count):
        return [next(fresh) for _ in range(count)]

    chain = DraftChain([1, 2, 3, 4], block_size=4, max_blocks=2, spawn_ratio=0.75)
    chain.advance(2, [3, 4], fill)  # two tokens committed: the predictions after them lead, fresh drafts follow
    assert chain.blocks == 1 and chain.tokens == [3, 4, 100, 101]
    chain.advance(1, [4, 100, 101, 55], fill)  # 3 accepted >= 0.75 * 4: a second block joins
    assert chain.blocks == 2 and len(chain.tokens) == 8
    assert chain.tokens == [4, 100, 101, 55, 102, 103, 104, 105]
    chain.advance(5, [9, 8, 7], fill)
    assert chain.blocks == 2  # capped at max_blocks
    assert chain.tokens[:3] == [9, 8, 7] and len(chain.tokens) == 8


def _plain_continuation(branches, verdict, predictions, taken):
    """The chain's next known tokens, level by level: the winner's predictions while it lasts, then the chain's."""
    accepted = taken - 1
    winner, chain = branches[verdict.branch], branches[0]
    tokens, level = [verdict.tokens[accepted]], accepted + 1
    while level < len(chain) or level < len(winner):
        tokens.append(predictions[(winner if level < len(winner) else chain).columns[level]])
        level += 1
    return tokens


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    tokens=st.lists(st.integers(0, 2), min_size=40, max_size=40),
    predicted=st.lists(st.integers(0, 2), min_size=40, max_size=40),
    cut=st.integers(0, 9),
)
def test_the_chains_update_and_the_pools_match_count_read_what_a_plain_walk_reads(lengths, tokens, predicted, cut):
    """Both run for every row on every step, so they skip the verdict machinery: the continuation takes slices of the
    winner's and the chain's columns, the pool's match count a bare loop; each must equal the level-by-level walk."""
    branches, column = [], 1
    for length in lengths:  # the chain, then candidate branches, each after column 0
        drafts = tokens[column : column + length - 1]
        branches.append(Branch([0, *range(column, column + len(drafts))], [tokens[0], *drafts]))
        column += len(drafts)
    predictions = predicted[:column]
    for branch in branches:
        assert matched_drafts(branch, predictions) == greedy_verdict([branch], predictions).accepted
    verdict = greedy_verdict(branches, predictions)
    taken = max(1, min(len(verdict.tokens), cut + 1))  # a row that finished mid-verdict commits fewer
    assert _continuation(branches, verdict, predictions, taken) == _plain_continuation(
        branches, verdict, predictions, taken
    )
    short = Verdict(verdict.tokens[:taken], verdict.columns[:taken], verdict.branch)
    assert _continuation(branches, short, predictions, taken) == _plain_continuation(
        branches, short, predictions, taken
    )


# ---- the step layout ----


def test_branches_see_column_zero_and_their_own_past_only():
    layout = StepLayout([5], [[[6, 7], [8, 9], [6, 1]]], pad_id=0, device="cpu")
    assert layout.tokens.tolist() == [[5, 6, 7, 8, 9, 6, 1]]
    assert layout.levels.tolist() == [[0, 1, 2, 1, 2, 1, 2]]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0],
            [1, 0, 0, 1, 0, 0, 0],
            [1, 0, 0, 1, 1, 0, 0],
            [1, 0, 0, 0, 0, 1, 0],
            [1, 0, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(torch.from_numpy(layout.visible[0]), expected)
    assert layout.drafts_before(0, 2) == [6, 7]
    assert layout.drafts_before(0, 4) == [8, 9]


def test_short_rows_are_padded_with_columns_that_see_only_themselves():
    layout = StepLayout([5, 4], [[[6, 7]], [[], [3]]], pad_id=0, device="cpu")
    assert layout.columns_used == [3, 2]
    assert layout.tokens[1].tolist() == [4, 3, 0]
    assert layout.visible[1].tolist() == [[True, False, False], [True, True, False], [False, False, True]]
    assert layout.drafts_before(1, 2) is None


def test_a_layout_reaches_the_device_as_positions_from_each_rows_start():
    layout = StepLayout([5, None, 4], [[[6, 7], [8]], [], [[3]]], pad_id=0, device="cpu", starts=[10, 0, 3])
    assert layout.tokens.tolist() == [[5, 6, 7, 8], [0, 0, 0, 0], [4, 3, 0, 0]]
    assert layout.positions.tolist() == [[10, 11, 12, 11], [0, 0, 0, 0], [3, 4, 3, 3]]
    assert layout.host_positions.tolist() == layout.positions.tolist()
    assert layout.levels.tolist() == [[0, 1, 2, 1], [0, 0, 0, 0], [0, 1, 0, 0]]
    assert layout.visible[1].tolist() == np.eye(4, dtype=bool).tolist()  # a finished row: padding only


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "kinds, window",
    [(("full_attention",), None), (("sliding_attention",), 3), (("full_attention", "sliding_attention"), 2)],
)
def test_masks_built_on_the_host_equal_the_ones_built_on_the_device(kinds, window, dtype):
    """The decoding loop builds its masks from host arrays (`host_layer_masks`), training from tensors (`layer_masks`):
    the same additive masks, windows applied on positions, for every layer kind."""
    rng = np.random.default_rng(0)
    allowed = rng.random((2, 4, 9)) < 0.6
    query_positions, kv_positions = rng.integers(0, 9, (2, 4)), rng.integers(0, 9, (2, 9))
    layout = AttentionLayout(kinds, window)
    host = host_layer_masks(allowed, query_positions, kv_positions, layout, dtype, torch.device("cpu"))
    tensors = [torch.from_numpy(a) for a in (allowed, query_positions, kv_positions)]
    device = layer_masks(*tensors, layout, dtype)
    if len(kinds) == 1:
        host, device = {kinds[0]: host}, {kinds[0]: device}
    assert host.keys() == device.keys()
    for kind in kinds:
        assert host[kind].dtype == dtype and host[kind].shape == (2, 1, 4, 9)
        assert torch.equal(host[kind], device[kind]), kind
    if window:  # the window did mask something the plain mask allows
        assert not torch.equal(host["sliding_attention"] == 0, torch.from_numpy(allowed).unsqueeze(1))


def test_greedy_verdict_follows_the_branch_that_matches_longest():
    # col0 predicts 6: the chain proposed 9 and stops there; the branch proposed 6, then 7 (predicted at col 3), and
    # the prediction after its 7 (col 4) is the bonus.
    branches = [Branch([0, 1, 2], [5, 9, 9]), Branch([0, 3, 4], [5, 6, 7])]
    predictions = [6, 1, 0, 7, 2]
    verdict = greedy_verdict(branches, predictions)
    assert verdict.tokens == [6, 7, 2] and verdict.columns == [0, 3, 4] and verdict.branch == 1


# ---- keeping a winning branch's KV ----


def test_commit_columns_moves_the_winning_columns_to_the_front():
    cache = DynamicCache()
    keys = torch.arange(2 * 6, dtype=torch.float32).view(1, 1, 12, 1).repeat(2, 1, 1, 1)[:, :, :6]
    cache.update(keys.clone(), keys.clone(), 0)
    slots = KVSlots(
        torch.ones(2, 2, dtype=torch.bool), torch.tensor([[0, 1], [0, 1]]), AttentionLayout(("full_attention",), None)
    )
    # Each row: its root, a chain of 2 drafts and a branch of 1, at positions 2, 3, 4 and 3.
    layout = StepLayout([1, 1], [[[2, 3], [4]], [[2, 3], [4]]], pad_id=0, device="cpu", starts=[2, 2])
    assert layout.positions.tolist() == [[2, 3, 4, 3], [2, 3, 4, 3]]
    # Row 0 kept column 0 and the branch column 3; row 1 kept columns 0-2 of its chain.
    slots.commit_columns(cache, [[0, 3, 1, 2], [0, 1, 2, 3]], [2, 3], layout)
    layer = cache.layers[0]
    assert layer.keys.shape[2] == 5  # the last column was kept by no row and is cropped
    assert layer.keys[0, 0, 2:4, 0].tolist() == [2.0, 5.0]
    assert layer.keys[1, 0, 2:5, 0].tolist() == [2.0, 3.0, 4.0]
    assert slots.valid.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert slots.positions[0, 2:4].tolist() == [2, 3]


# ---- the loop ----


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - EAGER_ONLY))
@pytest.mark.parametrize("batch", [1, 3])
def test_multi_block_and_recycling_match_greedy(family, batch):
    model = enable_jacobi(tiny_model(family, 0))
    ids, mask = random_prompts(batch, 9, seed=batch)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=48)
    for settings in (
        {"jacobi_block_size": 4, "jacobi_num_blocks": 3, "jacobi_spawn_ratio": 0.5},
        {"jacobi_block_size": 6, "jacobi_ngram_pool_size": 4},
        {"jacobi_block_size": 5, "jacobi_num_blocks": 4, "jacobi_ngram_pool_size": 8, "jacobi_ngram_size": 3},
        {"jacobi_block_size": 1, "jacobi_ngram_pool_size": 2, "jacobi_ngram_key_size": 1},
    ):
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=48,
            decoding="jacobi",
            return_dict_in_generate=True,
            **settings,
        )
        assert torch.equal(out.sequences, greedy), settings


def test_recycling_wins_branches_and_saves_forwards_on_repetitive_text():
    """The tiny Gemma falls into a loop; recycled n-grams must be accepted and cut the forwards."""
    model = enable_jacobi(tiny_model("gemma", 0))
    ids, mask = random_prompts(1, 9, seed=1)
    common = dict(attention_mask=mask, do_sample=False, max_new_tokens=60, decoding="jacobi", jacobi_block_size=6)
    plain = model.generate(ids, **common, return_dict_in_generate=True)
    recycled = model.generate(ids, **common, jacobi_ngram_pool_size=4, return_dict_in_generate=True)
    assert torch.equal(plain.sequences, recycled.sequences)
    assert int(recycled.recycled_tokens[0]) > 0
    assert int(recycled.forward_passes[0]) < int(plain.forward_passes[0])


def test_extra_blocks_are_actually_in_flight():
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(1, 9, seed=1)
    out = model.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=60,
        decoding="jacobi",
        jacobi_block_size=4,
        jacobi_num_blocks=3,
        jacobi_spawn_ratio=0.5,
        return_dict_in_generate=True,
    )
    assert float(out.forward_tokens[0]) / float(out.forward_passes[0]) > 4


def test_an_argmax_reads_the_models_dtype_and_processors_get_float32(monkeypatch):
    """In bfloat16 a step's argmax runs on the logits as they come out (a float32 copy of [batch, width, vocab] would
    cost memory and a device op, and casting is exact, so the argmax is the same): the whole decoding equals the one
    made from float32 copies. Logits processors still get float32 scores, as generate gives them."""
    from hf_jacobi.decoding import loop

    seen = []
    process = loop.process_column_scores
    monkeypatch.setattr(
        loop,
        "process_column_scores",
        lambda p, c, r, logits, layout: seen.append(logits.dtype) or process(p, c, r, logits, layout),
    )
    model = enable_jacobi(fresh_tiny_model("llama", 3).to(torch.bfloat16))
    ids, mask = random_prompts(2, 8, seed=4)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 24, "decoding": "jacobi"}
    kwargs.update(jacobi_block_size=4, jacobi_num_blocks=2, jacobi_ngram_pool_size=4)
    as_they_come = model.generate(ids, **kwargs)
    assert set(seen) == {torch.bfloat16}

    forward = model.forward

    @functools.wraps(forward)  # the same signature: generate reads it (logits_to_keep)
    def float_logits(*args, **named):
        out = forward(*args, **named)
        out.logits = out.logits.float()
        return out

    monkeypatch.setattr(model, "forward", float_logits)
    assert torch.equal(model.generate(ids, **kwargs), as_they_come)
    monkeypatch.setattr(model, "forward", forward)
    seen.clear()
    model.generate(ids, **kwargs, repetition_penalty=1.3)
    assert set(seen) == {torch.float32}


class _Columns(BaseStreamer):
    def __init__(self) -> None:
        self.columns: list[list[int]] = []

    def put(self, value) -> None:
        self.columns.append(value.tolist())

    def end(self) -> None:
        self.columns.append([])


@pytest.mark.parametrize(
    "processing",
    [
        {"repetition_penalty": 1.3},
        {"no_repeat_ngram_size": 3},
        {"min_new_tokens": 10},
        {"bad_words_ids": [[5], [7, 8]]},
        {"sequence_bias": {(9,): 2.0}},
        {"eos_token_id": None},
    ],
    ids=lambda p: next(iter(p)),
)
def test_processors_and_streamer_with_branches_and_blocks(processing):
    """Candidate branches are processed with their own contexts; streamers still see greedy's columns."""
    model = enable_jacobi(tiny_model("gemma", 0))
    ids, mask = random_prompts(3, 9, seed=5)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=40, pad_token_id=0, **processing)
    greedy_stream, jacobi_stream = _Columns(), _Columns()
    greedy = model.generate(ids, streamer=greedy_stream, **kwargs)
    jacobi = model.generate(
        ids,
        streamer=jacobi_stream,
        decoding="jacobi",
        jacobi_block_size=5,
        jacobi_ngram_pool_size=4,
        jacobi_num_blocks=2,
        jacobi_spawn_ratio=0.4,
        **kwargs,
    )
    assert torch.equal(greedy, jacobi)
    assert greedy_stream.columns == jacobi_stream.columns
