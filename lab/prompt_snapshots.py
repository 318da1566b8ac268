"""How the shipped prompt snapshots were built: the `packages` prompt set (an "implement this function" prompt per
documented public function of the installed packages) and the `packages-source` anchor texts (the sources of the
functions behind its train prompts). What is installed differs between machines, so the package ships the frozen
parquet files (`hf_jacobi.data.function_prompts.package_prompt_set`, `hf_jacobi.data.anchor_texts.load_anchor_texts`),
and this walk stays with the project: `make -f lab/Makefile reproduce-prompts` runs it again and
compares."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import pkgutil
import random
import textwrap
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import datasets

from hf_jacobi.data.anchor_texts import ANCHOR_TEXT_SET
from hf_jacobi.data.decontamination import find_overlaps, prompt_texts
from hf_jacobi.data.function_prompts import (
    _stdlib_function_prompt,
    humaneval_entry_points,
    package_prompt_set,
    prompt_dataset,
)
from hf_jacobi.data.humaneval import load_humaneval

logger = logging.getLogger(__name__)

# Packages walked, in this order; the first prompt of a function name wins, so stdlib entries come first.
PACKAGES = (
    "stdlib", "numpy", "sympy", "networkx", "pandas", "scipy", "jinja2", "packaging", "dateutil", "pygments",
    "markdown_it", "rich", "click", "yaml", "requests", "urllib3", "idna", "filelock", "fsspec", "huggingface_hub",
    "datasets", "accelerate", "peft", "trl", "transformers.utils", "transformers.generation", "hypothesis",
)  # fmt: skip
# Pure-Python stdlib modules with many documented functions (C modules have no usable signatures).
STDLIB_TOP = (
    "ast", "base64", "bisect", "calendar", "codecs", "colorsys", "configparser", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "email", "fnmatch", "fractions", "ftplib", "functools", "genericpath",
    "getopt", "gettext", "glob", "gzip", "heapq", "hmac", "html", "http", "imaplib", "inspect", "ipaddress", "json",
    "linecache", "locale", "logging", "mailbox", "mimetypes", "netrc", "ntpath", "numbers", "operator", "optparse",
    "os", "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "posixpath", "pprint", "pydoc", "quopri",
    "random", "re", "reprlib", "sched", "secrets", "selectors", "shlex", "shutil", "smtplib", "socket",
    "statistics", "string", "subprocess", "sysconfig", "tarfile", "tempfile", "textwrap", "threading", "timeit",
    "tokenize", "trace", "traceback", "types", "typing", "urllib", "uu", "uuid", "warnings", "wave", "weakref",
    "wsgiref", "xml", "zipfile", "zipimport",
)  # fmt: skip
SKIP_PARTS = ("test", "tests", "testing", "_vendor", "vendored", "conftest", "__main__", "setup", "benchmarks")
MAX_DOCSTRING_CHARS = 1200
MAX_MODULES_PER_PACKAGE = 400
MIN_SOURCE_CHARS = 200
"""Shorter functions are mostly a signature, a docstring and one delegating line: little code to hold."""
MAX_SOURCE_CHARS = 4000
"""Longer ones would crowd out the rest (a row is truncated to the run's max_length anyway)."""


def function_source(prompt_id: str) -> str | None:
    """The dedented source of the function a `packages` prompt was built from ("pkg/<module>.<name>"), or None when it
    cannot be read here (the package is missing, or the function has no Python source)."""
    if not prompt_id.startswith("pkg/"):
        return None
    module_name, _, name = prompt_id[len("pkg/") :].rpartition(".")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            function = getattr(importlib.import_module(module_name), name)
        return textwrap.dedent(inspect.getsource(function))
    except BaseException:  # not installed, renamed, C-implemented, or a module that exits at import
        return None


def anchor_text_rows(
    prompt_ids: Iterable[str], excluded: Mapping[str, str]
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(text_id, source) of the functions behind `prompt_ids`, in their order, and how many each filter dropped: no
    source here, too short or long, a duplicate, or sharing a word 13-gram with one of the `excluded` texts."""
    dropped = {"no source": 0, "length": 0, "duplicate": 0, "overlap": 0}
    rows: dict[str, str] = {}
    seen: set[str] = set()
    for prompt_id in prompt_ids:
        source = function_source(prompt_id)
        if source is None:
            dropped["no source"] += 1
        elif not MIN_SOURCE_CHARS <= len(source) <= MAX_SOURCE_CHARS:
            dropped["length"] += 1
        elif source in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(source)
            rows[prompt_id] = source
    leaking = {overlap.candidate for overlap in find_overlaps(rows, excluded)}
    dropped["overlap"] = len(leaking)
    return [(text_id, text) for text_id, text in rows.items() if text_id not in leaking], dropped


def evaluation_texts() -> dict[str, str]:
    """The texts anchor texts must not share with: HumanEval's prompts and canonical solutions (the bench, the demo,
    the NLL bar) and the `packages` test prompts (held-out tokens per forward)."""
    texts = {}
    for problem in load_humaneval():
        texts[problem.task_id] = problem.prompt + problem.canonical_solution
    texts.update(prompt_texts(package_prompt_set("test")))
    return texts


def write_anchor_text_file(path: str | os.PathLike[str] = ANCHOR_TEXT_SET) -> Path:
    """Snapshots the sources of the `packages` train prompts' functions (`text_id`, `text`), in the prompts' order."""
    rows, dropped = anchor_text_rows(package_prompt_set("train")["prompt_id"], evaluation_texts())
    logger.info("%d anchor texts; dropped: %s", len(rows), dropped)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    datasets.Dataset.from_dict({"text_id": [r[0] for r in rows], "text": [r[1] for r in rows]}).to_parquet(str(tmp))
    os.replace(tmp, out)
    return out


def _modules(package: str) -> list[str]:
    """The importable module names of `package` (itself first), skipping tests and private modules."""
    if package == "stdlib":
        names: list[str] = []
        for top in STDLIB_TOP:
            names.extend(_modules(top))
        return names
    try:
        root = importlib.import_module(package)
    except Exception:  # not installed, or broken: the source just has fewer prompts
        return []
    names = [package]
    path = getattr(root, "__path__", None)
    if path is None:
        return names
    for info in pkgutil.walk_packages(path, prefix=f"{package}.", onerror=lambda _: None):
        parts = info.name.split(".")
        if any(p.startswith("_") or p in SKIP_PARTS for p in parts[1:]):
            continue
        names.append(info.name)
        if len(names) >= MAX_MODULES_PER_PACKAGE:
            break
    return names


def package_prompt_rows(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, str]]:
    """(prompt_id, text) for every usable documented function, one per function name and per docstring."""
    excluded = humaneval_entry_points()
    rows: dict[str, str] = {}
    seen_names: set[str] = set()
    seen_docs: set[str] = set()
    for package in packages:
        before = len(rows)
        for module_name in _modules(package):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    module = importlib.import_module(module_name)
            except BaseException:  # some modules exit or need optional extras at import
                continue
            for name, value in sorted(vars(module).items()):
                if name.startswith("_") or not inspect.isfunction(value) or value.__module__ != module_name:
                    continue
                if name in excluded or name in seen_names:
                    continue
                doc = inspect.cleandoc(value.__doc__ or "")
                if len(doc) > MAX_DOCSTRING_CHARS or doc in seen_docs:
                    continue
                short = module_name.rsplit(".", 1)[-1]
                text = _stdlib_function_prompt(short, name, value)
                if text is None:
                    continue
                seen_names.add(name)
                seen_docs.add(doc)
                rows[f"pkg/{module_name}.{name}"] = text
        logger.info("%s: %d prompts", package, len(rows) - before)
    return sorted(rows.items())


def write_prompt_file(path: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Snapshots the package prompts to a parquet file (`prompt_id`, `messages`), shuffled by `seed`."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    package_prompts(seed=seed).to_parquet(str(tmp))
    os.replace(tmp, out)
    return out


def package_prompts(limit: int | None = None, seed: int = 0) -> datasets.Dataset:
    """The package prompts as a dataset, walking what is installed here (for the shipped snapshot: `package_prompt_set`)."""
    rows = package_prompt_rows()
    random.Random(seed).shuffle(rows)
    return prompt_dataset(rows[:limit] if limit is not None else rows)
