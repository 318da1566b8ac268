"""How the lab's benchmarks hand back what they measured: the report printed as JSON, and kept where asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(report: dict[str, Any], output: Path | None) -> None:
    """Prints `report` as indented JSON and, when `output` is given, writes the same text there (folders made), so
    that the printed figures and the committed file cannot differ."""
    text = json.dumps(report, indent=2)
    print(text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n", encoding="utf-8")
