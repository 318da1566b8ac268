"""`jacobi_greedy_devices`: where a checkpoint's Jacobi settings were measured slower than greedy decoding.

Why entries can name more than a device: on a CPU, whether verifying a block pays depends on the dtype and on the CPU's
bfloat16 matrix units (with them a forward of a whole block costs little more than a forward of one token in bfloat16,
much more in float32: docs/results.md), so a checkpoint measured faster than greedy in bfloat16 and slower in float32 on
the same CPU says so with "cpu:float32".
"""

from __future__ import annotations

from typing import Any

GREEDY_DTYPES = ("float32", "bfloat16", "float16")
"""The dtypes a `greedy_devices` entry may name."""
CPU_BFLOAT16_UNITS = ("amx", "avx512_bf16", "none")
"""What a CPU entry may name as the CPU's bfloat16 units (`hf_jacobi.decoding.cpu_info.bfloat16_units`, "none" for none)."""


def device_types(value: Any) -> tuple[str, ...]:
    """`greedy_devices` as a tuple of entries "device[:dtype[:units]]" (a list, as JSON stores it, or a tuple)."""
    if isinstance(value, (list, tuple)) and all(isinstance(kind, str) and kind.strip() for kind in value):
        entries = tuple(kind.strip().lower() for kind in value)
        for entry in entries:
            _check_greedy_entry(entry)
        return entries
    raise ValueError(
        f"jacobi_greedy_devices must be a list of device types such as ['cpu'] or ['cpu:float32'] (or [] for "
        f"none), got {value!r}."
    )


def _parts(entry: str) -> tuple[str, str, str, int]:
    """(device, dtype, units, number of parts) of an entry; an unnamed part is ""."""
    parts = entry.split(":")
    device, dtype, units = [*parts, "", ""][:3]
    return device, dtype, units, len(parts)


def _check_greedy_entry(entry: str) -> None:
    device, dtype, units, count = _parts(entry)
    problem = None
    if not device or count > 3:
        problem = "it must read 'device', 'device:dtype' or 'cpu:dtype:units'"
    elif dtype and dtype not in GREEDY_DTYPES:
        problem = f"its dtype must be one of {list(GREEDY_DTYPES)}"
    elif units and (device != "cpu" or units not in CPU_BFLOAT16_UNITS):
        problem = f"only a 'cpu' entry names the CPU's bfloat16 units, one of {list(CPU_BFLOAT16_UNITS)}"
    if problem:
        raise ValueError(
            f"jacobi_greedy_devices entry {entry!r} is not understood: {problem} (e.g. 'cpu', 'cpu:float32', "
            "'cpu:bfloat16:none')."
        )


def greedy_entry(
    entries: tuple[str, ...] | None, device_type: str | None, dtype: Any, units: str | None
) -> str | None:
    """The first of `entries` that covers a model on `device_type` in `dtype` (a CPU's `units`: its bfloat16 units, None
    for none), or None: an entry covers it when its device matches and its dtype and units, where given, match too."""
    dtype_name = str(dtype).removeprefix("torch.")
    for entry in entries or ():
        device, wanted_dtype, wanted_units, _ = _parts(entry)
        if device != device_type or (wanted_dtype and wanted_dtype != dtype_name):
            continue
        if wanted_units and wanted_units != (units or "none"):
            continue
        return entry
    return None
