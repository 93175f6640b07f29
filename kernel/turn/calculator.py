"""A safe arithmetic evaluator for the ``calculator`` tool. Pure: no IO, no ``eval``.

Grammar: int and float literals, ``+ - * / // % **``, parentheses, unary ``-`` and ``+``.
The expression is parsed with :mod:`ast` and walked node by node; any other node (names,
calls, attributes, comparisons, ``^``, complex literals...) is rejected, so no user text is
ever executed.

Contract:
* ``check(expression)`` validates without evaluating (used by the tool's precheck);
* ``evaluate(expression)`` returns an ``int``/``float`` or a ``CalcError`` value; it never
  raises for any input string.

Invariants (tests/unit/kernel/test_calculator.py):
* input longer than ``MAX_EXPRESSION_LENGTH`` is rejected before parsing;
* work is bounded: a power's exponent is at most ``MAX_EXPONENT`` in magnitude and no integer
  result may exceed ``MAX_INT_BITS`` bits, so ``9**9**9`` is an error, not a hang;
* division or modulo by zero, overflow and non-real results are ``CalcError`` values.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

MAX_EXPRESSION_LENGTH = 200
MAX_EXPONENT = 1000
MAX_INT_BITS = 4096

Number = int | float

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


@dataclass(frozen=True, slots=True)
class CalcError:
    """Why an expression could not be evaluated; a value, never raised."""

    message: str


class _Rejected(Exception):
    """Internal signal that unwinds the tree walk; converted to ``CalcError`` at the edge."""


def check(expression: str) -> CalcError | None:
    """Return the syntax problem of ``expression``, or None when it is well formed."""
    parsed = _parse(expression)
    return parsed if isinstance(parsed, CalcError) else None


def evaluate(expression: str) -> Number | CalcError:
    """Evaluate ``expression``; every failure comes back as a ``CalcError``."""
    parsed = _parse(expression)
    if isinstance(parsed, CalcError):
        return parsed
    try:
        value = _eval(parsed)
    except _Rejected as exc:
        return CalcError(str(exc))
    except ZeroDivisionError:
        return CalcError("division by zero")
    except OverflowError:
        return CalcError("result too large")
    if isinstance(value, float) and not math.isfinite(value):
        return CalcError("result too large")
    return value


def format_number(value: Number) -> str:
    """Render a result for people: integers exactly, floats to 12 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def _parse(expression: str) -> ast.expr | CalcError:
    text = expression.strip()
    if not text:
        return CalcError("empty expression")
    if len(text) > MAX_EXPRESSION_LENGTH:
        return CalcError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # ValueError: NUL bytes; RecursionError/MemoryError: pathological nesting.
        return CalcError(f"not an arithmetic expression: {text!r}")
    problem = _first_unsupported(tree.body)
    return CalcError(problem) if problem else tree.body


def _first_unsupported(root: ast.expr) -> str | None:
    for node in ast.walk(root):
        match node:
            case ast.Constant(value=bool()) | ast.Constant(value=complex()):
                return f"unsupported literal {ast.unparse(node)}"
            case ast.Constant(value=int() | float()):
                pass
            case ast.BinOp(op=ast.BitXor()):
                return "'^' is not a power operator; use '**'"
            case ast.BinOp(op=op) if not isinstance(op, _OPERATORS):
                return f"unsupported operator in {ast.unparse(node)}"
            case ast.UnaryOp(op=op) if not isinstance(op, (ast.USub, ast.UAdd)):
                return f"unsupported operator in {ast.unparse(node)}"
            case ast.BinOp() | ast.UnaryOp() | ast.operator() | ast.unaryop():
                pass
            case _:
                return f"unsupported element: {ast.unparse(node)}"
    return None


def _eval(node: ast.expr) -> Number:
    match node:
        case ast.Constant(value=int() | float() as value):
            return value
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand)
        case ast.UnaryOp(operand=operand):
            return +_eval(operand)
        case ast.BinOp(left=left, op=op, right=right):
            return _bounded(_apply(op, _eval(left), _eval(right)))
        case _:  # unreachable after _first_unsupported; kept so the walk is total
            raise _Rejected(f"unsupported element: {ast.unparse(node)}")


def _apply(op: ast.operator, left: Number, right: Number) -> Number:
    match op:
        case ast.Add():
            return left + right
        case ast.Sub():
            return left - right
        case ast.Mult():
            return left * right
        case ast.Div():
            return left / right
        case ast.FloorDiv():
            return left // right
        case ast.Mod():
            return left % right
        case _:
            return _power(left, right)


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise _Rejected(f"exponent larger than {MAX_EXPONENT}")
    # Estimate before computing: a big int power can take seconds and gigabytes to build.
    # (bit_length - 1) * exponent is a lower bound on the result's size in bits.
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        too_big = (base.bit_length() - 1) * exponent > MAX_INT_BITS
        if too_big:
            raise _Rejected("result too large")
    result = base**exponent
    if isinstance(result, complex):  # e.g. (-8) ** 0.5
        raise _Rejected("result is not a real number")
    return result


def _bounded(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _Rejected("result too large")
    return value
