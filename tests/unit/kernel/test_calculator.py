"""The calculator evaluates arithmetic only, within bounds, and reports failures as values."""

from __future__ import annotations

import pytest

from kernel.turn import calculator
from kernel.turn.calculator import CalcError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("-3 + +4", 1),
        ("--3", 3),
        ("-(2 + 3)", -5),
        ("1_000 * 2", 2000),
        ("1.5e3 / 3", 500.0),
        ("  42  ", 42),
    ],
)
def test_arithmetic_follows_python_semantics(expression: str, expected: float) -> None:
    assert calculator.evaluate(expression) == expected


@pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "5 % 0", "0 ** -1", "1.0 / 0.0"])
def test_division_by_zero_is_an_error_value(expression: str) -> None:
    assert calculator.evaluate(expression) == CalcError("division by zero")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9 ** 9 ** 9", "exponent larger than 1000"),
        ("2 ** 1001", "exponent larger than 1000"),
        ("1000 ** 1000", "result too large"),
        ("7 ** 1000 * 7 ** 1000 * 7 ** 1000", "result too large"),
        ("10.0 ** 400", "result too large"),
        ("1e400", "result too large"),
        ("2 ** 1000 * 2 ** 100 / 3", "result too large"),
    ],
)
def test_work_and_results_are_bounded(expression: str, message: str) -> None:
    assert calculator.evaluate(expression) == CalcError(message)


def test_a_large_result_within_bounds_is_exact() -> None:
    assert calculator.evaluate("3 ** 1000") == 3**1000


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os').system('true')", "unsupported element"),
        ("abc + 1", "unsupported element"),
        ("(1).real", "unsupported element"),
        ("1 < 2", "unsupported element"),
        ("2 ^ 3", "use '**'"),
        ("2 << 3", "unsupported operator"),
        ("~1", "unsupported operator"),
        ("1j", "unsupported literal"),
        ("True + 1", "unsupported literal"),
        ("'a' * 3", "unsupported element"),
        ("(1 + 2", "not an arithmetic expression"),
        ("1 +", "not an arithmetic expression"),
        ("1\x00", "not an arithmetic expression"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("1+" * 100 + "1", "longer than 200 characters"),
    ],
)
def test_anything_but_arithmetic_is_rejected_without_running_it(
    expression: str, fragment: str
) -> None:
    result = calculator.evaluate(expression)

    assert isinstance(result, CalcError)
    assert fragment in result.message


def test_a_non_real_result_is_an_error() -> None:
    assert calculator.evaluate("(-8) ** 0.5") == CalcError("result is not a real number")


def test_check_reports_syntax_problems_without_evaluating() -> None:
    assert calculator.check("1 / 0") is None  # well formed; fails only when evaluated
    assert calculator.check("2 ^ 3") == CalcError("'^' is not a power operator; use '**'")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(20, "20"), (2.0, "2"), (3.5, "3.5"), (1 / 3, "0.333333333333"), (1e20, "1e+20")],
)
def test_numbers_are_formatted_for_people(value: float, shown: str) -> None:
    assert calculator.format_number(value) == shown
