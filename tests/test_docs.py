"""The documentation agrees with the results files and the Makefiles: figures rendered from their files, the README
short, every `make` command it names defined. (The site itself is built by `make docs`, part of `make test`.)"""

import re
from pathlib import Path

import pytest

from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
RECIPE_MAKEFILE = "recipes/smollm2-135m/Makefile"
LAB_MAKEFILE = "lab/Makefile"


figures = load_script(ROOT / "lab" / "tools" / "docs_figures.py")


def test_committed_pages_agree_with_their_results_files():
    """Every marked figure of README.md, docs/*.md and model_cards/*.md equals what its results files render."""
    diff = figures.stale_pages()
    assert not diff, "figures out of date; run `make docs-figures`:\n" + diff


def test_pages_hold_figures_and_every_block_is_used():
    """The README, the results page and the shipped adapter's card render their figures from files, and no block
    function is left without a page (a renamed marker would otherwise leave its figure frozen)."""
    pages = figures.render_pages()
    for page in ("README.md", "docs/results.md", "model_cards/smollm2-135m-jacobi-forcing.md"):
        assert Path(page) in pages, f"{page} holds no figure block"
    used = {m["name"] for text, _ in pages.values() for m in figures.MARKER.finditer(text)}
    assert set(figures.BLOCKS) <= used, f"blocks without a page: {sorted(set(figures.BLOCKS) - used)}"


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines; depth belongs in docs/"


def test_block_markers_render_inline_and_as_lines_and_leave_code_alone(monkeypatch):
    monkeypatch.setitem(figures.BLOCKS, "answer", lambda page: f"42 ({page.ref('x/y.json')})")
    page = figures.Page(Path("docs/page.md"))
    text = (
        "about <!-- figures:answer -->old<!-- /figures:answer --> tokens\n"
        "<!-- figures:answer -->\nold table\n<!-- /figures:answer -->\n"
        "```markdown\n<!-- figures:answer -->kept<!-- /figures:answer -->\n```\n"
        "`<!-- figures:nothing -->` and `<!-- /figures:nothing -->` in prose\n"
    )
    assert figures.render_text(text, page) == (
        "about <!-- figures:answer -->42 ([y.json](results/x/y.json))<!-- /figures:answer --> tokens\n"
        "<!-- figures:answer -->\n42 ([y.json](results/x/y.json))\n<!-- /figures:answer -->\n"
        "```markdown\n<!-- figures:answer -->kept<!-- /figures:answer -->\n```\n"
        "`<!-- figures:nothing -->` and `<!-- /figures:nothing -->` in prose\n"
    )
    # the same reference from the README (root-relative) and from a model card (no docs beside it: a code span)
    assert figures.Page(Path("README.md")).ref("x/y.json") == "[y.json](docs/results/x/y.json)"
    assert figures.Page(Path("model_cards/card.md")).ref("x/y.json") == "`docs/results/x/y.json`"
    with pytest.raises(ValueError, match="no figure block named 'missing'"):
        figures.render_text("<!-- figures:missing -->x<!-- /figures:missing -->", page)


def targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / makefile).read_text(), flags=re.MULTILINE))


def documentation() -> dict[str, str]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "model_cards").glob("*.md"))]
    paths += sorted((ROOT / "recipes").rglob("README.md")) + sorted((ROOT / "lab").rglob("README.md"))
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths}


def test_every_make_command_in_the_documentation_exists():
    """`make X` names a top-level target, `make -f recipes/smollm2-135m/Makefile X` a target of the recipe's Makefile,
    `make -f lab/Makefile X` one of the lab's (which includes the recipe's)."""
    top, recipe = targets("Makefile"), targets(RECIPE_MAKEFILE)
    lab = targets(LAB_MAKEFILE) | recipe
    missing = []
    for name, page in documentation().items():
        # commands are code: fenced blocks and `inline` spans (prose such as "make a model faster" is not a command)
        fenced = re.findall(r"^[ \t]*```[a-z]*\n(.*?)^[ \t]*```", page, flags=re.MULTILINE | re.DOTALL)
        prose = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", page, flags=re.MULTILINE | re.DOTALL)
        text = "\n".join(fenced + re.findall(r"`([^`]+)`", prose))
        for target in re.findall(r"make -f recipes/smollm2-135m/Makefile ([a-z][a-z0-9-]*)", text):
            if target not in recipe:
                missing.append(f"{name}: make -f {RECIPE_MAKEFILE} {target}")
        for target in re.findall(r"make -f lab/Makefile ([a-z][a-z0-9-]*)", text):
            if target not in lab:
                missing.append(f"{name}: make -f {LAB_MAKEFILE} {target}")
        for target in re.findall(r"(?:^|[\s`(])make ([a-z][a-z0-9-]*)", text, flags=re.MULTILINE):
            if target not in top:
                missing.append(f"{name}: make {target}")
    assert not missing, "documented make commands that do not exist:\n" + "\n".join(missing)


def test_top_level_makefile_keeps_the_development_targets_only():
    top = targets("Makefile")
    assert len(top) <= 16, sorted(top)
    assert {"setup", "demo", "test", "docs", "docs-figures"} <= top
    assert not top & targets(RECIPE_MAKEFILE) - {"setup"}, "a target defined in both Makefiles"
    assert not top & targets(LAB_MAKEFILE), "a target defined in both Makefiles"


def test_recipe_makefile_names_what_each_target_builds():
    """The recipe's Makefile stays short, and its header lists every target it defines (what each builds): the
    studies and older rounds belong in lab/Makefile, which includes it and so must not define its targets again."""
    text = (ROOT / RECIPE_MAKEFILE).read_text(encoding="utf-8")
    header = text[: text.index("ifeq")]
    recipe = targets(RECIPE_MAKEFILE) - {"setup"}
    unlisted = sorted(t for t in recipe if not re.search(rf"^#\s+{re.escape(t)}\s", header, flags=re.MULTILINE))
    assert not unlisted, f"targets of {RECIPE_MAKEFILE} missing from its header: {unlisted}"
    assert len(recipe) <= 12 and len(text.splitlines()) <= 200, (
        "the recipe's Makefile grew: studies go in lab/Makefile"
    )
    assert not recipe & targets(LAB_MAKEFILE), "a target defined in both the recipe's and the lab's Makefile"


def test_every_docs_page_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    listed = set(re.findall(r":\s*([a-z-]+\.md)\s*$", nav, flags=re.MULTILINE))
    assert pages == listed, f"pages not in the nav: {sorted(pages - listed)}; nav entries without a page: " + str(
        sorted(listed - pages)
    )


def test_architecture_page_names_every_module_and_only_modules_that_exist():
    """docs/architecture.md stays drawn from the code: every module under src/hf_jacobi (but `__init__.py` files and
    `_version.py`) is named by its path there (`decoding/loop.py`), and every `.py` path the page names exists, under
    src/hf_jacobi or from the repository root (`lab/tools/docs_figures.py`)."""
    package = ROOT / "src" / "hf_jacobi"
    modules = {
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if p.name not in ("__init__.py", "_version.py") and "__pycache__" not in p.parts
    }
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b", page))
    missing = sorted(modules - named)
    stale = sorted(path for path in named if not (package / path).is_file() and not (ROOT / path).is_file())
    assert not missing, f"modules not on docs/architecture.md: {missing}"
    assert not stale, f"docs/architecture.md names files that do not exist: {stale}"
