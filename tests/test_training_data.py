"""Trajectories, the noise schedule, packing and the noise-aware mask."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from hf_jacobi import JacobiForcingConfig, enable_jacobi
from hf_jacobi.data.trajectories import TrajectoryRecorder, block_states, first_mismatch, noise_level
from hf_jacobi.decoding.masks import AttentionLayout
from hf_jacobi.training.collator import (
    ANCHOR_TEXT,
    NO_BLOCK,
    CleanView,
    JacobiForcingCollator,
    pack_trajectory,
)
from hf_jacobi.training.losses import IGNORE_INDEX, NO_TEACHER
from hf_jacobi.training.masks import NoiseAwareMask, Segment, noise_aware_mask, training_attention_mask
from hf_jacobi.training.schedule import choose_states, target_noise
from tiny_models import EOS, FAMILIES, PAD, random_prompts, tiny_model

PROMPT, NOISY, CLEAN, PAD_SEGMENT = Segment.PROMPT, Segment.NOISY, Segment.CLEAN, Segment.PADDING

# --- trajectories ----------------------------------------------------------------------------------------------------


def test_block_states_rebuilds_fixed_blocks_from_rolling_chains():
    generated = [10, 11, 12, 13, 14, 15, 16, 17]
    steps = [
        (0, [10, 90, 91, 92]),  # first drafts of positions 1-3
        (1, [11, 12, 93, 94]),  # position 4 first drafted as 94
        (3, [13, 14, 15, 95]),  # positions 5 and 6 first drafted as 15 and 95
        (6, [16, 17, 96, 97]),  # position 7 first drafted as 17
    ]
    blocks = block_states(steps, generated, block_size=4)
    assert blocks == [
        # position 0 is the prefill's token, never a draft; the step at 0 shows the initial draft again (deduplicated)
        [[10, 90, 91, 92], [10, 11, 12, 93], [10, 11, 12, 13]],
        # the initial draft holds each position's first draft, even those drafted after the block started converging
        [[94, 15, 95, 17], [14, 15, 95, 17], [14, 15, 16, 17]],
    ]


def test_block_states_drops_a_trailing_partial_block_and_appends_the_fixed_point():
    blocks = block_states([(0, [5, 6, 7])], [5, 6, 8, 9, 4], block_size=3)
    assert blocks == [[[5, 6, 7], [5, 6, 8]]]


def test_noise_level_and_first_mismatch():
    fixed = [1, 2, 3, 4]
    assert first_mismatch([1, 2, 3, 4], fixed) == 4 and noise_level([1, 2, 3, 4], fixed) == 0
    assert first_mismatch([1, 2, 9, 4], fixed) == 2 and noise_level([1, 2, 9, 4], fixed) == 0.5
    assert noise_level([9, 2, 3, 4], fixed) == 1


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_recorded_trajectories_come_from_the_decoding_loop(family):
    model = enable_jacobi(tiny_model(family))
    ids, mask = random_prompts(3, 7, seed=4)
    recorder = TrajectoryRecorder()
    out = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=24,
        decoding="jacobi",
        jacobi_block_size=6,
        return_dict_in_generate=True,
        trajectory_recorder=recorder,
    )
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    assert torch.equal(out.sequences, greedy)
    for row in range(3):
        steps = recorder.steps[row]
        assert len(steps) == int(out.forward_passes[row])  # one record per forward the row took part in
        generated = out.sequences[row, ids.shape[1] :].tolist()
        if EOS in generated:
            generated = generated[: generated.index(EOS) + 1]
        for j, states in enumerate(block_states(steps, generated, 6)):
            assert states[-1] == generated[j * 6 : (j + 1) * 6]
            assert all(len(state) == 6 for state in states)
            assert all(a != b for a, b in itertools.pairwise(states))  # only changes are recorded


def test_trajectory_recorder_needs_jacobi():
    model = enable_jacobi(tiny_model("llama"))
    ids, mask = random_prompts(1, 5, seed=0)
    with pytest.raises(ValueError, match="trajectory_recorder"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, trajectory_recorder=TrajectoryRecorder())


# --- schedule --------------------------------------------------------------------------------------------------------


def test_progressive_targets_rise_over_each_window():
    generator = torch.Generator().manual_seed(0)
    assert target_noise(6, 3, "progressive", generator) == [0.0, 0.5, 1.0, 0.0, 0.5, 1.0]
    assert target_noise(4, 4, "reverse", generator) == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    randoms = target_noise(1000, 4, "random", generator)
    assert all(0 <= t <= 1 for t in randoms) and 0.45 < sum(randoms) / 1000 < 0.55


def test_choose_states_takes_the_closest_noise_and_breaks_ties_at_random():
    fixed = [1, 2, 3, 4]
    states = [[9, 9, 9, 9], [1, 9, 9, 9], [1, 2, 9, 9], [1, 2, 3, 9], fixed]  # noise 1, .75, .5, .25, 0
    generator = torch.Generator().manual_seed(0)
    assert choose_states(states, fixed, 0.5, generator) == 2
    assert choose_states(states, fixed, 0.0, generator) == 4
    assert choose_states(states, fixed, 0.7, generator) == 1
    tied = [[9, 9, 9, 9], [8, 8, 8, 8], fixed]
    picks = {choose_states(tied, fixed, 1.0, generator) for _ in range(50)}
    assert picks == {0, 1}


@pytest.mark.parametrize(("schedule", "window"), [("linear", 4), ("progressive", 0), ("random", 1.5)])
def test_schedule_is_validated_by_the_config(tmp_path, schedule, window):
    with pytest.raises(ValueError, match=repr(schedule) if schedule == "linear" else "noise_window"):
        JacobiForcingConfig(
            output_dir=str(tmp_path), use_cpu=True, bf16=False, noise_schedule=schedule, noise_window=window
        )


# --- packing ---------------------------------------------------------------------------------------------------------


def test_pack_trajectory_lays_out_blocks_positions_and_targets():
    prompt = [5, 6, 7]
    noisy = [[20, 99, 98], [23, 24, 25]]  # block 0 wrong from index 1; block 1 converged
    clean = [[20, 21, 22], [23, 24, 25]]
    packed = pack_trajectory(prompt, noisy, clean, next_token=26)
    assert packed.input_ids == [5, 6, 7, 20, 99, 98, 20, 21, 22, 23, 24, 25, 23, 24, 25]
    assert packed.position_ids == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 6, 7, 8]
    assert packed.segment_ids == [PROMPT] * 3 + [NOISY] * 3 + [CLEAN] * 3 + [NOISY] * 3 + [CLEAN] * 3
    assert packed.block_ids == [-1] * 3 + [0] * 6 + [1] * 6
    x = IGNORE_INDEX
    # prompt tokens predict the next prompt token; the last one the first completion token; clean tokens the next
    # clean token across blocks, and the last one the completion's next token
    assert packed.ar_targets == [6, 7, 20, x, x, x, 21, 22, 23, x, x, x, 24, 25, 26]
    # consistency: noisy tokens from the first mismatch (index 1) on, each paired with the clean token at its position
    assert packed.teacher_index == [-1] * 4 + [7, 8] + [-1] * 9
    no_prompt_loss = pack_trajectory(prompt, noisy, clean, prompt_ar_loss=False)
    assert no_prompt_loss.ar_targets[:3] == [x, x, 20] and no_prompt_loss.ar_targets[-1] == x


def trajectory(prompt_id, prompt, blocks, completion_tail=()):
    """A trajectory row with, per block, a fully wrong state, a half-converged one and the fixed point."""
    states = []
    for fixed in blocks:
        half = len(fixed) // 2
        states.append([[3] * len(fixed), fixed[:half] + [4] * (len(fixed) - half), fixed])
    completion = [t for fixed in blocks for t in fixed] + list(completion_tail)
    return {
        "prompt_id": prompt_id,
        "prompt_ids": prompt,
        "completion_ids": completion,
        "block_size": len(blocks[0]),
        "states": states,
        "fixed_points": blocks,
    }


def test_collator_pads_batches_and_respects_max_length():
    rows = [
        trajectory("a", [5, 6, 7, 8], [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19, 20, 21]], completion_tail=[22]),
        trajectory("b", [5, 6], [[30, 31, 32, 33]]),
    ]
    collator = JacobiForcingCollator(PAD, noise_window=2, max_length=20)
    batch = collator(rows)
    # row a: 4 prompt tokens + 2 blocks of 2*4 fit in 20; row b: 2 + 8
    assert batch["input_ids"].shape == (2, 20)
    assert (batch["segment_ids"][1, 10:] == PAD_SEGMENT).all() and (batch["input_ids"][1, 10:] == PAD).all()
    assert batch["ar_targets"][0, -1] == 18  # the first token of the block that did not fit
    assert "attention_mask" not in batch  # the model's own mask is built from segment and position ids
    mask = NoiseAwareMask()(batch["segment_ids"], batch["position_ids"])
    assert mask.dtype == torch.float32 and mask.shape == (2, 1, 20, 20)
    # progressive with W=2: block 0 targets noise 0 (fixed point), block 1 noise 1 (the fully wrong state)
    assert batch["input_ids"][0, 4:8].tolist() == [10, 11, 12, 13]
    assert batch["input_ids"][0, 12:16].tolist() == [3, 3, 3, 3]
    assert batch["teacher_index"][0, 12:16].tolist() == [16, 17, 18, 19]


def test_collator_from_config_takes_the_run_settings_and_pads_to_a_multiple(tmp_path):
    args = JacobiForcingConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        noise_schedule="reverse",
        noise_window=3,
        max_length=40,
        prompt_ar_loss=False,
        seed=5,
        data_seed=7,
        pad_to_multiple_of=8,
    )
    collator = JacobiForcingCollator.from_config(args, pad_token_id=PAD)
    expected = JacobiForcingCollator(PAD, "reverse", 3, 40, prompt_ar_loss=False, seed=7, pad_to_multiple_of=8)
    assert collator == expected
    rows = [trajectory("a", [5, 6, 7], [[10, 11, 12, 13]]), trajectory("b", [5, 6], [[30, 31, 32, 33]])]
    batch = collator(rows)  # 11 tokens at most, padded to 16
    assert {tuple(v.shape) for v in batch.values()} == {(2, 16)}
    assert (batch["segment_ids"][0, 11:] == PAD_SEGMENT).all() and (batch["input_ids"][0, 11:] == PAD).all()
    assert (batch["ar_targets"][:, 11:] == IGNORE_INDEX).all() and (batch["teacher_index"][:, 11:] == -1).all()
    assert JacobiForcingCollator(PAD, pad_to_multiple_of=None)(rows)["input_ids"].shape == (2, 11)
    assert JacobiForcingCollator(PAD, pad_to_multiple_of=11)(rows)["input_ids"].shape == (2, 11)


def test_collator_draws_fresh_views_per_epoch_and_repeats_them_per_seed():
    rows = [trajectory(f"p{i}", [5, 6], [[10 + i, 11, 12, 13]] * 8) for i in range(4)]

    def views(seed, epoch):
        collator = JacobiForcingCollator(PAD, noise_schedule="random", noise_window=4, seed=seed)
        collator.epoch = epoch
        return collator(rows)["input_ids"]

    assert torch.equal(views(0, 0), views(0, 0))
    assert not torch.equal(views(0, 0), views(0, 1))
    assert not torch.equal(views(0, 0), views(1, 0))


# --- the mask --------------------------------------------------------------------------------------------------------


def test_noise_aware_mask_by_hand():
    segments = torch.tensor([[PROMPT, PROMPT, NOISY, NOISY, CLEAN, CLEAN, NOISY, CLEAN, PAD]])
    allowed = noise_aware_mask(segments)[0].int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # k_0
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 0, 0],  # c_0: prompt and itself, never k_0
        [1, 1, 0, 0, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 1, 0, 0],  # k_1: prompt, k_0, itself
        [1, 1, 0, 0, 1, 1, 0, 1, 0],  # c_1: prompt, c_0, itself
        [1, 1, 0, 0, 0, 0, 0, 0, 1],  # padding sees the prompt and itself, so its row is never empty
    ]
    positions = torch.tensor([[0, 1, 2, 3, 2, 3, 4, 4, 0]])
    additive = training_attention_mask(segments, positions, torch.bfloat16)[:, 0]
    assert additive.dtype == torch.bfloat16
    assert (additive[noise_aware_mask(segments)] == 0).all()
    assert (additive[~noise_aware_mask(segments)] == torch.finfo(torch.bfloat16).min).all()
    # a sliding window of 2 positions: k_1 (position 4) no longer sees k_0's position 2, nor the prompt
    sliding = AttentionLayout(kinds=("sliding_attention",), sliding_window=2)
    windowed = training_attention_mask(segments, positions, torch.float32, sliding)[0, 0] == 0
    assert windowed[6].int().tolist() == [0, 0, 0, 1, 0, 0, 1, 0, 0]


def test_clean_past_mask_by_hand():
    # CLLM's view: a noisy block sees the prompt, the clean blocks before it and itself, never another noisy block
    segments = torch.tensor([[PROMPT, PROMPT, NOISY, NOISY, CLEAN, CLEAN, NOISY, CLEAN, PAD]])
    blocks = torch.tensor([[-1, -1, 0, 0, 0, 0, 1, 1, -1]])
    allowed = noise_aware_mask(segments, blocks, noisy_past="clean")[0].int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # k_0
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 0, 0],  # c_0
        [1, 1, 0, 0, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 1, 1, 0, 0],  # k_1: prompt, c_0, itself; not k_0
        [1, 1, 0, 0, 1, 1, 0, 1, 0],  # c_1: as in the noise-aware mask
        [1, 1, 0, 0, 0, 0, 0, 0, 1],
    ]
    with pytest.raises(ValueError, match="noisy_past='clean' needs block_ids"):
        noise_aware_mask(segments, noisy_past="clean")
    with pytest.raises(ValueError, match=r"noisy_past must be one of \['noisy', 'clean'\], got 'none'"):
        noise_aware_mask(segments, blocks, noisy_past="none")


def test_under_a_clean_past_a_noisy_block_does_not_read_the_noisy_blocks_before_it():
    model = tiny_model("llama")
    rows = [trajectory("a", [5, 6, 7], [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19, 20, 21]])]
    batch = JacobiForcingCollator(PAD, noise_schedule="random", noise_window=3, seed=1)(rows)
    noisy = (batch["segment_ids"][0] == NOISY).nonzero().flatten().tolist()
    first = [i for i in noisy if batch["block_ids"][0, i] == 0]
    later = [i for i in noisy if batch["block_ids"][0, i] > 0]
    changed = batch["input_ids"].clone()
    changed[0, first] = 99  # block 0's noisy tokens only

    def logits(ids, past):
        mask = NoiseAwareMask(noisy_past=past)(batch["segment_ids"], batch["position_ids"], batch["block_ids"])
        with torch.no_grad():
            return model(input_ids=ids, position_ids=batch["position_ids"], attention_mask=mask).logits[0]

    torch.testing.assert_close(logits(changed, "clean")[later], logits(batch["input_ids"], "clean")[later])
    assert not torch.allclose(logits(changed, "noisy")[later], logits(batch["input_ids"], "noisy")[later])


def test_noise_aware_mask_refuses_flash_attention():
    model = tiny_model("llama")
    assert NoiseAwareMask.for_model(model) == NoiseAwareMask(AttentionLayout.from_config(model.config), torch.float32)
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="'flash_attention_2' cannot express"):
        NoiseAwareMask.for_model(flash)


def unpacked_logits(model, prompt, blocks, upto):
    """Logits of a plain causal forward over prompt + blocks[0..upto], at consecutive positions."""
    ids = torch.tensor([prompt + [t for block in blocks[: upto + 1] for t in block]])
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -len(blocks[upto]) :]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logits_equal_the_unpacked_views_the_mask_allows(family, attn):
    model = tiny_model(family, attn_implementation=attn)
    gen = torch.Generator().manual_seed(3)
    rows = []
    for i, (prompt_len, num_blocks) in enumerate([(5, 3), (3, 2)]):
        prompt = torch.randint(3, 120, (prompt_len,), generator=gen).tolist()
        blocks = [torch.randint(3, 120, (4,), generator=gen).tolist() for _ in range(num_blocks)]
        rows.append(trajectory(f"r{i}", prompt, blocks))
    batch = JacobiForcingCollator(PAD, noise_schedule="random", noise_window=4)(rows)
    mask = NoiseAwareMask.for_model(model)(batch["segment_ids"], batch["position_ids"])
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=mask).logits
    for row, example in enumerate(rows):
        prompt, n = example["prompt_ids"], example["block_size"]
        ids = batch["input_ids"][row].tolist()
        noisy = [
            ids[len(prompt) + 2 * j * n : len(prompt) + (2 * j + 1) * n] for j in range(len(example["fixed_points"]))
        ]
        for j in range(len(example["fixed_points"])):
            start = len(prompt) + 2 * j * n
            torch.testing.assert_close(packed[row, start : start + n], unpacked_logits(model, prompt, noisy, j))
            torch.testing.assert_close(
                packed[row, start + n : start + 2 * n], unpacked_logits(model, prompt, example["fixed_points"], j)
            )


def packed_and_clean_logits(model, batch, view: CleanView) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed forward's logits (under the noise-aware mask) and the clean view's at its targeted columns."""
    mask = NoiseAwareMask.for_model(model)(batch["segment_ids"], batch["position_ids"])
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=mask).logits
        clean = model(
            input_ids=view.input_ids,
            position_ids=view.position_ids,
            attention_mask=view.attention_mask,
            logits_to_keep=view.targeted_columns(),
        ).logits
    return packed, clean


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_clean_view_gives_the_packed_forwards_predictions_at_every_ar_target(family):
    """The KL anchor's base forward runs on the clean view alone: its logits at the AR targets must be the packed
    forward's, for rows of different lengths (right padding) and for the prompt's last token (the bridge to c_0)."""
    model = tiny_model(family)
    gen = torch.Generator().manual_seed(5)
    rows = []
    for i, (prompt_len, num_blocks) in enumerate([(5, 3), (3, 1), (7, 2)]):
        prompt = torch.randint(3, 120, (prompt_len,), generator=gen).tolist()
        blocks = [torch.randint(3, 120, (4,), generator=gen).tolist() for _ in range(num_blocks)]
        rows.append(trajectory(f"r{i}", prompt, blocks))
    batch = JacobiForcingCollator(PAD, noise_schedule="random", noise_window=4)(rows)
    view = CleanView.of(batch["input_ids"], batch["position_ids"], batch["segment_ids"], batch["ar_targets"])
    assert view.attention_mask.sum(1).tolist() == [5 + 12, 3 + 4, 7 + 8]
    assert view.position_ids[0, :17].tolist() == list(range(17))  # one causal sequence, no gap
    columns = view.targeted_columns()
    packed, clean = packed_and_clean_logits(model, batch, view)
    targeted = view.ar_targets[:, columns] != IGNORE_INDEX
    assert int(targeted.sum()) == int((batch["ar_targets"] != IGNORE_INDEX).sum())
    for row in range(len(rows)):
        packed_columns = view.order[row, columns][targeted[row]]
        assert (batch["ar_targets"][row, packed_columns] == view.ar_targets[row, columns][targeted[row]]).all()
        torch.testing.assert_close(clean[row][targeted[row]], packed[row, packed_columns], atol=2e-5, rtol=1e-4)


def anchor_row(prompt_id, text):
    """An anchor-text row as `with_anchor_texts` lays it out among trajectory rows."""
    return {
        "prompt_id": prompt_id,
        "prompt_ids": text,
        "completion_ids": [],
        "block_size": 4,
        "states": [],
        "fixed_points": [],
        ANCHOR_TEXT: True,
    }


def test_an_anchor_text_is_packed_alone_anchored_everywhere_with_nothing_else_to_learn():
    rows = [
        {**trajectory("t", [5, 6, 7], [[10, 11, 12, 13], [14, 15, 16, 17]]), ANCHOR_TEXT: False},
        anchor_row("a", [40, 41, 42, 43, 44, 45]),
    ]
    batch = JacobiForcingCollator(PAD, noise_window=2, max_length=5)(rows[1:])
    # cut to max_length, a causal span from position 0, every prediction anchored but the last (which has no target)
    assert batch["input_ids"].tolist() == [[40, 41, 42, 43, 44]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4]]
    assert batch["segment_ids"].tolist() == [[Segment.PROMPT] * 5]
    assert batch["anchored"].tolist() == [[True, True, True, True, False]]
    assert (batch["ar_targets"] == IGNORE_INDEX).all() and (batch["teacher_index"] == NO_TEACHER).all()
    assert (batch["block_ids"] == NO_BLOCK).all()
    # beside a trajectory: the trajectory's anchored tokens are exactly its AR targets, padding is never anchored
    batch = JacobiForcingCollator(PAD, noise_window=2)(rows)
    assert (batch["anchored"][0] == (batch["ar_targets"][0] != IGNORE_INDEX)).all()
    assert batch["anchored"][1].tolist() == [True] * 5 + [False] * (batch["input_ids"].shape[1] - 5)


def test_the_clean_view_of_an_anchor_text_gives_a_plain_forward_over_the_text():
    """What the KL anchor compares on an anchor text: the packed forward's and the base's clean-view logits at every
    anchored token are those of an ordinary causal forward over the text."""
    model = tiny_model("llama")
    text = [40, 41, 42, 43, 44, 45, 46]
    rows = [trajectory("t", [5, 6, 7], [[10, 11, 12, 13], [14, 15, 16, 17]]), anchor_row("a", text)]
    rows[0][ANCHOR_TEXT] = False
    batch = JacobiForcingCollator(PAD, noise_window=2)(rows)
    view = CleanView.of(
        batch["input_ids"], batch["position_ids"], batch["segment_ids"], batch["ar_targets"], batch["anchored"]
    )
    columns = view.targeted_columns()
    packed, clean = packed_and_clean_logits(model, batch, view)
    with torch.no_grad():
        plain = model(torch.tensor([text])).logits[0, :-1]
    anchored = view.anchored[1, columns]
    assert int(anchored.sum()) == len(text) - 1
    torch.testing.assert_close(clean[1][anchored], plain, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(packed[1, : len(text) - 1], plain, atol=2e-5, rtol=1e-4)


def test_flex_attention_block_mask_gives_the_same_logits():
    pytest.importorskip("torch.nn.attention.flex_attention")
    from hf_jacobi.training.masks import noise_aware_block_mask

    sdpa = tiny_model("qwen3")  # mixed full and sliding layers: a dict of masks
    flex = tiny_model("qwen3", attn_implementation="flex_attention")
    layout = AttentionLayout.from_config(sdpa.config)
    rows = [trajectory("a", [5, 6, 7], [[10, 11, 12, 13], [14, 15, 16, 17]]), trajectory("b", [8], [[20, 21, 22, 23]])]
    batch = JacobiForcingCollator(PAD, noise_window=2)(rows)
    block_masks = noise_aware_block_mask(batch["segment_ids"], batch["position_ids"], layout)
    assert NoiseAwareMask.for_model(flex) == NoiseAwareMask(layout=layout, flex=True)
    with torch.no_grad():
        expected = sdpa(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=training_attention_mask(batch["segment_ids"], batch["position_ids"], torch.float32, layout),
        ).logits
        got = flex(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=block_masks).logits
    real = batch["segment_ids"] != PAD_SEGMENT
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-4)
    # and CLLM's clean past, which reads the block numbers too
    ids = batch["block_ids"]
    clean = noise_aware_block_mask(batch["segment_ids"], batch["position_ids"], layout, ids, noisy_past="clean")
    additive = training_attention_mask(
        batch["segment_ids"], batch["position_ids"], torch.float32, layout, ids, "clean"
    )
    with torch.no_grad():
        expected = sdpa(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=additive
        ).logits
        got = flex(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=clean).logits
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-4)
