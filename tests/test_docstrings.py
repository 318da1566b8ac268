"""Docstrings under src/ say what and why; measured figures live in docs/, rendered from their files.

A speed or ratio quoted in a docstring goes stale the day a result changes and is rendered from no file, so the check
fails on any docstring (module, class, function or attribute) that quotes one: a ratio such as "1.66x" (a bound such
as ">= 0.9x" or "at most 1.10x" is a rule, not a measurement), a speed or time per step, tokens per forward given to
two decimals, or a run "on one H200".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hf_jacobi"

RATIO = re.compile(r"\b\d+(?:\.\d+)?x\b")
BOUND = re.compile(r"(?:<=|>=|<|>|at most|at least|under|over|above|below|than)\s*$")
MEASURED = re.compile(
    r"\b\d[\d,.]*\s*(?:ms|tokens/s|tok/s|tokens per second|s per (?:step|forward|token)|seconds per (?:step|forward))\b"
    r"|\b\d+\.\d{2,} tokens per forward|\bon (?:one|an?)\s+[HAB]\d00\b"
)


def docstrings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every module, class and function docstring and of every attribute docstring (a string
    statement right after an assignment)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for index, statement in enumerate(body):
            is_string = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            if not (is_string and isinstance(statement.value.value, str)):
                continue
            after_assignment = index > 0 and isinstance(body[index - 1], (ast.Assign, ast.AnnAssign))
            if (
                index == 0 and not isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try))
            ) or after_assignment:
                yield statement.lineno, statement.value.value


def quoted_figures(text: str) -> list[str]:
    ratios = [m.group(0) for m in RATIO.finditer(text) if not BOUND.search(text[: m.start()])]
    return ratios + [m.group(0) for m in MEASURED.finditer(text)]


def test_no_docstring_under_src_quotes_a_measured_ratio_or_speed():
    found = [
        f"{path.relative_to(SRC)}:{line}: {figures}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in docstrings(ast.parse(path.read_text(encoding="utf-8")))
        if (figures := quoted_figures(text))
    ]
    assert not found, "docstrings quoting measured figures (move them to docs/, rendered from their files):\n" + (
        "\n".join(found)
    )


def test_the_check_tells_a_measurement_from_a_rule():
    assert quoted_figures("on one H200 with the shipped adapter: 1.66x at batch 1") == ["1.66x", "on one H200"]
    assert quoted_figures("a step cost 1.12x one without it, about 11 s per step") == ["1.12x", "11 s per step"]
    assert quoted_figures("3-grams >= 0.9x, the base's NLL at most 1.10x its own, under 1.2x") == []
    assert quoted_figures("accepts 2.94 tokens per forward at 676.9 tokens/s") == [
        "2.94 tokens per forward",
        "676.9 tokens/s",
    ]
