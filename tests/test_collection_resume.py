"""Collection loses at most the batch in flight: real processes killed by SIGKILL at many points, then resumed, give
the dataset of an uninterrupted run; a damaged shard is named, set aside and collected again."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from hf_jacobi import collect_trajectories, load_trajectories
from hf_jacobi.data.trajectory_schema import TrajectoryDataError
from test_training import tiny_prompts
from tiny_models import tiny_model, tiny_tokenizer

KILL_TARGET = Path(__file__).parent / "kill_targets" / "collect_until_killed.py"
PROMPTS = 7
# 2 prompts a batch, 3 rows a shard: batches 1-2 fill shard 0 (rewritten by batch 2), batches 3-4 shard 1
SETTINGS = dict(block_size=4, max_new_tokens=12, batch_size=2, shard_size=3, progress=False)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill target forks its runs")

# (kill points of successive runs on one folder, prompts durable after the last kill); one kill-target process runs
# them all, so the whole table costs one interpreter start-up
CASES = [
    (["decoding:1"], 0),
    (["written:1"], 2),
    (["decoding:3"], 4),
    (["writing:3"], 4),  # a new shard cut in half
    (["writing:4"], 6),  # a shard's rewrite cut in half: its previous version holds
    (["writing:2"], 2),
    (["decoding:2", "decoding:2", "writing:2"], 6),  # killed three times
    (["written:3", "writing:1"], 6),  # resumed into a full shard 0 and a partial shard 1, killed again
]


@pytest.fixture(scope="module")
def prompts() -> datasets.Dataset:
    return tiny_prompts(PROMPTS)


@pytest.fixture(scope="module")
def reference(prompts, tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    return load_trajectories(folder).to_list()


def test_a_collection_killed_anywhere_resumes_to_the_uninterrupted_dataset(prompts, reference, tmp_path):
    """Each case's runs are real processes killed by SIGKILL; then what each kill left is checked, and resumed."""
    runs = [
        {"folder": str(tmp_path / f"case{i}"), "kill": point}
        for i, (points, _) in enumerate(CASES)
        for point in points
    ]
    spec = {"family": "llama", "prompts": prompts.to_list(), "settings": SETTINGS, "runs": runs}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(KILL_TARGET), str(tmp_path / "spec.json")], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [9] * len(runs), done.stderr  # every run died by SIGKILL
    for i, (points, durable) in enumerate(CASES):
        folder = tmp_path / f"case{i}"
        if durable:  # every finished batch survived the kill, and nothing else is counted as finished
            assert len(load_trajectories(folder)) == durable, points
        else:
            assert not list(folder.glob("*.parquet")), points
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
        assert load_trajectories(folder).to_list() == reference, points  # same prompts, rows, order; none twice
        assert not list(folder.glob(".*.tmp")), points  # what the kill left half-written was removed


def test_a_collection_with_a_time_limit_stops_between_batches_and_goes_on(prompts, reference, tmp_path, monkeypatch):
    """`stop_after_seconds` starts no batch once the time is up: the batches before are written, the next call goes on
    where it stopped, and the folder ends as an uninterrupted collection's."""
    from hf_jacobi.data import collection

    clock = iter(range(0, 10_000, 10))  # every reading of the clock is 10 s later
    monkeypatch.setattr(collection.time, "monotonic", lambda: next(clock))
    model, tokenizer = tiny_model("llama"), tiny_tokenizer()
    collect_trajectories(model, tokenizer, prompts, tmp_path, **SETTINGS, stop_after_seconds=15)
    assert len(load_trajectories(tmp_path)) == SETTINGS["batch_size"]  # one batch started before 15 s, none after
    collect_trajectories(model, tokenizer, prompts, tmp_path, **SETTINGS, stop_after_seconds=0)
    assert len(load_trajectories(tmp_path)) == SETTINGS["batch_size"]
    collect_trajectories(model, tokenizer, prompts, tmp_path, **SETTINGS, stop_after_seconds=None)
    assert load_trajectories(tmp_path).to_list() == reference
    for bad in (-1, float("nan"), float("inf"), True, "60"):
        with pytest.raises(ValueError, match=r"stop_after_seconds must be a number of seconds >= 0 or None, got"):
            collect_trajectories(model, tokenizer, prompts, tmp_path, **SETTINGS, stop_after_seconds=bad)


def test_a_damaged_shard_is_named_set_aside_and_collected_again(prompts, reference, tmp_path, caplog):
    folder = tmp_path / "damaged"
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    first, second = sorted(folder.glob("trajectories-*.parquet"))
    first.write_bytes(first.read_bytes()[:-40])  # cut short, as by a copy interrupted
    second.write_bytes(os.urandom(300))
    with pytest.raises(
        TrajectoryDataError, match=rf"{first} is not a readable parquet file.*Run the collection again"
    ):
        load_trajectories(folder)
    with caplog.at_level(logging.WARNING):
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    assert str(first) in caplog.text and str(second) in caplog.text and "collected again" in caplog.text
    assert load_trajectories(folder).to_list() == reference
    assert sorted(p.name for p in folder.glob("*.corrupt")) == [first.name + ".corrupt", second.name + ".corrupt"]


@pytest.mark.parametrize("lost", [0, 1], ids=["the first shard", "the last shard"])
def test_a_deleted_shard_is_named_instead_of_training_on_the_rest(prompts, reference, tmp_path, caplog, lost):
    """Each process lists the shards it wrote, so a file deleted (or left behind by a copy) is named on reading,
    wherever it sat in the numbering; a resume collects its prompts again, and deleting the ledger reads the rest."""
    folder = tmp_path / "lost"
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    shards = sorted(folder.glob("trajectories-*.parquet"))
    assert [p.name for p in shards] == json.loads((folder / "shards-r000.json").read_text())["shards"]
    shards[lost].unlink()
    with pytest.raises(TrajectoryDataError) as refused:
        load_trajectories(folder)
    assert str(refused.value).startswith(
        f"{folder} lacks {shards[lost].name}, which its collection wrote (shards-r000.json in the folder lists what "
        "it wrote): deleted, or not copied along."
    )
    assert str(refused.value).endswith("to train on the rest as it is, delete shards-r000.json.")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "shards-r000.json").unlink()  # the user's explicit choice: the rest, as it is
    assert len(load_trajectories(copy)) == len(reference) - (4 if lost == 0 else 3)  # shards of 4 and 3 rows
    with caplog.at_level(logging.WARNING):
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    assert f"lists {shards[lost].name}, which is not there (deleted, or not copied along)" in caplog.text
    assert load_trajectories(folder).to_list() == reference


def test_a_prompt_in_two_shards_is_refused(prompts, tmp_path):
    folder = tmp_path / "twice"
    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts, folder, **SETTINGS)
    shard = sorted(folder.glob("trajectories-*.parquet"))[0]
    shutil.copy(shard, folder / "trajectories-r001-00000.parquet")  # a second collection wrote into the folder
    with pytest.raises(TrajectoryDataError, match=r"prompt 'p00' is in both .*r000-00000.parquet and .*r001-00000"):
        load_trajectories(folder)


def test_repeated_prompt_ids_are_refused_before_any_work(prompts, tmp_path):
    repeated = datasets.concatenate_datasets([prompts, prompts.select([3])])
    with pytest.raises(ValueError, match=r"prompt ids must be unique .*; repeated: \['p03'\]"):
        collect_trajectories(tiny_model("llama"), tiny_tokenizer(), repeated, tmp_path, **SETTINGS)
    assert not tmp_path.joinpath("collection.json").exists()


def test_a_folder_refuses_to_resume_with_other_settings_or_another_model(prompts, tmp_path):
    """States of two models (a second round's and the first's) or of two block sizes never mix in one folder."""
    model, one = tiny_model("llama"), prompts.select([0])
    collect_trajectories(model, tiny_tokenizer(), one, tmp_path, **SETTINGS, model_id="base")
    with pytest.raises(ValueError, match=r"other settings \(model: 'base' on disk, 'base \+ round1' now\); use a new"):
        collect_trajectories(model, tiny_tokenizer(), one, tmp_path, **SETTINGS, model_id="base + round1")
    with pytest.raises(ValueError, match=r"other settings \(block_size: 4 on disk, 8 now\)"):
        collect_trajectories(model, tiny_tokenizer(), one, tmp_path, **{**SETTINGS, "block_size": 8}, model_id="base")
    # a library caller that names no model resumes the folder (nothing is left to collect)
    collect_trajectories(model, tiny_tokenizer(), one, tmp_path, **SETTINGS)
    assert len(load_trajectories(tmp_path)) == 1


def test_shards_are_written_with_zstandard(prompts, tmp_path):
    """Trajectory folders are kept and committed: every shard a collection writes is Zstandard-compressed."""
    import pyarrow.parquet as pq

    collect_trajectories(tiny_model("llama"), tiny_tokenizer(), prompts.select(range(2)), tmp_path, **SETTINGS)
    shards = sorted(tmp_path.glob("trajectories-*.parquet"))
    assert shards
    for shard in shards:
        metadata = pq.ParquetFile(shard).metadata
        codecs = {metadata.row_group(g).column(c).compression for g in range(metadata.num_row_groups)
                  for c in range(metadata.num_columns)}  # fmt: skip
        assert codecs == {"ZSTD"}, (shard.name, codecs)
