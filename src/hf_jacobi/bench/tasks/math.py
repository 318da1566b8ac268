"""MATH (Hendrycks et al., or MATH-500): the final `\\boxed{}` answer compared with the reference.

Answers are compared after normalization of their LaTeX spelling, and numerically where both sides are numbers;
symbolic equivalence such as `\\frac{\\sqrt{2}}{2}` versus `\\frac{1}{\\sqrt{2}}` is not attempted.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from .base import BenchTask, TaskOptions
from .problems import RowFormat, question_task

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)")
_UNIT_TEXT_RE = re.compile(r"^(.*\S)\s*\\(?:text|mbox|mathrm)\{\s*[a-zA-Z][a-zA-Z. ]*\}$", re.DOTALL)
_SINGLE_VARIABLE_RE = re.compile(r"[a-zA-Z](?:_\{?\w+\}?)?|\\[a-zA-Z]+")
_THOUSANDS_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def to_fraction(number: str) -> Fraction | None:
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_close(first: Fraction, second: Fraction) -> bool:
    return math.isclose(float(first), float(second), rel_tol=1e-6, abs_tol=1e-9)


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
        numerator, denominator = to_fraction(match.group(2)), to_fraction(match.group(3))
        if numerator is None or denominator is None or denominator == 0:
            return None
        value = numerator / denominator
        return -value if match.group(1) else value
    if re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)(?:/(?:\d+\.?\d*|\.\d+))?", normalized):
        return to_fraction(normalized)
    return None


def math_equal(prediction: str, reference: str) -> bool:
    """Same normalized string, or the same number however it is written (`0.5`, `\\frac{1}{2}`, `1/2`)."""
    predicted, gold = normalize_math_answer(prediction), normalize_math_answer(reference)
    if predicted == gold:
        return True
    predicted_value, gold_value = _math_number(predicted), _math_number(gold)
    return predicted_value is not None and gold_value is not None and numbers_close(predicted_value, gold_value)


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


ROWS = RowFormat(
    columns=(("problem",), ("answer", "solution")), read=lambda row: (row["problem"], math_reference(row))
)
"""A MATH row: the `problem`, and the reference from `answer` or the boxed `solution`."""


def build(options: TaskOptions) -> BenchTask:
    return question_task("math", options, ROWS, math_correct, example="HuggingFaceH4/MATH-500")
