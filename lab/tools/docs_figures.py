"""The figures of README.md, docs/*.md and model_cards/*.md, rendered from the results files they come from.

A page marks a figure with a pair of HTML comments, which neither GitHub nor the docs site shows:

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

and this script replaces what lies between them with what the block function registered as NAME returns. A pair
written inside a line (`about <!-- figures:NAME -->1.07<!-- /figures:NAME --> tokens`) is an inline block: its text
stays on that line. Run from anywhere:

    python lab/tools/docs_figures.py           # rewrite the pages (make docs-figures)
    python lab/tools/docs_figures.py --check   # print a diff of every page that disagrees with its files, exit 1

tests/test_docs.py runs the check, so a results file that changes, or a page edited by hand between markers, fails
`make test` until the pages are rendered again.

Adding a figure is one function and one marker pair: a function that reads its files (paths relative to
docs/results/) and returns Markdown, decorated with `@block("name")`, in the module of lab/tools/figure_blocks/ that holds
its kind of figure (figure_blocks/core.py holds `block`, `load` and the other readers of the results files; a new
module is imported below, which registers its blocks); then `<!-- figures:name -->` and `<!-- /figures:name -->`
where it goes. `page.ref(path)` links a results file from the page being rendered (a relative link on README and docs
pages, a code span in model cards, which are published without the docs).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

# tests/test_docs.py loads this file by its path, with tools/ not on sys.path: make its figure_blocks importable
TOOLS = str(Path(__file__).resolve().parent)
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

# importing a block module registers its blocks
from figure_blocks import (  # noqa: E402, F401
    campaign_cpu,
    cpu_bench,
    cpu_fast_path,
    gpu_bench,
    gpu_grade,
    gpu_graph_greedy,
    host_work_and_vllm,
    model_card,
    probe,
    shipped_adapter,
    tables,
    training_study,
)
from figure_blocks.core import BLOCKS, ROOT, Page  # noqa: E402

PAGE_GLOBS = ("README.md", "docs/*.md", "model_cards/*.md")
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"(?<!`)<!-- figures:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figures:(?P=name) -->", re.DOTALL)


# ----------------------------------------------------------------------------------------------------- rendering


def page_paths(root: Path = ROOT) -> list[Path]:
    """The pages that may hold figures, relative to the root."""
    found: list[Path] = []
    for pattern in PAGE_GLOBS:
        found += sorted(p.relative_to(root) for p in root.glob(pattern))
    return found


def render_text(text: str, page: Page) -> str:
    """`text` with every marked block rendered again; an unknown block name is an error naming the page. Markers in
    fenced code blocks or right after a backtick (in a code span) are examples and stay as they are."""

    def fill(match: re.Match) -> str:
        name, body = match["name"], match["body"]
        if name not in BLOCKS:
            raise ValueError(f"{page.path}: no figure block named {name!r} (known: {', '.join(sorted(BLOCKS))})")
        rendered = BLOCKS[name](page).strip("\n")
        if body.startswith("\n"):  # a block of lines: markers on lines of their own
            rendered = f"\n{rendered}\n"
        return f"<!-- figures:{name} -->{rendered}<!-- /figures:{name} -->"

    # markers inside fenced code blocks are examples (docs/development.md shows some), not figures
    out, start = [], 0
    for fence in FENCE.finditer(text):
        out += [MARKER.sub(fill, text[start : fence.start()]), fence[0]]
        start = fence.end()
    return "".join([*out, MARKER.sub(fill, text[start:])])


def render_pages(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """Every page holding a marker: its committed text and its text rendered from the results files."""
    out = {}
    for rel in page_paths(root):
        text = (root / rel).read_text(encoding="utf-8")
        if "<!-- figures:" in text:
            out[rel] = (text, render_text(text, Page(rel)))
    return out


def stale_pages(root: Path = ROOT) -> str:
    """A unified diff of every page whose figures disagree with its files ('' when all agree)."""
    diffs = []
    for rel, (old, new) in render_pages(root).items():
        if old != new:
            diffs += difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"{rel} (committed)", f"{rel} (rendered)"
            )
    return "".join(diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print the diff of pages that disagree, exit 1")
    args = parser.parse_args(argv)
    if args.check:
        diff = stale_pages()
        if diff:
            print(diff, end="")
            print("\nfigures out of date: run `make docs-figures`", file=sys.stderr)
            return 1
        return 0
    for rel, (old, new) in render_pages().items():
        if old != new:
            (ROOT / rel).write_text(new, encoding="utf-8")
            print(f"rendered {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
