"""`python -m lab compare`: a re-run's outputs checked against committed ones, for each kind of output a stage writes."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import save_file

from lab.__main__ import lab_main
from lab.reproduction import compare, detect_kind


def _row(i: int, states=None) -> dict:
    return {
        "prompt_id": f"p{i}",
        "prompt_ids": [5, 6 + i],
        "completion_ids": [7, 8, 9, 10],
        "block_size": 2,
        "states": states or [[[3, 4], [7, 8]], [[5, 5], [9, 10]]],
        "fixed_points": [[7, 8], [9, 10]],
        "forward_passes": 3,
    }


def _trajectories(folder, rows, model="embedded + adapter-round3"):
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "trajectories-r000-00000.parquet")
    settings = {"block_size": 2, "max_new_tokens": 4, "chat": True, "draft_seed": 0, "model": model}
    (folder / "collection.json").write_text(json.dumps(settings))
    return folder


def test_a_spot_check_of_the_first_prompts_reproduces_and_says_how_many(tmp_path):
    reference = _trajectories(tmp_path / "reference", [_row(i) for i in range(4)])
    rerun = _trajectories(tmp_path / "rerun", [_row(0), _row(1)])
    result = compare(rerun, reference)
    assert detect_kind(reference) == "trajectories"
    assert result.equal and result.checked == 2
    assert "2 of the reference's 4 prompts re-collected" in result.markdown()
    assert result.markdown().startswith("**reproduced** (trajectories)")


def test_trajectories_that_differ_name_the_prompt_the_column_and_the_settings(tmp_path):
    reference = _trajectories(tmp_path / "reference", [_row(i) for i in range(3)])
    changed = _row(1, states=[[[3, 3], [7, 8]], [[5, 5], [9, 10]]])
    rerun = _trajectories(tmp_path / "rerun", [_row(0), changed, _row(7)], model="embedded + adapter-round2")
    result = compare(rerun, reference)
    assert not result.equal
    assert result.checked == 2  # p7 is not in the reference
    text = result.markdown()
    assert "collection.json model: 'embedded + adapter-round2' against 'embedded + adapter-round3'" in text
    assert "prompt 'p1': states" in text
    assert "prompts whose column differs: states in 1" in text
    assert "prompt 'p7' is not in the reference" in text
    assert "p0" not in text.split("differ\n", 1)[1]


def _adapter(folder, tensors, rank=16):
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "target_modules": ["k_proj", "q_proj"]}))
    return folder


def test_adapters_within_the_tolerance_reproduce_and_report_the_largest_gap(tmp_path):
    weights = {"a": np.ones((2, 3), dtype=np.float32), "b": np.zeros(4, dtype=np.float32)}
    reference = _adapter(tmp_path / "reference", weights)
    rerun = _adapter(tmp_path / "rerun", {"a": weights["a"] + 1e-5, "b": weights["b"]})
    result = compare(rerun, reference, atol=1e-4)
    assert detect_kind(reference) == "adapter"
    assert result.equal
    assert result.checked == 3  # two tensors and the config
    assert "largest difference over 2 tensors: 1e-05 (a)" in result.markdown()
    assert not compare(rerun, reference, atol=1e-6).equal


def test_adapters_that_differ_name_the_tensor_and_the_config_key(tmp_path):
    reference = _adapter(
        tmp_path / "reference", {"a": np.ones(3, dtype=np.float32), "b": np.ones(2, dtype=np.float32)}
    )
    rerun = _adapter(tmp_path / "rerun", {"a": np.full(3, 1.5, dtype=np.float32)}, rank=8)
    text = compare(rerun, reference).markdown()
    assert "**differs** (adapter)" in text
    assert "tensor a: largest difference 0.5 > 0.0001" in text
    assert "tensor b is in the reference only" in text
    assert "adapter_config.json.r: 8 against 16" in text


def _run(folder, history, in_checkpoint=False):
    target = folder / "checkpoint-20" if in_checkpoint else folder
    target.mkdir(parents=True)
    (target / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return folder


def _logged(step, loss, runtime=1.0, **more):
    return {
        "step": step,
        "loss": loss,
        "grad_norm": 2.0,
        "num_input_tokens_seen": 100 * step,
        "train_runtime": runtime,
        **more,
    }


def test_a_run_stopped_early_reproduces_the_steps_it_logged(tmp_path):
    reference = _run(
        tmp_path / "reference",
        [
            {"step": 0, "heldout/plain_tokens_per_forward": 1.5},
            _logged(10, 4.7517),
            _logged(20, 4.5576),
            _logged(30, 4.1),
        ],
    )
    # another machine's clock, a last digit of float summation, a step it never reached
    rerun = _run(
        tmp_path / "rerun",
        [
            {"step": 0, "heldout/plain_tokens_per_forward": 1.5},
            _logged(10, 4.75170001, runtime=9.0),
            _logged(20, 4.5576),
        ],
        in_checkpoint=True,
    )
    result = compare(rerun, reference)
    assert detect_kind(reference) == "training log"
    assert result.equal and result.checked == 3
    assert "up to step 20 of the reference's 30" in result.markdown()
    # the reference may be a checkpoint's state, without the summary a finished run adds: shared keys only
    finished = _run(tmp_path / "finished", [_logged(10, 4.7517, train_loss=4.0), _logged(20, 4.5576)])
    assert compare(finished, rerun).equal


def test_a_training_log_that_differs_names_the_step_and_the_figure(tmp_path):
    reference = _run(tmp_path / "reference", [_logged(10, 4.7517), _logged(20, 4.5576)])
    rerun = _run(
        tmp_path / "rerun",
        [_logged(10, 4.7517), {**_logged(20, 4.5576), "num_input_tokens_seen": 1999}, _logged(40, 1.0)],
    )
    text = compare(rerun, reference).markdown()
    assert "step 20.num_input_tokens_seen: 1999 against 2000" in text
    assert "step 40 is not in the reference's log" in text
    assert "step 10" not in text.split("differ\n", 1)[1]


def test_a_resumed_reference_differs_only_in_what_a_new_process_starts_again(tmp_path):
    # a run resumed after step 10 restarts TRL's num_tokens and averages train_loss over its own steps only
    reference = _run(
        tmp_path / "reference", [_logged(10, 4.75, num_tokens=1000.0), _logged(20, 4.5, num_tokens=990.0)]
    )
    rerun = _run(tmp_path / "rerun", [_logged(10, 4.75, num_tokens=1000.0), _logged(20, 4.5, num_tokens=1990.0)])
    assert compare(rerun, reference, rtol=0, atol=0).equal
    finished = _run(tmp_path / "finished", [_logged(20, 4.5, train_loss=4.6)])
    assert compare(finished, _run(tmp_path / "resumed", [_logged(20, 4.5, train_loss=4.5)]), rtol=0, atol=0).equal
    # a step's loss still counts
    assert not compare(rerun, _run(tmp_path / "other", [_logged(20, 4.6)]), rtol=0, atol=0).equal


def _report(path, forwards=869, tpf=2.238204833141542, adapter="runs/a", seconds=10.0):
    report = {
        "model": "embedded",
        "trained": {
            "prompts": 16,
            "settings": [
                {"name": "plain", "forwards": forwards, "tokens_per_forward": tpf, "identical_to_greedy": True}
            ],
            "seconds": seconds,
        },
        "settings": {"adapter": adapter, "output_file": str(path), "max_new_tokens": 128},
    }
    path.write_text(json.dumps(report))
    return path


def test_evaluation_reports_compare_figures_not_paths_or_clocks(tmp_path):
    reference = _report(tmp_path / "reference.json")
    same = _report(tmp_path / "same.json", tpf=2.2382048331415, adapter="runs/repro/a", seconds=99.0)
    other = _report(tmp_path / "other.json", forwards=870)
    assert detect_kind(reference) == "evaluation"
    assert compare(same, reference).equal
    text = compare(other, reference).markdown()
    assert "reference.json.trained.settings[0].forwards: 870 against 869" in text
    # a field a later version records is listed, not counted; a figure the re-run lacks is a difference
    newer = json.loads(reference.read_text())
    newer["settings"]["humaneval_nll"] = False
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    result = compare(tmp_path / "newer.json", reference)
    assert result.equal
    assert "recorded by the re-run only (not compared): reference.json.settings.humaneval_nll" in result.markdown()
    del newer["trained"]["prompts"]
    (tmp_path / "older.json").write_text(json.dumps(newer))
    assert (
        "reference.json.trained.prompts: missing from the re-run"
        in compare(tmp_path / "older.json", reference).markdown()
    )


def test_what_cannot_be_compared_is_refused_with_what_is_accepted(tmp_path):
    with pytest.raises(ValueError, match=r"cannot tell what .*nothing is: expected a prompt or anchor text file"):
        compare(tmp_path, tmp_path / "nothing")
    reference = _report(tmp_path / "reference.json")
    with pytest.raises(FileNotFoundError, match="run the stage first"):
        compare(tmp_path / "missing.json", reference)
    with pytest.raises(ValueError, match="tolerances must be >= 0"):
        compare(reference, reference, rtol=-1)


def test_the_command_compares_pairs_writes_the_verdicts_and_exits_1_on_a_difference(tmp_path, capsys):
    reference = _report(tmp_path / "reference.json")
    same = _report(tmp_path / "same.json")
    other = _report(tmp_path / "other.json", forwards=870)
    out = tmp_path / "out" / "verdicts.md"
    assert lab_main(["compare", str(same), str(reference), "--output", str(out)]) == 0
    assert out.read_text().startswith("**reproduced** (evaluation)")
    assert lab_main(["compare", str(same), str(reference), str(other), str(reference)]) == 1
    printed = capsys.readouterr().out
    assert "**reproduced**" in printed and "**differs**" in printed
    assert lab_main(["compare", str(same), str(reference), str(other)]) == 1
    assert "compare takes pairs REPRODUCED REFERENCE, got 3 paths" in capsys.readouterr().err


def _prompt_rows(ids_and_texts):
    return [{"prompt_id": i, "messages": [{"role": "user", "content": t}]} for i, t in ids_and_texts]


def test_a_rebuilt_prompt_set_matches_the_frozen_one_across_formats_and_in_order(tmp_path):
    rows = _prompt_rows([("magpie/0/0", "What is rain?"), ("magpie/0/1", "Name a prime."), ("magpie/0/2", "Why?")])
    frozen = tmp_path / "frozen.parquet"
    pq.write_table(pa.Table.from_pylist(rows), frozen)
    rebuilt = tmp_path / "rebuilt.jsonl"
    rebuilt.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert detect_kind(frozen) == "prompts"
    same = compare(rebuilt, frozen)
    assert same.equal and same.checked == 3
    assert "3 of the reference's 3 rows compared, in order" in same.markdown()

    # the same prompts in another order move rows between the held-out head and the training rest: a difference
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("\n".join(json.dumps(r) for r in [rows[1], rows[0], rows[2]]) + "\n")
    result = compare(swapped, frozen)
    assert not result.equal
    assert result.differences == [
        "row 0 ('magpie/0/0'): prompt_id, messages",
        "row 1 ('magpie/0/1'): prompt_id, messages",
    ]
    assert result.notes[1:] == []  # the same prompts, only moved

    # one changed text and one prompt short
    edited = _prompt_rows([("magpie/0/0", "What is rain?"), ("magpie/0/1", "Name two primes.")])
    short = tmp_path / "short.parquet"
    pq.write_table(pa.Table.from_pylist(edited), short)
    result = compare(short, frozen)
    assert result.differences == ["2 rows against 3", "row 1 ('magpie/0/1'): messages"]
    assert result.notes[1:] == [
        "1 ids in the reference only: 'magpie/0/2'",
        "1 ids in both with other content: 'magpie/0/1'",
    ]


def test_a_prompt_file_without_its_columns_or_with_a_broken_line_is_refused_with_the_place(tmp_path):
    frozen = tmp_path / "frozen.jsonl"
    frozen.write_text(json.dumps({"prompt_id": "a", "messages": [{"role": "user", "content": "x"}]}) + "\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"prompt_id": "a", "messages": []}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"broken.jsonl', line 2: not valid JSON"):
        compare(broken, frozen)
    unnamed = tmp_path / "unnamed.jsonl"
    unnamed.write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(ValueError, match=r"unnamed.jsonl holds columns \['messages'\]: a prompt file holds"):
        compare(unnamed, frozen)


def test_anchor_text_files_compare_too(tmp_path):
    rows = [{"text_id": "pkg/a.f", "text": "def f():\n    return 1\n"}, {"text_id": "pkg/a.g", "text": "def g(): ..."}]
    frozen = tmp_path / "frozen.parquet"
    pq.write_table(pa.Table.from_pylist(rows), frozen)
    rebuilt = tmp_path / "rebuilt.parquet"
    pq.write_table(pa.Table.from_pylist([rows[0], {**rows[1], "text": "def g(): pass"}]), rebuilt)
    assert compare(rebuilt, frozen).differences == ["row 1 ('pkg/a.g'): text"]
