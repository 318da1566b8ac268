"""The wheel holds what a user of the library calls, and the project's own studies stay in lab/ beside it.

Every module under src/hf_jacobi must be reached from what a user calls: the public API (`hf_jacobi.__all__`), the
`hf-jacobi` commands, and the serving integrations, following imports (those inside functions too) and the files a
module runs by path (the sandbox's child script). A module reached only from lab/ or the tests belongs in lab/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

USER_ENTRY_POINTS = (
    "hf_jacobi",  # the public API, through its lazy exports
    "hf_jacobi.cli.__main__",  # `python -m hf_jacobi.cli`, the form `accelerate launch` runs
    "hf_jacobi.integrations.vllm",  # JacobiProposer, named in vLLM's speculative config (docs/serving.md)
    "hf_jacobi.integrations.merged",  # the merged folder a serving engine loads (docs/serving.md)
)


def package_modules() -> dict[str, Path]:
    modules = {}
    for path in (SRC / "hf_jacobi").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def references(name: str, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports (anywhere in its body), exports lazily by name, or runs by file name."""
    path = modules[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        candidates = []
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            candidates = [f"{module}.{alias.name}" for alias in node.names] + [module]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(".") and name == "hf_jacobi":  # _EXPORTS: ".decoding.config"
                candidates = [f"hf_jacobi{node.value}"]
            elif node.value.endswith(".py"):  # a script run by path, beside this module
                candidates = [f"{package}.{node.value[:-3]}"]
        found |= {candidate for candidate in candidates if candidate in modules}
    return found


def reached_from(entry_points: tuple[str, ...], modules: dict[str, Path]) -> set[str]:
    seen, stack = set(), list(entry_points)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        stack += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules]
        stack += sorted(references(name, modules) - seen)
    return seen


def test_every_module_of_the_wheel_has_a_caller_a_user_reaches():
    modules = package_modules()
    assert "hf_jacobi.cli" in modules and "hf_jacobi.decoding.loop" in modules, "nothing found to check"
    unreached = sorted(set(modules) - reached_from(USER_ENTRY_POINTS, modules))
    assert not unreached, f"modules no user-facing entry point reaches (they belong in lab/): {unreached}"


def test_the_walk_finds_a_module_that_only_the_lab_would_call(tmp_path, monkeypatch):
    """The check above can fail: a study module dropped into the package is reported."""
    modules = package_modules()
    study = tmp_path / "study_only.py"
    study.write_text("from hf_jacobi.decoding.loop import jacobi_decode\n", encoding="utf-8")
    modules["hf_jacobi.study_only"] = study
    assert "hf_jacobi.study_only" not in reached_from(USER_ENTRY_POINTS, modules)


def test_the_package_never_imports_the_lab_and_the_cli_offers_no_lab_command():
    from hf_jacobi import cli

    for path in (SRC / "hf_jacobi").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("lab"), f"{path} imports the lab"
            if isinstance(node, ast.Import):
                assert not any(alias.name.split(".")[0] == "lab" for alias in node.names), f"{path} imports the lab"
    offered = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert not offered & {"study", "compare", "overhead", "forward-cost"}, offered


PUBLIC_ONLY = ("recipes", "lab/campaigns")
"""Where code calls the package as a user does: recipes and the lab's campaign drivers. A rename inside the package
must not break them, so they import the public API (`hf_jacobi.__all__`) and the command line (`hf_jacobi.cli.main`)."""
PROFILERS = {"lab/campaigns/campaign/padding.py", "lab/campaigns/campaign/method_study.py"}
"""Modules there that study internals on purpose: the padding report measures the trainer's own sampler and collator,
the method study the parallel collection's forwards and argmax disagreements."""


def internal_imports(path: Path) -> set[str]:
    """The package names `path` imports that are neither public API nor the command line's entry point."""
    import hf_jacobi

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hf_jacobi":
            for alias in node.names:
                if node.module == "hf_jacobi" and alias.name in hf_jacobi.__all__:
                    continue
                if node.module == "hf_jacobi.cli" and alias.name == "main":
                    continue
                found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("hf_jacobi.")}
    return found


def test_recipes_and_campaign_drivers_import_only_the_public_api() -> None:
    seen = {}
    for folder in PUBLIC_ONLY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative not in PROFILERS and (names := internal_imports(path)):
                seen[relative] = sorted(names)
    assert not seen, "import these through the public API (hf_jacobi.__all__) or the command line"


def test_the_public_import_check_sees_an_internal_name(tmp_path: Path) -> None:
    module = tmp_path / "driver.py"
    module.write_text(
        "from hf_jacobi import load_model, JacobiConfig\nfrom hf_jacobi.cli import main\n"
        "from hf_jacobi.data.shards import SCHEMA\nimport hf_jacobi.loading\n"
        "def f():\n    from hf_jacobi import not_public_name\n",
        encoding="utf-8",
    )
    assert internal_imports(module) == {
        "hf_jacobi.data.shards.SCHEMA",
        "hf_jacobi.loading",
        "hf_jacobi.not_public_name",
    }


def opening_sentence(path: Path) -> str | None:
    """A module docstring's first sentence, whitespace folded."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return " ".join(re.split(r"(?<=\.)\s", doc.strip(), maxsplit=1)[0].split()) if doc else None


def test_no_two_modules_open_with_the_same_sentence() -> None:
    """A sentence shared by two modules' openings says they hold one concept twice (one home per command)."""
    seen: dict[str, list[str]] = {}
    for name, path in sorted(package_modules().items()):
        if (sentence := opening_sentence(path)) is not None:
            seen.setdefault(sentence, []).append(name)
    assert not {s: names for s, names in seen.items() if len(names) > 1}


def test_the_opening_sentence_check_sees_a_shared_one(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text('"""Pushes a folder to the Hub.\n\nMore.\n"""\n', encoding="utf-8")
    assert opening_sentence(tmp_path / "a.py") == opening_sentence(tmp_path / "b.py") == "Pushes a folder to the Hub."
