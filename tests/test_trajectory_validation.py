"""Trajectory data is checked where it enters: `load_trajectories` (each shard file) and the trainer (the columns the
collator reads). Each bad input gives one error naming the file or dataset, the column and what was expected."""

from __future__ import annotations

import re

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hf_jacobi import JacobiForcingCollator, load_trajectories
from hf_jacobi.data.trajectory_schema import TrajectoryDataError
from hf_jacobi.training.dataset import usable_trajectories
from tiny_models import PAD

ROWS = [
    {
        "prompt_id": f"p{i}",
        "prompt_ids": [5, 6 + i],
        "completion_ids": [7, 8, 9, 10],
        "block_size": 2,
        "states": [[[3, 4], [7, 8]], [[5, 5], [9, 10]]],
        "fixed_points": [[7, 8], [9, 10]],
        "forward_passes": 3,
    }
    for i in range(2)
]


def replaced(table: pa.Table, column: str, values: list) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values))


# (case, how the good table is spoiled, what the error says after the source)
BAD_TABLES = [
    (
        "missing column",
        lambda t: t.drop_columns(["states"]),
        r"lacks the trajectory columns \['states'\] \(expected "
        r"'states': per block, its states, each a list of token ids \(list<list<list<int>>>\)\)",
    ),
    (
        "two missing columns",
        lambda t: t.drop_columns(["block_size", "fixed_points"]),
        r"lacks the trajectory columns \['block_size', 'fixed_points'\] \(expected 'block_size': an integer; ",
    ),
    (
        "string states",
        lambda t: replaced(t, "states", [[[["a"]]]] * 2),
        r"column 'states' is list<list<list<string>>>, expected per block, its states",
    ),
    (
        "float block size",
        lambda t: replaced(t, "block_size", [2.0, 2.0]),
        r"column 'block_size' is double, expected "
        "an integer",
    ),
    (
        "fixed points one level short",
        lambda t: replaced(t, "fixed_points", [[7, 8, 9, 10]] * 2),
        r"column 'fixed_points' is list<int64>, expected per block, its fixed point as token ids",
    ),
    (
        "integer prompt id",
        lambda t: replaced(t, "prompt_id", [0, 1]),
        r"column 'prompt_id' is int64, expected a string",
    ),
    (
        "a missing token",
        lambda t: replaced(t, "prompt_ids", [[5, None], [5, 6]]),
        r"column 'prompt_ids' holds 1 missing values, expected a list of token ids \(list<int>\) in every row",
    ),
    (
        "a missing row value",
        lambda t: replaced(t, "completion_ids", [None, [7, 8, 9, 10]]),
        r"column 'completion_ids' holds 1 missing values",
    ),
]


def shard_folder(tmp_path, table: pa.Table):
    pq.write_table(table, tmp_path / "trajectories-r000-00000.parquet")
    return tmp_path


@pytest.mark.parametrize(("case", "spoil", "message"), BAD_TABLES, ids=[c[0] for c in BAD_TABLES])
def test_load_names_the_file_the_column_and_what_was_expected(tmp_path, case, spoil, message):
    folder = shard_folder(tmp_path, spoil(pa.Table.from_pylist(ROWS)))
    shard = re.escape(str(folder / "trajectories-r000-00000.parquet"))
    with pytest.raises(TrajectoryDataError, match=rf"^{shard}: {message}") as error:
        load_trajectories(folder)
    assert "Run the collection again" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("case", "spoil", "message"),
    [
        (
            "extra column",
            lambda t: t.append_column("source", pa.array(["x", "y"])),
            r"has unexpected columns "
            r"\['source'\] \(a trajectory shard holds exactly \['prompt_id', 'prompt_ids', ",
        ),
        ("no rows", lambda t: t.slice(0, 0), r"holds no trajectories"),
        ("cut short", None, r"is not a readable parquet file, truncated or corrupt"),
    ],
)
def test_load_refuses_extra_columns_empty_data_and_unreadable_files(tmp_path, case, spoil, message):
    if spoil is None:
        folder = shard_folder(tmp_path, pa.Table.from_pylist(ROWS))
        shard = folder / "trajectories-r000-00000.parquet"
        shard.write_bytes(shard.read_bytes()[:100])
    else:
        folder = shard_folder(tmp_path, spoil(pa.Table.from_pylist(ROWS)))
    with pytest.raises(TrajectoryDataError, match=message) as error:
        load_trajectories(folder)
    assert str(tmp_path) in str(error.value)


def test_load_accepts_other_integer_widths_and_gives_the_collection_types(tmp_path):
    loaded = load_trajectories(shard_folder(tmp_path, pa.Table.from_pylist(ROWS)))  # inferred as int64
    assert loaded.to_list() == ROWS
    assert loaded.features["states"].feature.feature.feature.dtype == "int32"


@pytest.mark.parametrize(("case", "spoil", "message"), BAD_TABLES, ids=[c[0] for c in BAD_TABLES])
def test_the_trainer_names_the_dataset_the_column_and_what_was_expected(case, spoil, message):
    table = spoil(pa.Table.from_pylist(ROWS))
    if "forward_passes" in table.column_names:
        table = table.drop_columns(["forward_passes"])  # not read by the trainer: absent is fine
    with pytest.raises(TrajectoryDataError, match=rf"^the train dataset: {message}"):
        usable_trajectories(datasets.Dataset(table), JacobiForcingCollator(PAD), "train")


def test_the_trainer_refuses_an_empty_dataset_and_ignores_extra_columns():
    with pytest.raises(TrajectoryDataError, match="the eval dataset holds no trajectories"):
        usable_trajectories(datasets.Dataset.from_list(ROWS).select([]), JacobiForcingCollator(PAD), "eval")
    extra = datasets.Dataset.from_list([{**row, "source": "mine"} for row in ROWS])
    assert len(usable_trajectories(extra, JacobiForcingCollator(PAD), "train")) == 2


def test_training_on_named_prompts_keeps_their_trajectories_and_refuses_missing_ones(tmp_path):
    from hf_jacobi.cli.train import TrainScriptArguments
    from hf_jacobi.data.collection import select_trajectories

    rows = [{**ROWS[0], "prompt_id": f"stdlib/{i}"} for i in range(3)]
    folder = shard_folder(tmp_path, pa.Table.from_pylist(rows))
    dataset = load_trajectories(folder)
    kept = select_trajectories(dataset, ["stdlib/2", "stdlib/0"])
    assert kept["prompt_id"] == ["stdlib/0", "stdlib/2"]
    with pytest.raises(
        TrajectoryDataError, match=r"1 of the 2 prompts of the prompts have no trajectory .*'stdlib/9'"
    ):
        select_trajectories(dataset, ["stdlib/0", "stdlib/9"])
    # a folder that grew since a run: the run's prompt list, not the folder, decides what is trained on
    args = TrainScriptArguments(trajectories=str(folder), trajectory_prompts="packages", num_trajectory_prompts=2)
    with pytest.raises(TrajectoryDataError, match=r"2 of the 2 prompts of 'packages' \(train\) have no trajectory"):
        args.load()
    assert TrainScriptArguments(trajectories=str(folder)).load()["prompt_id"] == dataset["prompt_id"]
    with pytest.raises(ValueError, match="num_trajectory_prompts needs trajectory_prompts"):
        TrainScriptArguments(num_trajectory_prompts=2)


@pytest.mark.parametrize(
    ("sources", "counts", "message"),
    [
        (["packages", "magpie"], [2], r"num_trajectory_prompts \[2\] must give one count per trajectory_prompts"),
        (["packages"], [0], r"num_trajectory_prompts must each be >= 1, got \[0\]"),
    ],
)
def test_train_arguments_refuse_counts_that_do_not_pair_with_sources(sources, counts, message):
    from hf_jacobi.cli.train import TrainScriptArguments

    with pytest.raises(ValueError, match=message):
        TrainScriptArguments(trajectory_prompts=sources, num_trajectory_prompts=counts)


def test_several_folders_train_as_one_dataset_selected_per_source(tmp_path):
    """One folder per prompt source (each collected and resumed on its own) trains as one dataset; each source's
    first N prompts are taken from wherever they are, and a prompt in two folders is refused by name."""
    from hf_jacobi import load_prompts
    from hf_jacobi.cli.train import TrainScriptArguments

    packages = list(load_prompts("packages", split="train", limit=3)["prompt_id"])
    magpie = list(load_prompts("magpie", split="train", limit=2)["prompt_id"])
    first = tmp_path / "packages"
    second = tmp_path / "magpie"
    first.mkdir()
    second.mkdir()
    shard_folder(first, pa.Table.from_pylist([{**ROWS[0], "prompt_id": i} for i in packages]))
    shard_folder(second, pa.Table.from_pylist([{**ROWS[1], "prompt_id": i} for i in magpie]))

    both = load_trajectories([first, second])
    assert both["prompt_id"] == sorted(packages + magpie)
    args = TrainScriptArguments(
        trajectories=[str(first), str(second)],
        trajectory_prompts=["packages", "magpie"],
        num_trajectory_prompts=[2, 1],
    )
    assert sorted(args.load()["prompt_id"]) == sorted(packages[:2] + magpie[:1])

    copied = pa.Table.from_pylist([{**ROWS[0], "prompt_id": packages[0]}])
    pq.write_table(copied, second / "trajectories-r001-00000.parquet")
    with pytest.raises(TrajectoryDataError, match=rf"prompt {re.escape(repr(packages[0]))} is in both .*packages"):
        load_trajectories([first, second])
    with pytest.raises(TrajectoryDataError, match="no trajectory folder given"):
        load_trajectories([])


def test_one_row_definition_gives_the_stored_columns_the_collators_columns_and_the_check():
    from dataclasses import fields

    import pyarrow as pa

    from hf_jacobi.data.trajectory_schema import (
        TRAINED_COLUMNS,
        TRAJECTORY_FEATURES,
        TrajectoryRow,
        check_trajectory_table,
    )

    names = [f.name for f in fields(TrajectoryRow)]
    assert list(TRAJECTORY_FEATURES) == names
    assert tuple(n for n in names if n != "forward_passes") == TRAINED_COLUMNS
    row = TrajectoryRow("p0", [1, 2], [3, 4], 2, [[[9, 9], [3, 4]]], [[3, 4]], 2).to_dict()
    table = pa.Table.from_pylist([row], schema=TRAJECTORY_FEATURES.arrow_schema)
    check_trajectory_table(table, "one row")  # a row built from the definition passes its own check
    with pytest.raises(TrajectoryDataError, match="'states'"):
        check_trajectory_table(table.drop_columns(["states"]), "one row")
