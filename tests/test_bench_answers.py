"""GSM8K and MATH answer checking: each checker must accept right answers and reject wrong ones."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_jacobi.bench.tasks.gsm8k import extract_gsm8k_answer, gsm8k_correct, gsm8k_reference, normalize_number
from hf_jacobi.bench.tasks.math import last_boxed, math_correct, math_equal, math_reference, normalize_math_answer

# ------------------------------------------------------------------------------------------------------------------
# GSM8K
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,000.50", "1000.5"),
        ("$1,000.50", "1000.5"),
        ("7.0", "7"),
        ("-3", "-3"),
        ("3/4", "3/4"),
        ("50%", "50"),
        ("18 dollars.", "18"),
        ("42.", "42"),
        (".5", "0.5"),
        ("+5", "5"),
        ("\\frac{3}{4}", "3/4"),
        ("\\$18.00", "18"),
        ("eighteen", None),
        ("2x+1", None),
        ("3/0", None),
        ("", None),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_normalize_number_undoes_thousands_separators(number):
    assert normalize_number(f"${number:,}.") == str(number)
    assert gsm8k_correct(f"So the total is {number:,}.", str(number))


def test_gsm8k_reference_takes_the_number_after_the_final_marks():
    assert gsm8k_reference("First 3 * 4 = <<3*4=12>>12.\n#### 1,200") == "1200"
    assert gsm8k_reference("#### 5\nfixed below\n#### -7") == "-7"


@pytest.mark.parametrize("answer", ["the answer is 12", "#### twelve"])
def test_gsm8k_reference_without_a_final_number_is_rejected(answer):
    with pytest.raises(ValueError, match="no number after a final '####'") as error:
        gsm8k_reference(answer)
    assert answer in str(error.value)


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("First 3, then 5, so \\boxed{1,234} dollars; #### 9", "1234"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("She has 5 and then 7 more.\n#### 12", "12"),
        ("12 + 3 = 15. The answer is $1,000.", "1000"),
        ("Answer: -3/4 of a cup, from 2 cups", "-3/4"),
        ("I get 3 apples, then 4 more, for 7.", "7"),
        ("It costs $3.50 each.", "3.5"),
        ("no digits at all", None),
    ],
)
def test_extract_gsm8k_answer_prefers_explicit_markers(generation, expected):
    assert extract_gsm8k_answer(generation) == expected


@pytest.mark.parametrize(
    ("generation", "reference", "correct"),
    [
        ("The total is $1,245.00.", "1245", True),
        ("So she has \\boxed{31} muffins.", "31", True),
        ("#### 0.75", "3/4", True),
        ("The answer is 7.", "-7", False),
        ("So she has \\boxed{32} muffins, not 31.", "31", False),
        ("I cannot tell.", "31", False),
    ],
)
def test_gsm8k_correct(generation, reference, correct):
    assert gsm8k_correct(generation, reference) is correct


def test_gsm8k_correct_rejects_a_non_numeric_reference():
    with pytest.raises(ValueError, match=r"reference must be a number.*'thirty'"):
        gsm8k_correct("30", "thirty")


# ------------------------------------------------------------------------------------------------------------------
# MATH
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{\\frac{1}{\\sqrt{2}}}$.", "\\frac{1}{\\sqrt{2}}"),
        ("first \\boxed{1}, finally \\fbox{2}", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("$\\boxed 5$", "5"),
        ("\\boxed {7}", "7"),
        ("\\boxed{\\frac{1}{2}", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac{1}{2}"),
        ("\\frac1{2}", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{1}{2} \\right)", "(3,\\frac{1}{2})"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("10\\text{ cm}", "10"),
        ("\\text{(A)}", "(A)"),
        ("x = 3", "3"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("\\sqrt[3]{2}", "\\sqrt[3]{2}"),
        (".5", "0.5"),
        ("50\\%", "50"),
        ("$5$.", "5"),
        ("1,000", "1000"),
        ("1/2", "\\frac{1}{2}"),
        ("2\\,\\!\\text{ and }\\,3", "2and3"),
    ],
)
def test_normalize_math_answer(answer, expected):
    assert normalize_math_answer(answer) == expected


@pytest.mark.parametrize(
    ("prediction", "reference", "equal"),
    [
        ("\\dfrac{1}{\\sqrt{2}}", "\\frac{1}{\\sqrt{2}}", True),
        ("0.5", "\\frac{1}{2}", True),
        ("-\\frac12", "-0.5", True),
        ("2/4", "0.5", True),
        ("\\left(5, 3\\right)", "(5,3)", True),
        ("140^\\circ", "140", True),
        ("12\\text{ inches}", "12", True),
        ("y = 2x + 1", "2x+1", True),
        ("7.0", "7", True),
        ("\\frac{1}{3}", "0.33", False),
        ("(3,5)", "(5,3)", False),
        ("\\sqrt{3}", "3", False),
        ("x + y = 3", "3", False),
    ],
)
def test_math_equal(prediction, reference, equal):
    assert math_equal(prediction, reference) is equal


@pytest.mark.parametrize(
    ("generation", "reference", "correct"),
    [
        ("Adding gives $\\boxed{\\dfrac{11}{12}}$.", "\\frac{11}{12}", True),
        ("The midpoint is $\\boxed{\\left(5, 3\\right)}$.", "(5,3)", True),
        ("So the answer is $\\boxed{x = 5}$.", "5", True),
        ("Adding gives $\\boxed{\\frac{10}{12}}$.", "\\frac{11}{12}", False),
        ("The answer is 5.", "5", False),
    ],
)
def test_math_correct(generation, reference, correct):
    assert math_correct(generation, reference) is correct


def test_math_reference_prefers_answer_then_boxed_solution():
    assert math_reference({"answer": " 7 ", "solution": "\\boxed{8}"}) == "7"
    assert math_reference({"answer": "", "solution": "so $\\boxed{\\frac{1}{2}}$"}) == "\\frac{1}{2}"
    assert math_reference({"solution": "it is \\boxed{(1,2)}"}) == "(1,2)"
    with pytest.raises(ValueError, match=r"its keys are \['problem', 'solution'\]"):
        math_reference({"problem": "?", "solution": "no box"})
