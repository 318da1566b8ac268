"""GSM8K: the model's final number compared numerically with the reference, so "18.00", "$18" and "18" all count."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .base import BenchTask, TaskOptions
from .math import last_boxed, numbers_close, to_fraction
from .problems import RowFormat, question_task

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


def gsm8k_correct(generation: str, reference: str) -> bool:
    """Numeric match of the extracted answer."""
    gold_text = normalize_number(reference)
    gold = to_fraction(gold_text) if gold_text is not None else None
    if gold is None:
        raise ValueError(f"reference must be a number such as '42', '1000.5' or '3/4', got {reference!r}")
    predicted_text = extract_gsm8k_answer(generation)
    predicted = to_fraction(predicted_text) if predicted_text is not None else None
    return predicted is not None and numbers_close(predicted, gold)


ROWS = RowFormat(
    columns=(("question",), ("answer",)), read=lambda row: (row["question"], gsm8k_reference(row["answer"]))
)
"""A GSM8K row: the `question`, and the number after the final `####` of its `answer`."""


def build(options: TaskOptions) -> BenchTask:
    return question_task("gsm8k", options, ROWS, gsm8k_correct, example="openai/gsm8k:main")
