"""The longest modules and functions of the package, for a maintainer deciding what to split: guidance, not a wall.

A module should hold one concept and a function one step; past about 500 lines a module, or 80 a function, usually
holds two (docs/development.md). Length alone is no reason to move code: a split that cuts one concept in two costs
more to read than a long file. Run from anywhere:

    python lab/tools/size_report.py            # the 15 longest of each (make size)
    python lab/tools/size_report.py --top 40
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_GUIDE = 500
FUNCTION_GUIDE = 80


def measure(root: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines, module) and (lines, module:function) of every Python file under `root`, longest first."""
    modules, functions = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    return sorted(modules, reverse=True), sorted(functions, reverse=True)


def report(root: Path, top: int = 15) -> str:
    modules, functions = measure(root)
    lines = [f"# longest modules under {root.relative_to(ROOT) if root.is_relative_to(ROOT) else root}", ""]
    lines += [
        f"{count:6d}  {name}{'  (past the guide)' if count > MODULE_GUIDE else ''}" for count, name in modules[:top]
    ]
    lines += ["", "# longest functions", ""]
    lines += [
        f"{count:6d}  {name}{'  (past the guide)' if count > FUNCTION_GUIDE else ''}"
        for count, name in functions[:top]
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="entries of each list (default 15)")
    parser.add_argument("--root", type=Path, default=ROOT / "src" / "hf_jacobi", help="the tree to measure")
    args = parser.parse_args(argv)
    print(report(args.root, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
