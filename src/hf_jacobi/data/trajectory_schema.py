"""What a trajectory row holds, and the one check of it, shared by the shard reader and the trainer.

Data that does not match fails here, before any work, with one error that names where the data came from (a shard
file, or "the train dataset"), each bad column and what was expected; without this check a missing column would load
as None and fail much later inside the trainer, and a wrong dtype would surface as a TypeError deep in the collator.
"""

from __future__ import annotations

from collections.abc import Iterable

import datasets
import pyarrow as pa
import pyarrow.compute as pc

TRAJECTORY_FEATURES = datasets.Features(
    {
        "prompt_id": datasets.Value("string"),
        "prompt_ids": datasets.List(datasets.Value("int32")),
        "completion_ids": datasets.List(datasets.Value("int32")),
        "block_size": datasets.Value("int32"),
        "states": datasets.List(datasets.List(datasets.List(datasets.Value("int32")))),
        "fixed_points": datasets.List(datasets.List(datasets.Value("int32"))),
        "forward_passes": datasets.Value("int32"),
    }
)
"""Per prompt: its ids, the generated text, and per complete block its states (initial draft first, fixed point last)."""

# Per column: (leaf kind, list nesting depth) and how a user would describe it.
_EXPECTED: dict[str, tuple[str, int, str]] = {
    "prompt_id": ("string", 0, "a string"),
    "prompt_ids": ("integer", 1, "a list of token ids (list<int>)"),
    "completion_ids": ("integer", 1, "a list of token ids (list<int>)"),
    "block_size": ("integer", 0, "an integer"),
    "states": ("integer", 3, "per block, its states, each a list of token ids (list<list<list<int>>>)"),
    "fixed_points": ("integer", 2, "per block, its fixed point as token ids (list<list<int>>)"),
    "forward_passes": ("integer", 0, "an integer"),
}


class TrajectoryDataError(ValueError):
    """Trajectory data that does not match what `collect_trajectories` writes (the message says where and how)."""


def check_trajectory_table(
    table: pa.Table | pa.Schema,
    source: str,
    *,
    columns: Iterable[str] = tuple(TRAJECTORY_FEATURES),
    allow_extra: bool = False,
    hint: str | None = "collect it with hf_jacobi.collect_trajectories and load it with hf_jacobi.load_trajectories",
) -> None:
    """Raises one `TrajectoryDataError` listing every problem of `table`: missing columns, unexpected ones (unless
    `allow_extra`), columns of the wrong type, missing values; `hint` (None: none) says how to get good data. A schema
    alone is checked for columns and types only."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    columns = list(columns)
    problems = []
    missing = [c for c in columns if c not in schema.names]
    if missing:
        expected = "; ".join(f"{c!r}: {_EXPECTED[c][2]}" for c in missing)
        problems.append(f"lacks the trajectory columns {missing} (expected {expected})")
    if not allow_extra:
        extra = [c for c in schema.names if c not in columns]
        if extra:
            problems.append(f"has unexpected columns {extra} (a trajectory shard holds exactly {columns})")
    for name in columns:
        if name not in schema.names:
            continue
        kind, depth, description = _EXPECTED[name]
        if _shape(schema.field(name).type) != (kind, depth):
            problems.append(f"column {name!r} is {_type_name(schema.field(name).type)}, expected {description}")
        elif isinstance(table, pa.Table) and (nulls := _null_count(table.column(name))):
            problems.append(f"column {name!r} holds {nulls} missing values, expected {description} in every row")
    if problems:
        advice = f" {hint[0].upper()}{hint[1:]}." if hint else ""
        raise TrajectoryDataError(f"{source}: " + "; ".join(problems) + "." + advice)


def check_not_empty(rows: int, source: str) -> None:
    """An empty dataset is refused: training on it would fail later with an unrelated message."""
    if rows == 0:
        raise TrajectoryDataError(
            f"{source} holds no trajectories: collect some with hf_jacobi.collect_trajectories (hf-jacobi collect)."
        )


def _is_list(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)
    )


def _type_name(arrow_type: pa.DataType) -> str:
    """`list<list<int64>>`, without the item names arrow and parquet give nested lists."""
    return f"list<{_type_name(arrow_type.value_type)}>" if _is_list(arrow_type) else str(arrow_type)


def _shape(arrow_type: pa.DataType) -> tuple[str, int]:
    depth = 0
    while (
        pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)
    ):
        arrow_type, depth = arrow_type.value_type, depth + 1
    if pa.types.is_integer(arrow_type):
        return "integer", depth
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string", depth
    return str(arrow_type), depth


def _null_count(column: pa.ChunkedArray) -> int:
    """Missing values at every nesting level (a None row, a None block, a None token)."""
    count = column.null_count
    while _is_list(column.type):
        column = pc.list_flatten(column)
        count += column.null_count
    return count
