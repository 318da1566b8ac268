"""The Jacobi Forcing losses, and their normalization over the whole accumulated batch."""

from __future__ import annotations

import math

import datasets
import pytest
import torch

from hf_jacobi import JacobiForcingTrainer
from hf_jacobi.training.losses import IGNORE_INDEX, LossItems, ar_loss, base_kl_loss, consistency_loss
from test_training import config
from test_training_data import trajectory
from tiny_models import fresh_tiny_model, tiny_tokenizer


def test_consistency_loss_by_hand():
    # one row: tokens 0-1 noisy block 0 (token 1 is a student of token 3), tokens 2-3 clean block 0,
    # tokens 4-5 noisy block 1 (both students of 6-7), tokens 6-7 clean block 1
    logits = torch.zeros(1, 8, 2)
    logits[0, 1] = torch.tensor([0.0, math.log(3)])  # student p = (1/4, 3/4)
    logits[0, 3] = torch.tensor([math.log(3), 0.0])  # teacher q = (3/4, 1/4)
    logits[0, 4] = torch.tensor([0.0, 0.0])  # student (1/2, 1/2)
    logits[0, 6] = torch.tensor([0.0, 0.0])  # teacher (1/2, 1/2)
    logits[0, 5] = torch.tensor([math.log(3), 0.0])  # student (3/4, 1/4)
    logits[0, 7] = torch.tensor([0.0, 0.0])  # teacher (1/2, 1/2)
    teacher_index = torch.tensor([[-1, 3, -1, -1, 6, 7, -1, -1]])
    block_ids = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    ce_1 = -(0.75 * math.log(0.25) + 0.25 * math.log(0.75))
    ce_4 = math.log(2)
    ce_5 = -(0.5 * math.log(0.75) + 0.5 * math.log(0.25))
    blocks = (ce_1 + (ce_4 + ce_5) / 2) / 2
    tokens = (ce_1 + ce_4 + ce_5) / 3
    assert consistency_loss(logits, teacher_index, block_ids, "blocks").item() == pytest.approx(blocks)
    assert consistency_loss(logits, teacher_index, block_ids, "tokens").item() == pytest.approx(tokens)
    # the reference code's: the row's token mean divided by its 2 blocks (then the mean over rows: one here)
    assert consistency_loss(logits, teacher_index, block_ids, "reference").item() == pytest.approx(tokens / 2)
    # hard targets: the teacher's most likely token (0 at every teacher here), or the fixed point's where given
    hard = (-math.log(0.25) + math.log(2) - math.log(0.75)) / 3
    assert consistency_loss(logits, teacher_index, block_ids, "tokens", targets="fixed_point").item() == pytest.approx(
        hard
    )
    fixed_points = torch.full((1, 8), IGNORE_INDEX)
    fixed_points[0, 3] = 1  # token 3 (token 1's teacher) predicts token 1: student p(1) = 3/4
    hard_known = (-math.log(0.75) + math.log(2) - math.log(0.75)) / 3
    found_hard = consistency_loss(
        logits, teacher_index, block_ids, "tokens", targets="fixed_point", fixed_points=fixed_points
    )
    assert found_hard.item() == pytest.approx(hard_known)
    # the diagnostics: the teachers' entropy (the floor of the soft cross entropy) and the argmax agreement
    found: dict[str, torch.Tensor] = {}
    assert consistency_loss(logits, teacher_index, block_ids, "tokens", diagnostics=found).item() == pytest.approx(
        tokens
    )
    h_q = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert found["teacher_entropy"].item() == pytest.approx(h_q + 2 * math.log(2))  # sums over the noisy tokens
    assert found["agreement"].item() == 2  # token 1 disagrees; 4 and 5 agree (argmax 0 both)
    # a converged block (no student) still counts in the number of blocks
    teacher_index[0, 1] = -1
    assert consistency_loss(logits, teacher_index, block_ids).item() == pytest.approx((ce_4 + ce_5) / 2 / 2)
    # the teacher is detached: only the students get gradients
    logits.requires_grad_(True)
    consistency_loss(logits, teacher_index, block_ids).backward()
    assert logits.grad[0, [6, 7]].abs().sum() == 0 and logits.grad[0, [4, 5]].abs().sum() > 0


def test_ar_loss_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]]]))
    targets = torch.tensor([[0, IGNORE_INDEX, 2]])
    assert ar_loss(logits, targets).item() == pytest.approx((math.log(2) + math.log(3)) / 2)
    assert ar_loss(logits, torch.full_like(targets, IGNORE_INDEX)).item() == 0
    # under gradient accumulation the sum is divided by the targets of the whole accumulated batch
    assert ar_loss(logits, targets, num_items=5).item() == pytest.approx((math.log(2) + math.log(3)) / 5)


def test_base_kl_loss_by_hand():
    # KL(base || model) at the targeted tokens only, divided like the AR loss; gradients reach the model only
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.25, 0.75]]])).requires_grad_(True)
    base = torch.log(torch.tensor([[[0.75, 0.25], [0.5, 0.5], [0.25, 0.75]]])).requires_grad_(True)
    anchored = torch.tensor([[True, False, True]])
    kl_0 = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert base_kl_loss(logits, base, anchored).item() == pytest.approx(kl_0 / 2)  # token 2: the same distribution
    assert base_kl_loss(logits, base, anchored, num_items=4).item() == pytest.approx(kl_0 / 4)
    assert base_kl_loss(logits, logits, anchored).item() == pytest.approx(0.0, abs=1e-7)
    assert base_kl_loss(logits, base, torch.zeros_like(anchored)).item() == 0
    base_kl_loss(logits, base, anchored).backward()
    assert base.grad is None and logits.grad[0, 0].abs().sum() > 0 and logits.grad[0, 1].abs().sum() == 0


def test_loss_items_count_targets_and_blocks_or_students_over_all_micro_batches():
    first = {
        "ar_targets": torch.tensor([[5, IGNORE_INDEX, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]),
        "teacher_index": torch.tensor([[-1, 2, -1, -1], [-1, -1, -1, -1]]),
        "block_ids": torch.tensor([[-1, 0, 0, 1], [-1, 0, -1, -1]]),
    }
    second = {
        "ar_targets": torch.tensor([[IGNORE_INDEX, 9]]),
        "teacher_index": torch.tensor([[1, -1]]),
        "block_ids": torch.tensor([[0, 0]]),
    }
    # without the collator's `anchored`, the anchor reads the AR targets' tokens
    assert tuple(LossItems.count([first, second], "blocks")) == (5, 4, 5)  # blocks: 2 + 1 in the first batch, 1
    assert tuple(LossItems.count([first, second], "tokens")) == (5, 2, 5)  # students: 1 and 1
    assert tuple(LossItems.count([first, second], "reference")) == (5, 3, 5)  # rows with a block: 2 and 1
    # an anchor text (no AR target, no block) adds anchored predictions only
    text = {
        "ar_targets": torch.full((1, 4), IGNORE_INDEX),
        "teacher_index": torch.full((1, 4), -1),
        "block_ids": torch.full((1, 4), -1),
        "anchored": torch.tensor([[True, True, True, False]]),
    }
    assert tuple(LossItems.count([first, text], "blocks")) == (4, 3, 7)


@pytest.mark.parametrize(
    ("normalization", "targets", "past"),
    [("blocks", "soft", "noisy"), ("tokens", "soft", "noisy"), ("reference", "soft", "noisy"),
     ("blocks", "fixed_point", "clean")],
)  # fmt: skip
def test_gradient_accumulation_gives_the_update_of_one_large_batch(tmp_path, normalization, targets, past):
    # rows of different lengths, blocks and noise: a mean per micro-batch would weigh the items of short rows more
    gen = torch.Generator().manual_seed(0)
    rows = []
    for i, (prompt_len, num_blocks) in enumerate([(2, 1), (7, 3), (4, 2), (3, 4)]):
        prompt = torch.randint(3, 120, (prompt_len,), generator=gen).tolist()
        blocks = [torch.randint(3, 120, (4,), generator=gen).tolist() for _ in range(num_blocks)]
        rows.append(trajectory(f"r{i}", prompt, blocks))
    trajectories = datasets.Dataset.from_list(rows)

    def update(batch_size: int, accumulation: int) -> dict[str, torch.Tensor]:
        model = fresh_tiny_model("llama")
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        args = config(
            tmp_path / f"b{batch_size}",
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            optim="sgd",
            learning_rate=1.0,  # with plain SGD the update is the gradient itself
            max_grad_norm=0.0,
            consistency_normalization=normalization,
            consistency_targets=targets,
            noisy_past=past,
            noise_schedule="random",
        )
        trainer = JacobiForcingTrainer(model, args=args, train_dataset=trajectories, processing_class=tiny_tokenizer())
        trainer.train()
        return {name: before[name] - p.detach() for name, p in model.named_parameters()}

    accumulated, whole = update(1, 4), update(4, 1)
    for name, delta in whole.items():
        assert delta.abs().sum() > 0, name
        torch.testing.assert_close(accumulated[name], delta, rtol=1e-4, atol=1e-6, msg=name)
