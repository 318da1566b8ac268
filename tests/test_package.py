"""The package's public surface: every exported name resolves, and importing it stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import hf_jacobi


def _fresh_python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_is_lazy_and_fast():
    """`import hf_jacobi` imports no heavy dependency; decoding names do not pull in the training stack."""
    result = _fresh_python(
        "import json, sys, time\n"
        "t = time.perf_counter(); import hf_jacobi; elapsed = time.perf_counter() - t\n"
        "bare = sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'datasets') if m in sys.modules)\n"
        "from hf_jacobi import JacobiConfig, enable_jacobi, load_default_model\n"
        "decoding = sorted(m for m in ('trl', 'peft', 'datasets') if m in sys.modules)\n"
        "print(json.dumps({'elapsed': elapsed, 'bare': bare, 'decoding': decoding}))"
    )
    assert result["bare"] == [], f"import hf_jacobi imported {result['bare']}"
    assert result["decoding"] == [], f"decoding names imported the training stack: {result['decoding']}"
    assert result["elapsed"] < 1.5


def test_every_exported_name_resolves():
    for name in hf_jacobi.__all__:
        assert getattr(hf_jacobi, name) is not None, name
    assert set(dir(hf_jacobi)) >= set(hf_jacobi.__all__)


def test_unknown_name_is_an_attribute_error():
    try:
        hf_jacobi.not_a_name  # noqa: B018
    except AttributeError as error:
        assert "not_a_name" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_only_the_config_spells_jacobi_setting_names():
    """Settings travel as JacobiConfig: no module but decoding/config.py builds or parses `jacobi_*` names.

    Docstrings may mention them; string literals and f-string parts in code may not.
    """
    import ast
    from pathlib import Path

    from hf_jacobi.decoding.config import JacobiConfig

    names = set(JacobiConfig.setting_names())
    root = Path(hf_jacobi.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "decoding" / "config.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
                if text in names or text == "jacobi_" or any(f"{name}=" in text for name in names):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}: {text!r}")
    assert not offenders, "jacobi_* names spelled outside decoding/config.py:\n" + "\n".join(offenders)


def test_every_make_target_the_readme_names_exists():
    """The README's commands are `make` targets; a renamed or removed target would leave a user a dead command."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    # commands are code: fenced blocks and `inline` spans (prose such as "make the default faster" is not a command)
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", readme, flags=re.MULTILINE | re.DOTALL))
    named = set(re.findall(r"(?:^|[\s;&(])make ([a-z][a-z0-9-]*)", "\n".join(fenced + inline), flags=re.MULTILINE))
    defined = set(re.findall(r"^([a-z][a-z0-9-]*):", (root / "Makefile").read_text(), flags=re.MULTILINE))
    assert named and named <= defined, f"README names make targets the Makefile lacks: {sorted(named - defined)}"


def test_wheel_ships_every_module_and_data_file(tmp_path):
    """A wheel built from the source tree holds every module, the shipped adapter, the prompt sets and the model cards:
    a subpackage or data folder left out of pyproject's lists would otherwise surface only on a user's install."""
    import shutil
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # a copy, so that no earlier build/ folder of the checkout (setuptools reuses its contents) can fill the gaps
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("src", "model_cards"):
        shutil.copytree(root / name, tree / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tree / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(tree),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("hf_jacobi-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    src = tree / "src"
    expected = {
        path.relative_to(src).as_posix()
        for path in (src / "hf_jacobi").rglob("*")
        if path.is_file() and path.suffix in {".py", ".parquet", ".md", ".json", ".safetensors"}
    }
    expected |= {f"hf_jacobi/model_cards/{path.name}" for path in (tree / "model_cards").glob("*.md")}
    assert expected, "nothing found to check"
    assert not expected - shipped, f"missing from the wheel: {sorted(expected - shipped)}"


def test_the_size_report_lists_the_longest_modules_and_functions() -> None:
    """Size is guidance (docs/development.md), not a wall: `make size` lists the longest, past-the-guide ones marked."""
    from lab.tools.size_report import FUNCTION_GUIDE, MODULE_GUIDE, measure, report

    root = Path(__file__).resolve().parents[1] / "src" / "hf_jacobi"
    modules, functions = measure(root)
    assert modules[0][0] >= modules[-1][0] and any(name == "decoding/loop.py" for _, name in modules)
    assert any(name.endswith(":probe_acceptance") for _, name in functions)
    text = report(root, top=3)
    assert len(text.splitlines()) == 11 and MODULE_GUIDE > 300 and FUNCTION_GUIDE > 60


def test_no_two_modules_open_with_the_same_sentence() -> None:
    """One concept, one home: a library module and the CLI module that calls it say different things first."""
    import ast
    import re

    root = Path(__file__).resolve().parents[1] / "src" / "hf_jacobi"
    seen: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not doc:
            continue
        first = re.split(r"(?<=[.:])\s", " ".join(doc.split()), maxsplit=1)[0]
        name = path.relative_to(root).as_posix()
        assert first not in seen, f"{name} and {seen[first]} both open with {first!r}"
        seen[first] = name
