"""What a trajectory row holds, and the one check of it, shared by the shard reader and the trainer.

Data that does not match fails here, before any work, with one error that names where the data came from (a shard
file, or "the train dataset"), each bad column and what was expected; without this check a missing column would load
as None and fail much later inside the trainer, and a wrong dtype would surface as a TypeError deep in the collator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc

_LEAF = {"string": datasets.Value("string"), "integer": datasets.Value("int32")}


def _column(kind: str, depth: int, description: str, *, trained: bool = True) -> dict[str, Any]:
    """A row field's column, as its field metadata: its leaf kind ("string" or "integer"), how deeply its values nest in
    lists, how a user would describe it, and whether the collator reads it."""
    return {"kind": kind, "depth": depth, "description": description, "trained": trained}


@dataclass(frozen=True)
class TrajectoryRow:
    """One prompt's Jacobi trajectory: the one definition of a trajectory row, from which the stored columns and their
    types (`TRAJECTORY_FEATURES`), the columns the collator reads (`TRAINED_COLUMNS`) and the check of loaded data
    (`check_trajectory_table`) derive.

    Args:
        prompt_id: the prompt's id in its prompt set (a trajectory is stored and resumed by it).
        prompt_ids: the prompt's token ids, chat template applied.
        completion_ids: the tokens decoded for it (the model's greedy answer).
        block_size: the Jacobi block size it was collected with.
        states: per complete block, the states it passed through, initial draft first and fixed point last.
        fixed_points: per complete block, its fixed point (the last of its states).
        forward_passes: the decoding forwards the collection spent on this prompt.
    """

    prompt_id: str = field(metadata=_column("string", 0, "a string"))
    prompt_ids: list[int] = field(metadata=_column("integer", 1, "a list of token ids (list<int>)"))
    completion_ids: list[int] = field(metadata=_column("integer", 1, "a list of token ids (list<int>)"))
    block_size: int = field(metadata=_column("integer", 0, "an integer"))
    states: list[list[list[int]]] = field(
        metadata=_column("integer", 3, "per block, its states, each a list of token ids (list<list<list<int>>>)")
    )
    fixed_points: list[list[int]] = field(
        metadata=_column("integer", 2, "per block, its fixed point as token ids (list<list<int>>)")
    )
    forward_passes: int = field(metadata=_column("integer", 0, "an integer", trained=False))

    def to_dict(self) -> dict[str, Any]:
        """The row as the dict a `datasets` table or a parquet shard stores."""
        return asdict(self)


def _feature(kind: str, depth: int) -> Any:
    feature = _LEAF[kind]
    for _ in range(depth):
        feature = datasets.List(feature)
    return feature


TRAJECTORY_FEATURES = datasets.Features(
    {f.name: _feature(f.metadata["kind"], f.metadata["depth"]) for f in fields(TrajectoryRow)}
)
"""The stored columns of `TrajectoryRow` and their types (integers as int32)."""

TRAINED_COLUMNS = tuple(f.name for f in fields(TrajectoryRow) if f.metadata["trained"])
"""The columns of a trajectory row that the collator reads."""

# Per column: (leaf kind, list nesting depth) and how a user would describe it.
_EXPECTED: dict[str, tuple[str, int, str]] = {
    f.name: (f.metadata["kind"], f.metadata["depth"], f.metadata["description"]) for f in fields(TrajectoryRow)
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
