"""What the CPU offers for bfloat16 arithmetic, read once from the operating system.

Why: on a CPU the cost of verifying a block of draft tokens, and so whether Jacobi decoding beats greedy, depends on
the dtype and on the CPU's matrix units. With bfloat16 units (Intel AMX tiles, or AVX-512 BF16 dot products) a forward
of 16 tokens costs little more than one of 1, so decoding, collection and training in bfloat16 are several times faster
than in float32; without them bfloat16 is emulated and slower. Figures that depend on it record it (`cpu_description`)
and the per-device fallback keys on it (`bfloat16_units`).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def first_cpu(cpuinfo: str | Path = CPUINFO) -> dict[str, str]:
    """The fields Linux lists for the first CPU in `cpuinfo` ("flags", "model name", ...), read once; empty where the
    file is absent (macOS, Windows)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first CPU's block ends at the first blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> frozenset[str]:
    """The flags the kernel lists for the first CPU (empty where /proc/cpuinfo is absent)."""
    return frozenset(first_cpu().get("flags", "").split())


def bfloat16_units() -> str | None:
    """ "amx" (Intel AMX bfloat16 tiles), "avx512_bf16" (AVX-512 bfloat16 dot products) or None (emulated bfloat16)."""
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512_bf16"
    return None


def auto_dtype() -> str:
    """What `--dtype auto` loads in: "bfloat16" on a CPU with bfloat16 units, where a block's verify costs little more
    than a one-token forward, else "float32", which keeps Jacobi's answers greedy's token for token (and on a CPU
    without the units runs faster than emulated bfloat16)."""
    import torch

    return "bfloat16" if not torch.cuda.is_available() and bfloat16_units() is not None else "float32"


def model_name(cpuinfo: str | Path = CPUINFO) -> str | None:
    """The processor's model name where Linux tells it (as /proc/cpuinfo spells it), else None."""
    return first_cpu(cpuinfo).get("model name") or None


def cpu_model() -> str:
    """The CPU's model name, or the platform's processor string where Linux does not tell it."""
    return model_name() or platform.processor() or platform.machine()


def cpu_description() -> str:
    """The CPU model with its bfloat16 units, as recorded beside CPU figures: "<model name> (bfloat16: avx512_bf16)"."""
    return f"{cpu_model()} (bfloat16: {bfloat16_units() or 'none'})"
