"""The built-in `calculator` tool: arithmetic a model should not do in its head.

Never `eval`: the expression is parsed with `ast` and only numbers, parentheses,
unary - and +, and + - * / ** % // are evaluated, in `Decimal`, so 0.1 + 0.2 is
0.3 and integers stay exact. `//` and `%` follow Python (floor). Limits keep a
model's expression from costing the worker anything: its length, how deep its
parentheses nest, the size of an exponent, and the magnitude of every value on
the way. Each mistake is a `CalculatorError` whose message says what to change.
"""

from __future__ import annotations

import ast
from decimal import (
    ROUND_HALF_EVEN,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
    localcontext,
)
from typing import Annotated

from pydantic import Field

from durafact._activities.tools import tool

MAX_LENGTH = 300  # characters of the expression
MAX_NESTING = 20  # parentheses inside parentheses
MAX_EXPONENT = 1000  # |y| in x ** y
MAX_DIGITS = 100  # every value stays below 10 ** MAX_DIGITS in magnitude
SHOWN_DIGITS = 28  # significant digits of a result that is not a whole number
_LIMIT = Decimal(10) ** MAX_DIGITS
_PRECISION = MAX_DIGITS + 20  # whole numbers under the limit are exact

OPERATORS = "+ - * / ** % // and parentheses"
# Arithmetic as the regular expression the tool's schema carries, so that a model (the
# local one by grammar) writes nothing else: numbers (digits without leading zeros, a
# decimal part) and operators taking turns, signs and opening parentheses before a
# number, closing ones after it, spaces after each. Narrower than what the calculator
# reads (no 1e3, .5 or 1_000: the local model rambled on in exponents), and a regular
# expression cannot count parentheses: the calculator says when they do not balance.
_NUMBER = r"(0|[1-9][0-9]*)(\.[0-9]+)?"
_OPERAND = rf"([-+(] *)*{_NUMBER} *(\) *)*"
EXPRESSION = rf"^ *{_OPERAND}((\*\*|//|[-+*/%]) *{_OPERAND})*$"


class CalculatorError(ValueError):
    """An expression the calculator will not or cannot evaluate, and why."""


@tool
def calculator(
    expression: Annotated[
        str,
        Field(
            description="Arithmetic on numbers, for example (12.5 + 7) * 3 / 2 ** 4",
            pattern=EXPRESSION,
            max_length=MAX_LENGTH,
        ),
    ],
) -> str:
    """Evaluate an arithmetic expression exactly.

    Numbers with + - * / ** % // and parentheses; no variables or functions.
    """
    return plain(evaluate(expression))


def evaluate(expression: str) -> Decimal:
    """The value of `expression`, or a `CalculatorError` saying why not."""
    text = expression.strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(
            f"the expression is too long ({len(text)} characters, at most {MAX_LENGTH})"
        )
    _check_nesting(text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(
            f"not an arithmetic expression ({exc.msg}): use numbers with {OPERATORS}"
        ) from None
    with localcontext() as context:
        context.prec = _PRECISION
        context.rounding = ROUND_HALF_EVEN
        context.traps[InvalidOperation] = True
        context.traps[DivisionByZero] = True
        context.traps[Overflow] = True
        try:
            return _Walker(text).value(tree.body)
        except (InvalidOperation, Overflow):
            raise CalculatorError(
                f"the result cannot be computed within the limits (magnitude below "
                f"10**{MAX_DIGITS}, {_PRECISION} significant digits)"
            ) from None


def plain(value: Decimal) -> str:
    """A result written out: whole numbers in full, others to SHOWN_DIGITS significant
    digits without trailing zeros, never in scientific notation."""
    with localcontext() as context:
        context.prec = _PRECISION
        if value == 0:
            return "0"
        if value == value.to_integral_value():
            return format(value.quantize(Decimal(1)), "f")
        context.prec = SHOWN_DIGITS
        text = format(+value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _check_nesting(text: str) -> None:
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise CalculatorError(
                    f"parentheses nest too deeply (more than {MAX_NESTING} levels)"
                )
        elif char == ")":
            depth -= 1


class _Walker:
    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, node: ast.expr) -> Decimal:
        if isinstance(node, ast.Constant):
            return self._number(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.value(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return _bounded(self._binary(node.op, self.value(node.left), self.value(node.right)))
        raise CalculatorError(f"{self._what(node)} is not supported: use numbers with {OPERATORS}")

    def _number(self, node: ast.Constant) -> Decimal:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            segment = ast.get_source_segment(self.text, node) or repr(value)
            raise CalculatorError(f"{segment!r} is not a number")
        if isinstance(value, int):
            number = Decimal(value)
        else:
            # The literal as written ("0.1", "1e400"), not the float it became.
            written = (ast.get_source_segment(self.text, node) or repr(value)).replace("_", "")
            try:
                number = Decimal(written)
            except InvalidOperation:
                number = Decimal(repr(value))
        return _bounded(number)

    @staticmethod
    def _binary(op: ast.operator, left: Decimal, right: Decimal) -> Decimal:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Pow):
            return _power(left, right)
        if isinstance(op, ast.Div | ast.FloorDiv | ast.Mod):
            if right == 0:
                raise CalculatorError("division by zero")
            if isinstance(op, ast.Div):
                return left / right
            quotient, remainder = divmod(left, right)  # truncated; Python floors
            if remainder and (remainder < 0) != (right < 0):
                quotient, remainder = quotient - 1, remainder + right
            return quotient if isinstance(op, ast.FloorDiv) else remainder
        raise CalculatorError(f"operator {type(op).__name__} is not supported: use {OPERATORS}")

    def _what(self, node: ast.AST) -> str:
        segment = ast.get_source_segment(self.text, node) or type(node).__name__
        kind = {
            ast.Name: "name",
            ast.Call: "function call",
            ast.Attribute: "attribute",
            ast.Subscript: "subscript",
            ast.Compare: "comparison",
            ast.BoolOp: "boolean operator",
        }.get(type(node), "expression")
        return f"{kind} {segment!r}"


def _power(base: Decimal, exponent: Decimal) -> Decimal:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero (0 to a negative power)")
    if base < 0 and exponent != exponent.to_integral_value():
        raise CalculatorError("a negative number to a fractional power is not a real number")
    if base != 0 and abs(base) != 1:
        # Digits of the result before computing it: exponent * log10(|base|).
        digits = exponent * abs(base).log10()
        if digits >= MAX_DIGITS:
            raise CalculatorError(f"the result is too large (at most 10**{MAX_DIGITS})")
    return base**exponent


def _bounded(value: Decimal) -> Decimal:
    if abs(value) >= _LIMIT:
        raise CalculatorError(f"the result is too large (at most 10**{MAX_DIGITS})")
    return value


TOOLS = [calculator]
