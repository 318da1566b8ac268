"""Trajectory collection and the trainer (collator, LoRA, gradient checkpointing, resume); the losses are in
test_training_losses.py."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import datasets
import pytest
import torch
from peft import LoraConfig
from transformers import DataCollatorWithPadding, TrainerCallback

from hf_jacobi import (
    JacobiForcingCollator,
    JacobiForcingConfig,
    JacobiForcingTrainer,
    collect_trajectories,
    enable_jacobi,
    load_trajectories,
)
from hf_jacobi.data import collection
from tiny_models import EOS, PAD, fresh_tiny_model, tiny_tokenizer


def tiny_prompts(count: int) -> datasets.Dataset:
    rows = []
    for i in range(count):
        words = " ".join(f"t{(i * 7 + j * 3) % 120 + 3}" for j in range(4 + i % 3))
        rows.append({"prompt_id": f"p{i:02d}", "messages": [{"role": "user", "content": words}]})
    return datasets.Dataset.from_list(rows)


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory) -> datasets.Dataset:
    folder = tmp_path_factory.mktemp("trajectories")
    model = fresh_tiny_model("llama")
    collect_trajectories(
        model, tiny_tokenizer(), tiny_prompts(4), folder, block_size=4, max_new_tokens=16, batch_size=2, progress=False
    )
    return load_trajectories(folder)


def trajectory_folder(dataset: datasets.Dataset, folder: Path) -> Path:
    """`dataset` written as a one-shard trajectory folder, as `hf-jacobi train --trajectories` reads it."""
    folder.mkdir()
    dataset.to_parquet(str(folder / "trajectories-r000-00000.parquet"))
    return folder


# --- collection ------------------------------------------------------------------------------------------------------


def test_collected_rows_hold_every_state_from_initial_draft_to_fixed_point(trajectories):
    assert trajectories["prompt_id"] == ["p00", "p01", "p02", "p03"]
    for row in trajectories:
        assert row["block_size"] == 4
        assert len(row["states"]) == len(row["completion_ids"]) // 4
        for j, states in enumerate(row["states"]):
            assert states[-1] == row["fixed_points"][j] == row["completion_ids"][4 * j : 4 * j + 4]
            assert len(states) >= 2  # the random initial draft is kept, not aliased to the fixed point


class FakeProcess:
    """Stands in for accelerate's PartialState of one process among several."""

    def __init__(self, index: int, count: int) -> None:
        self.process_index, self.num_processes = index, count
        self.is_main_process = index == 0

    def wait_for_everyone(self) -> None:
        pass


def test_processes_write_disjoint_shards_and_an_interrupted_run_resumes(tmp_path, monkeypatch):
    model, tokenizer, prompts = fresh_tiny_model("llama"), tiny_tokenizer(), tiny_prompts(7)
    settings = dict(block_size=4, max_new_tokens=8, batch_size=2, shard_size=2, progress=False)
    # process 1 of 2 runs to the end; process 0 is "interrupted" after its first 2 prompts (0 and 2)
    monkeypatch.setattr(collection, "process_state", lambda: FakeProcess(1, 2))
    collect_trajectories(model, tokenizer, prompts, tmp_path, **settings)
    monkeypatch.setattr(collection, "process_state", lambda: FakeProcess(0, 2))
    collect_trajectories(model, tokenizer, prompts.select([0, 1, 2]), tmp_path, **settings)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == [
        "trajectories-r000-00000.parquet",
        "trajectories-r001-00000.parquet",
        "trajectories-r001-00001.parquet",
    ]
    collect_trajectories(model, tokenizer, prompts, tmp_path, **settings)  # resume: only 4 and 6 are left
    done = load_trajectories(tmp_path)
    assert done["prompt_id"] == [f"p{i:02d}" for i in range(7)]  # none lost, none twice
    monkeypatch.setattr(collection, "process_state", lambda: FakeProcess(0, 1))
    fresh = tmp_path / "single"
    collect_trajectories(model, tokenizer, prompts, fresh, **settings)
    assert load_trajectories(fresh)["states"] == done["states"]  # splitting does not change what is recorded


def test_collection_refuses_mixed_settings_and_bad_values(tmp_path):
    model, tokenizer, prompts = fresh_tiny_model("llama"), tiny_tokenizer(), tiny_prompts(1)
    collect_trajectories(model, tokenizer, prompts, tmp_path, block_size=4, max_new_tokens=8, progress=False)
    with pytest.raises(ValueError, match="block_size: 4 on disk, 8 now"):
        collect_trajectories(model, tokenizer, prompts, tmp_path, block_size=8, max_new_tokens=8, progress=False)
    with pytest.raises(ValueError, match="block_size must be an integer >= 2, got 1"):
        collect_trajectories(model, tokenizer, prompts, tmp_path / "x", block_size=1)
    with pytest.raises(ValueError, match=r"max_new_tokens \(4\) must be at least block_size \(8\)"):
        collect_trajectories(model, tokenizer, prompts, tmp_path / "x", block_size=8, max_new_tokens=4)
    with pytest.raises(ValueError, match="lacks the columns"):
        collect_trajectories(model, tokenizer, prompts.remove_columns("messages"), tmp_path / "x")
    with pytest.raises(ValueError, match="no trajectory shards"):
        load_trajectories(tmp_path / "empty")


# --- the trainer -----------------------------------------------------------------------------------------------------


def config(tmp_path, **overrides) -> JacobiForcingConfig:
    values = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=4,
        learning_rate=1e-3,
        warmup_ratio=0.0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        noise_window=4,
        seed=3,
    )
    values.update(overrides)
    return JacobiForcingConfig(**values)


def test_trainer_logs_both_losses_and_updates_the_model(tmp_path, trajectories):
    model = fresh_tiny_model("qwen2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = JacobiForcingTrainer(
        model,
        args=config(tmp_path, gradient_accumulation_steps=2),
        train_dataset=trajectories,
        eval_dataset=trajectories,
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    assert {"consistency_loss", "ar_loss", "loss"} <= logged.keys()
    # the soft cross entropy's floor (the teachers' entropy, per noisy token) and the argmax agreement, a share
    assert 0 < logged["consistency_teacher_entropy"] <= math.log(model.config.vocab_size) + 1e-4
    assert 0.0 <= logged["consistency_agreement"] <= 1.0
    # each micro-batch holds a share of the accumulated loss; the logged terms still add up to the step's loss
    assert logged["loss"] == pytest.approx(logged["consistency_loss"] + logged["ar_loss"], rel=1e-4)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    evaluated = trainer.evaluate()
    assert evaluated["eval_loss"] == pytest.approx(evaluated["eval_consistency_loss"] + evaluated["eval_ar_loss"])
    # the acceptance probe on the eval trajectories, beside the losses and in the log history
    assert evaluated["eval_probe/tokens_per_iteration"] >= 1.0 and 0.0 <= evaluated["eval_probe/depth0_rate"] <= 1.0
    assert any("eval_probe/tokens_per_iteration" in entry for entry in trainer.state.log_history)
    trainer.args.eval_probe_trajectories = 0
    assert not any(key.startswith("eval_probe/") for key in trainer.evaluate())
    with pytest.raises(ValueError, match=r"eval_probe_trajectories must be an integer >= 0 .* got -1"):
        config(tmp_path, eval_probe_trajectories=-1)


def _divergence_from(base, model, trajectories) -> float:
    """Mean KL(base || model) of the next-token distributions over the trajectories' prompt + answer tokens."""
    total, count = 0.0, 0
    with torch.no_grad():
        for row in trajectories:
            ids = torch.tensor([row["prompt_ids"] + row["completion_ids"]])
            p = base(ids).logits.log_softmax(-1)
            q = model(ids).logits.log_softmax(-1)
            total += torch.nn.functional.kl_div(q, p, log_target=True, reduction="sum").item()
            count += ids.shape[1]
    return total / count


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_base_kl_anchor_holds_the_model_to_its_distribution_before_training(tmp_path, trajectories, lora):
    """The anchor is 0 at the first step (the model is its base), enters the loss with its weight, leaves the base
    untouched (frozen copy, or the adapter switched off), and keeps the trained model closer to the base than the same
    run without it."""
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")

    def train(weight: float):
        model = fresh_tiny_model("llama")
        trainer = JacobiForcingTrainer(
            model,
            args=config(tmp_path / str(weight), max_steps=8, learning_rate=1e-2, base_kl_weight=weight),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
            peft_config=peft_config if lora else None,
        )
        trainer.train()
        return trainer

    anchored, free = train(10.0), train(0.0)
    history = [h for h in anchored.state.log_history if "base_kl" in h]
    assert len(history) == 8 and history[0]["base_kl"] == pytest.approx(0.0, abs=1e-6) and history[-1]["base_kl"] > 0
    first = history[0]
    assert first["loss"] == pytest.approx(
        first["consistency_loss"] + first["ar_loss"] + 10 * first["base_kl"], rel=1e-4
    )
    assert not any("base_kl" in h for h in free.state.log_history)
    base = fresh_tiny_model("llama").eval()
    if lora:
        assert anchored._frozen_base is None  # no copy: the adapter is switched off
        with anchored.model.disable_adapter():
            assert _divergence_from(base, anchored.model, trajectories) == 0
    else:
        frozen = anchored._frozen_base.state_dict()
        assert frozen.keys() == base.state_dict().keys()
        assert all(torch.equal(value, frozen[name]) for name, value in base.state_dict().items())
    near = _divergence_from(base, anchored.model.eval(), trajectories)
    far = _divergence_from(base, free.model.eval(), trajectories)
    assert 0 < near < far / 2


def anchor_texts(count: int = 6) -> datasets.Dataset:
    gen = torch.Generator().manual_seed(8)
    texts = [torch.randint(3, 120, (10 + i,), generator=gen).tolist() for i in range(count)]
    return datasets.Dataset.from_dict({"text_id": [f"x{i}" for i in range(count)], "input_ids": texts})


def _text_divergence(base, model, texts: datasets.Dataset) -> float:
    """KL(base || model) per token over plain forwards of the texts, as the anchor defines it."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids in texts["input_ids"]:
            ids = torch.tensor([ids])
            p = base(ids).logits[0, :-1].log_softmax(-1)
            q = model(ids).logits[0, :-1].log_softmax(-1)
            total += torch.nn.functional.kl_div(q, p, log_target=True, reduction="sum").item()
            count += ids.shape[1] - 1
    return total / count


def test_anchor_texts_carry_the_kl_anchor_onto_text_the_model_did_not_write(tmp_path, trajectories):
    """An anchor text's only loss is KL(base || model) over its predictions, the same as plain forwards give; and a
    run that mixes anchor texts in stays closer to the base on them than the same run without."""
    texts = anchor_texts()
    base = fresh_tiny_model("llama").eval()
    # a model away from its base: a LoRA whose B is not zero
    drifted = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(tmp_path / "loss", base_kl_weight=3.0),
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
        peft_config=drifted,
        anchor_dataset=texts,
    )
    assert len(trainer.train_dataset) == len(trajectories) + len(texts)
    assert sorted(trainer.train_dataset["prompt_id"])[: len(texts)] == [f"anchor/x{i}" for i in range(len(texts))]
    batch = trainer.data_collator([row for row in trainer.train_dataset if row["prompt_id"] == "anchor/x0"])
    loss = trainer.compute_loss(trainer.model.train(), batch)
    expected = _text_divergence(base, trainer.model.eval(), texts.select([0]))
    assert expected > 1e-4
    assert loss.item() == pytest.approx(3.0 * expected, rel=1e-4)
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    assert metrics["ar_loss"] == 0 and metrics["consistency_loss"] == 0

    def train(mixed: bool):
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        run = JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path / str(mixed), max_steps=12, learning_rate=1e-2, base_kl_weight=1.0),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
            peft_config=lora,
            anchor_dataset=texts if mixed else None,
        )
        run.train()
        return _text_divergence(base, run.model.eval(), texts)

    near, far = train(True), train(False)
    print(f"KL on the anchor texts: {near:.5f} with them in training, {far:.5f} without")
    assert 0 < near < far / 2


def test_anchor_texts_need_the_kl_anchor_and_token_ids(tmp_path, trajectories):
    args = dict(train_dataset=trajectories, processing_class=tiny_tokenizer())
    with pytest.raises(ValueError, match=r"anchor_dataset is read only by the KL anchor, which is off"):
        JacobiForcingTrainer(fresh_tiny_model("llama"), args=config(tmp_path), anchor_dataset=anchor_texts(), **args)
    raw = datasets.Dataset.from_dict({"text_id": ["a"], "text": ["def f(): pass"]})
    with pytest.raises(ValueError, match=r"lack the column\(s\) \['input_ids'\].*encode_anchor_texts"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"), args=config(tmp_path, base_kl_weight=1.0), anchor_dataset=raw, **args
        )
    one_token = datasets.Dataset.from_dict({"text_id": ["a"], "input_ids": [[5]]})
    with pytest.raises(ValueError, match=r"1 anchor texts hold fewer than 2 tokens .*'a'"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"), args=config(tmp_path, base_kl_weight=1.0), anchor_dataset=one_token, **args
        )


def test_train_mixes_anchor_texts_from_a_file_into_its_rows(tmp_path, trajectories, monkeypatch):
    """`hf-jacobi train --anchor_texts FILE --num_anchor_texts N`: N texts join the 4 trajectories (batch 2, one epoch:
    3 steps instead of 2), and the run logs the anchor; without the anchor on, with a count and no texts, or with an
    unknown source, it stops before the model loads."""
    from hf_jacobi.cli import main
    from hf_jacobi.cli import train as scripts

    tokenizer = tiny_tokenizer()
    fresh_tiny_model("llama").save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    data = trajectory_folder(trajectories, tmp_path / "trajectories")
    texts = tmp_path / "code.jsonl"
    texts.write_text("\n".join(f'{{"text": "t{i} t9 t8 t7 t{i + 20} t5"}}' for i in range(3, 6)))
    argv = ["train", "--model_name_or_path", str(tmp_path / "model"), "--trajectories", str(data),
            "--output_dir", str(tmp_path / "out"), "--num_train_epochs", "1", "--per_device_train_batch_size", "2",
            "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--save_strategy", "no",
            "--noise_window", "4", "--logging_steps", "1", "--anchor_texts", str(texts)]  # fmt: skip
    assert main([*argv, "--base_kl_weight", "1", "--num_anchor_texts", "2"]) == 0
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert sum("base_kl" in entry for entry in state["log_history"]) == 3

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the anchor settings were checked")

    monkeypatch.setattr(scripts, "load_model_and_tokenizer", no_load)
    argv = argv[1:]  # run_train raises where main prints the error and exits 2
    with pytest.raises(ValueError, match=r"anchor_texts='.*code.jsonl' is read only by the KL anchor, which is off"):
        scripts.run_train(argv)
    with pytest.raises(ValueError, match=r"num_anchor_texts=2 needs anchor_texts"):
        scripts.run_train([*argv[:-2], "--base_kl_weight", "1", "--num_anchor_texts", "2"])
    with pytest.raises(ValueError, match=r"num_anchor_texts must be >= 1, got 0"):
        scripts.run_train([*argv, "--base_kl_weight", "1", "--num_anchor_texts", "0"])
    with pytest.raises(ValueError, match=r"unknown anchor text source 'nope': use one of \['packages-source'\]"):
        scripts.run_train([*argv[:-1], "nope", "--base_kl_weight", "1"])


def test_the_collator_is_built_from_the_config_or_taken_as_given(tmp_path, trajectories):
    tokenizer = tiny_tokenizer()
    tokenizer.pad_token = None  # the EOS token pads then, as in SFTTrainer
    args = config(tmp_path, pad_to_multiple_of=8, data_seed=11, max_length=64)
    built = JacobiForcingTrainer(
        fresh_tiny_model("llama"), args=args, train_dataset=trajectories, processing_class=tokenizer
    ).data_collator
    assert built == JacobiForcingCollator(EOS, "progressive", 4, max_length=64, seed=11, pad_to_multiple_of=8)
    given = JacobiForcingCollator(PAD, noise_window=2)
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=args,
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
        data_collator=given,
    )
    assert trainer.data_collator is given and given == JacobiForcingCollator(PAD, noise_window=2)
    with pytest.raises(TypeError, match=r"must be a JacobiForcingCollator.*got DataCollatorWithPadding"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=args,
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
            data_collator=DataCollatorWithPadding(tiny_tokenizer()),
        )


def test_lora_trains_only_the_adapter_and_gradient_checkpointing_runs(tmp_path, trajectories):
    model = fresh_tiny_model("llama")
    base = {k: v.clone() for k, v in model.state_dict().items()}
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = JacobiForcingTrainer(
        model,
        args=config(tmp_path, gradient_checkpointing=True),
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
        peft_config=lora,
    )
    trainer.train()
    trained = trainer.model
    names = [n for n, p in trained.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    merged = trained.merge_and_unload().state_dict()
    assert any(not torch.equal(base[k], merged[k]) for k in ("model.layers.0.self_attn.q_proj.weight",))
    assert torch.equal(base["model.layers.0.mlp.up_proj.weight"], merged["model.layers.0.mlp.up_proj.weight"])


def test_a_second_round_keeps_training_the_round_one_adapter(tmp_path, trajectories):
    """`--init_adapter` loads the round-1 LoRA trainable (its weights, not a fresh adapter) and trains it further;
    an adapter of another rank or modules, or a run without use_peft, is refused by name."""
    from hf_jacobi.cli.train import TrainScriptArguments

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    first = JacobiForcingTrainer(
        fresh_tiny_model("llama"), args=config(tmp_path / "r1"), train_dataset=trajectories,
        processing_class=tiny_tokenizer(), peft_config=lora,
    )  # fmt: skip
    first.train()
    first.save_model(str(tmp_path / "r1"))
    round_one = {k: v.clone() for k, v in first.model.state_dict().items() if "lora_" in k}

    args = TrainScriptArguments(init_adapter=str(tmp_path / "r1"))
    model = args.continued_adapter(fresh_tiny_model("llama"), lora)
    loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert loaded.keys() == round_one.keys() and all(torch.equal(loaded[k], round_one[k]) for k in loaded)
    second = JacobiForcingTrainer(
        model, args=config(tmp_path / "r2"), train_dataset=trajectories, processing_class=tiny_tokenizer()
    )
    second.train()
    trained = {k: v for k, v in second.model.state_dict().items() if "lora_" in k}
    assert trained.keys() == round_one.keys() and any(not torch.equal(trained[k], round_one[k]) for k in trained)

    with pytest.raises(ValueError, match=r"has LoRA rank 4 on \['q_proj', 'v_proj'\], but the run asks for rank 8"):
        args.continued_adapter(fresh_tiny_model("llama"), LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(ValueError, match="continues a LoRA adapter: set use_peft true"):
        args.continued_adapter(fresh_tiny_model("llama"), None)
    with pytest.raises(ValueError, match=r"is not a PEFT adapter folder \(missing \['adapter_config.json'"):
        TrainScriptArguments(init_adapter=str(tmp_path)).continued_adapter(fresh_tiny_model("llama"), lora)


def test_train_refuses_an_adapter_it_cannot_continue_before_loading_the_model(tmp_path, trajectories, monkeypatch):
    """The CLI checks `--init_adapter` against the run's LoRA settings before the base model loads (seconds on a
    small model, minutes on a 7B one)."""
    from hf_jacobi.cli import train as scripts

    data = trajectory_folder(trajectories, tmp_path / "trajectories")
    adapter = tmp_path / "r1"
    fresh_tiny_model("llama").save_pretrained(adapter)  # a model folder, not an adapter

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before --init_adapter was checked")

    monkeypatch.setattr(scripts, "load_model_and_tokenizer", no_load)
    argv = ["--trajectories", str(data), "--output_dir", str(tmp_path / "out"), "--use_cpu", "true",
            "--report_to", "none", "--init_adapter", str(adapter)]  # fmt: skip
    with pytest.raises(ValueError, match="continues a LoRA adapter: set use_peft true"):
        scripts.run_train(argv)
    with pytest.raises(ValueError, match=r"is not a PEFT adapter folder \(missing \['adapter_config.json'"):
        scripts.run_train([*argv, "--use_peft", "true"])


class Interrupt(TrainerCallback):
    """Stops training after a step, as a killed job would (the checkpoint of that step is still written)."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            control.should_training_stop = True


def assert_resume_matches_uninterrupted(make_trainer, tmp_path: Path, break_at: int, compared: int) -> None:
    """Trains `make_trainer(folder)` whole, then interrupted after step `break_at` and resumed from that step's
    checkpoint: the last `compared` logged losses and the final weights must be the uninterrupted run's."""

    def run(folder, callbacks=(), resume=None):
        trainer = make_trainer(folder)
        for callback in callbacks:
            trainer.add_callback(callback)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    whole = run(tmp_path / "whole")
    run(tmp_path / "split", callbacks=[Interrupt(at_step=break_at)])
    resumed = run(tmp_path / "split", resume=str(tmp_path / "split" / f"checkpoint-{break_at}"))
    losses = [e["loss"] for e in whole.state.log_history if "loss" in e]
    resumed_losses = [e["loss"] for e in resumed.state.log_history if "loss" in e]
    assert resumed_losses[-compared:] == pytest.approx(losses[-compared:], rel=1e-5)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


def test_resuming_from_a_checkpoint_matches_an_uninterrupted_run(tmp_path, trajectories):
    # 4 rows, batch 2: 2 steps per epoch; 6 steps span 3 epochs, each with fresh noisy views; the break is mid-epoch
    def make(folder):
        return JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(folder, max_steps=6, save_strategy="steps", save_steps=3, noise_schedule="random"),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
        )

    assert_resume_matches_uninterrupted(make, tmp_path, break_at=3, compared=3)


def test_stop_after_steps_ends_a_run_inside_its_schedule_and_a_resume_past_it_trains_nothing(
    tmp_path, trajectories, monkeypatch
):
    """`--stop_after_steps 2` of a 4-step linear schedule: checkpoint-2 with the learning rate of the 4-step schedule's
    step 2 (max_steps=2 would have decayed faster), the stop named on the card; resumed, nothing more is trained."""
    from hf_jacobi.cli import main
    from hf_jacobi.cli import train as scripts

    fresh_tiny_model("llama").save_pretrained(tmp_path / "model")
    tiny_tokenizer().save_pretrained(tmp_path / "model")
    out = tmp_path / "out"
    argv = ["train", "--model_name_or_path", str(tmp_path / "model"),
            "--trajectories", str(trajectory_folder(trajectories, tmp_path / "trajectories")),
            "--output_dir", str(out), "--max_steps", "4", "--per_device_train_batch_size", "2", "--use_cpu", "true",
            "--bf16", "false", "--report_to", "none", "--save_strategy", "steps", "--save_steps", "1",
            "--learning_rate", "1e-3", "--lr_scheduler_type", "linear", "--warmup_ratio", "0", "--noise_window", "4",
            "--logging_steps", "1", "--stop_after_steps", "2"]  # fmt: skip
    assert main(argv) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert (state["global_step"], state["max_steps"]) == (2, 4)
    rates = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    assert rates == pytest.approx([1e-3, 7.5e-4])
    assert "stopped after step 2" in (out / "README.md").read_text()

    def no_load(*args, **kwargs):
        raise AssertionError("a run already at its stop loaded the model")

    monkeypatch.setattr(scripts, "load_model_and_tokenizer", no_load)
    assert main([*argv, "--resume_from_checkpoint", "last"]) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(out, max_steps=4, stop_after_steps=2),
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
    )
    with pytest.raises(ValueError, match=r"resumed at step 2, at or past stop_after_steps=2: nothing to train"):
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))


def test_stop_after_seconds_and_save_every_seconds_follow_the_clock(tmp_path, trajectories, monkeypatch):
    """A job with a time limit: with 10 s a step (a fake clock), `stop_after_seconds=25` ends the 8-step run after step
    3, the first to end past 25 s, and saves there; `save_every_seconds=15` saved at step 2, the first step ending 15 s
    after the start, and counts again from that save (so not at step 3 for itself)."""
    from transformers import TrainerCallback

    from hf_jacobi.training import stopping

    clock = {"now": 0.0}
    monkeypatch.setattr(stopping.time, "monotonic", lambda: clock["now"])

    class TenSecondSteps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock["now"] += 10.0

    out = tmp_path / "out"
    trainer = JacobiForcingTrainer(
        fresh_tiny_model("llama"),
        args=config(
            out, max_steps=8, save_strategy="steps", save_steps=1000, stop_after_seconds=25, save_every_seconds=15
        ),
        train_dataset=trajectories,
        processing_class=tiny_tokenizer(),
        callbacks=[TenSecondSteps()],
    )
    trainer.train()
    assert trainer.state.global_step == 3 and trainer.state.max_steps == 8
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    for name, bad in (("stop_after_seconds", -1), ("save_every_seconds", 0.5), ("stop_after_seconds", True)):
        with pytest.raises(ValueError, match=rf"{name} must be a number of seconds >= .* or None \(off\), got {bad}"):
            config(tmp_path, **{name: bad})


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without a bfloat16 accelerator gets")
def test_bf16_left_unset_trains_in_float32_on_a_machine_without_a_bfloat16_accelerator(tmp_path):
    """TRL's default (bf16 unless fp16) made a first `hf-jacobi train` on a laptop fail in TrainingArguments."""
    unset = dict(output_dir=str(tmp_path), report_to=[])
    assert JacobiForcingConfig(**unset).bf16 is False
    assert JacobiForcingConfig(**unset, use_cpu=True).bf16 is True  # the CPU's bfloat16 autocast, asked for
    with pytest.raises(
        ValueError, match=r"bf16=True needs an accelerator with bfloat16.*set use_cpu=True \(--use_cpu"
    ):
        JacobiForcingConfig(**unset, bf16=True)


def test_trainer_validates_its_inputs(tmp_path, trajectories, caplog):
    with pytest.raises(ValueError, match="noise_schedule must be one of"):
        config(tmp_path, noise_schedule="linear")
    with pytest.raises(ValueError, match="consistency_normalization"):
        config(tmp_path, consistency_normalization="sum")
    with pytest.raises(ValueError, match=r"consistency_targets must be one of \['soft', 'fixed_point'\], got 'hard'"):
        config(tmp_path, consistency_targets="hard")
    with pytest.raises(ValueError, match=r"noisy_past must be one of \['noisy', 'clean'\], got 'mixed'"):
        config(tmp_path, noisy_past="mixed")
    with pytest.raises(ValueError, match=r"base_kl_weight must be >= 0 \(0 turns the anchor off\), got -1"):
        config(tmp_path, base_kl_weight=-1)
    with pytest.raises(ValueError, match="remove_unused_columns"):
        config(tmp_path, remove_unused_columns=True)
    for stop in (0, 1.5):
        with pytest.raises(ValueError, match=rf"stop_after_steps must be an integer >= 1 or None .*got {stop}"):
            config(tmp_path, stop_after_steps=stop)
    with pytest.raises(ValueError, match="lacks the trajectory columns"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path),
            train_dataset=trajectories.remove_columns("states"),
            processing_class=tiny_tokenizer(),
        )
    with pytest.raises(ValueError, match="none of the 4 train trajectories"):
        JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path, max_length=8),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
        )
    # a prompt too long for max_length is skipped with a count; the others are kept
    longest = max(len(p) for p in trajectories["prompt_ids"])
    with caplog.at_level(logging.WARNING):
        trainer = JacobiForcingTrainer(
            fresh_tiny_model("llama"),
            args=config(tmp_path, max_length=longest + 7),
            train_dataset=trajectories,
            processing_class=tiny_tokenizer(),
        )
    assert 0 < len(trainer.train_dataset) < 4 and "are skipped" in caplog.text


def test_a_model_trained_under_cpu_autocast_decodes_in_its_own_dtype_right_after(tmp_path, trajectories):
    """accelerate wraps the forward in bfloat16 autocast for training and leaves it on; the trainer takes it off, so
    the trained model decodes in float32 right away, and Jacobi decoding is greedy's there."""
    model = fresh_tiny_model("llama")
    args = config(tmp_path, bf16=True, max_steps=2)
    JacobiForcingTrainer(model, args=args, train_dataset=trajectories, processing_class=tiny_tokenizer()).train()
    assert "_original_forward" not in vars(model)
    ids = torch.tensor([trajectories[0]["prompt_ids"]])
    assert model(ids, use_cache=True).past_key_values.layers[0].keys.dtype == torch.float32  # bfloat16 under autocast
    model = enable_jacobi(model)
    greedy = model.generate(ids, max_new_tokens=10, do_sample=False)
    jacobi = model.generate(ids, max_new_tokens=10, do_sample=False, decoding="jacobi", jacobi_block_size=4,
                            jacobi_greedy_devices=[])  # fmt: skip
    assert torch.equal(greedy, jacobi)


def test_trl_checkpointing_setting_is_honoured_without_transformers_deprecation_warning(tmp_path, recwarn):
    """TRL's `gradient_checkpointing` (default on) moves to transformers' `activation_checkpointing`: no warning about
    a name the user did not choose, and the value holds either way it is given."""
    default = JacobiForcingConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    assert default.activation_checkpointing is True and default.gradient_checkpointing is True  # TRL's default
    assert config(tmp_path, gradient_checkpointing=False).activation_checkpointing is False
    newer = JacobiForcingConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], activation_checkpointing=False)
    assert newer.gradient_checkpointing is False
    moved = config(tmp_path, gradient_checkpointing_kwargs={"use_reentrant": False})
    assert moved.activation_checkpointing_kwargs == {"use_reentrant": False}
    assert not [w for w in recwarn if "gradient_checkpointing" in str(w.message)]
