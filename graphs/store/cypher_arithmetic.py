"""Constant arithmetic folded the way the graph server evaluates it, so a static bound (a range() size) is
the size the server will build.

Why the server's own rules and not Python's: the two differ exactly where a bound can be hidden.
``1 - 1/2*2`` is 1 in Cypher (``/`` of two integers truncates) and 0.0 in Python; a guard that read it
the Python way let ``range(0, 3000000, 1 - 1/2*2)`` through as a zero step while the server built three
million elements. The rules below were read off FalkorDB's answers to ``RETURN <expr>`` (the test table
in ``tests/graphs/store/test_cypher_arithmetic.py`` asks a real server):

- Integer with integer gives an integer, wrapping at 64 bits (``9223372036854775807 + 1`` is the
  smallest integer); ``/`` truncates toward zero (``-7/2`` is -3) and ``%`` takes the dividend's sign
  (``-7 % 2`` is -1); either by zero is an error.
- A float on either side gives a float (IEEE: ``1.0/0`` is infinity, ``1 % 0.0`` NaN); ``^`` always
  gives a float.
- Precedence, loosest first: ``+ -``; ``* / %`` (left to right); ``^`` (right to left: ``2^3^2`` is 512);
  then a sign, which binds tighter than ``^`` (``-2^2`` is 4.0).
- Literals: decimal, ``0x`` hexadecimal and leading-zero octal integers (``010`` is 8), floats with a
  fraction or an exponent (``.5``, ``1e3``, ``2.5E+2``).

Anything the server would refuse (an integer literal past 64 bits, a float literal that overflows or
underflows, a division of integers by zero) and anything not listed (``1.e3``, a name, a function) is
"not a constant" (None): the caller then refuses the query rather than guess.

Why not ``ast.parse``: CPython 3.11 keeps the AST conversion's recursion depth in interpreter-wide state,
and readers check queries on several threads at once; a parse beside another thread's AST work failed
with ``SystemError: AST constructor recursion depth mismatch``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

Number = int | float
"""A Cypher Integer (a Python int within 64 bits) or Float."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: Deeper than any expression the guard lets through (its nesting bound), shallow enough for the stack.
MAX_DEPTH = 100

_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<hex>0[xX][0-9A-Fa-f]+)"
    r"|(?P<float>(?:\d+\.\d+|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
    r"|(?P<int>\d+)"
    r"|(?P<param>\$[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[-+*/%^()])"
    r")"
)
_WORD_CHAR = re.compile(r"[A-Za-z0-9_.]")


class _NotConstant(Exception):
    """The text is not a constant arithmetic expression, or the server would refuse to evaluate it."""


def wrap(value: int) -> int:
    """An integer wrapped to 64 bits the way the server's integer arithmetic wraps."""
    return (value - INT64_MIN) % 2**64 + INT64_MIN


def _literal(kind: str, text: str) -> Number:
    if kind == "hex":
        value = int(text, 16)
    elif kind == "int":
        if len(text) > 1 and text[0] == "0":
            if not set(text) <= set("01234567"):
                raise _NotConstant  # 08: the server refuses it
            value = int(text, 8)
        else:
            value = int(text)
    else:
        number = float(text)
        mantissa = text.lower().split("e")[0]
        if math.isinf(number) or (number == 0.0 and mantissa.strip("0.") != ""):
            raise _NotConstant  # the server refuses a float literal that overflows or underflows
        return number
    if value > INT64_MAX:
        raise _NotConstant  # the server refuses it (Integer overflow)
    return value


def divide(left: Number, right: Number) -> Number:
    """``left / right`` as the server computes it."""
    if isinstance(left, int) and isinstance(right, int):
        if right == 0:
            raise _NotConstant  # Division by zero
        quotient = abs(left) // abs(right)
        return wrap(quotient if (left < 0) == (right < 0) else -quotient)
    a, b = float(left), float(right)
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def modulo(left: Number, right: Number) -> Number:
    """``left % right`` as the server computes it: the remainder takes the dividend's sign."""
    if isinstance(left, int) and isinstance(right, int):
        if right == 0:
            raise _NotConstant  # Division by zero
        rest = abs(left) % abs(right)
        return rest if left >= 0 else -rest
    a, b = float(left), float(right)
    if b == 0.0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def power(left: Number, right: Number) -> float:
    """``left ^ right``: always a float, C's pow (infinite on overflow, NaN for a negative base and a
    fractional exponent)."""
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(left), np.float64(right)))


def _arith(op: str, left: Number, right: Number) -> Number:
    if op == "/":
        return divide(left, right)
    if op == "%":
        return modulo(left, right)
    if op == "^":
        return power(left, right)
    if isinstance(left, int) and isinstance(right, int):
        exact = left + right if op == "+" else left - right if op == "-" else left * right
        return wrap(exact)
    a, b = float(left), float(right)
    return a + b if op == "+" else a - b if op == "-" else a * b


class CypherArithmetic:
    """The value of one constant expression: numbers, ``$parameters`` with numeric values, ``+ - * / % ^``,
    signs and brackets; None when the text is not one (see the module docstring)."""

    def __init__(self, text: str, params: Mapping[str, Any] | None = None) -> None:
        self.tokens: list[tuple[str, str]] = []
        self.params = params or {}
        pos, end = 0, len(text.rstrip())
        self.ok = True
        while pos < end:
            match = _TOKEN.match(text, pos)
            if match is None or match.lastgroup is None:
                self.ok = False
                break
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
            if kind in ("hex", "float", "int", "param") and pos < end and _WORD_CHAR.match(text, pos):
                self.ok = False  # 1e, 0x, 1.e3, 5abc, $p.x: not a number as the server reads it
                break
        self.at = 0

    def value(self) -> Number | None:
        if not self.ok:
            return None
        try:
            result = self._sum(0)
        except _NotConstant:
            return None
        return result if self.at == len(self.tokens) else None

    def _peek(self) -> str | None:
        if self.at < len(self.tokens):
            kind, text = self.tokens[self.at]
            return text if kind == "op" else kind
        return None

    def _take(self) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise _NotConstant
        self.at += 1
        return self.tokens[self.at - 1]

    def _sum(self, depth: int) -> Number:
        left = self._product(depth)
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            left = _arith(op, left, self._product(depth))
        return left

    def _product(self, depth: int) -> Number:
        left = self._power(depth)
        while self._peek() in ("*", "/", "%"):
            op = self._take()[1]
            left = _arith(op, left, self._power(depth))
        return left

    def _power(self, depth: int) -> Number:
        base = self._signed(depth)
        if self._peek() != "^":
            return base
        self._take()
        if depth > MAX_DEPTH:
            raise _NotConstant
        return power(base, self._power(depth + 1))  # right to left: 2^3^2 is 2^9

    def _signed(self, depth: int) -> Number:
        if depth > MAX_DEPTH:
            raise _NotConstant
        if self._peek() in ("+", "-"):
            sign = self._take()[1]
            inner = self._signed(depth + 1)
            if sign == "+":
                return inner
            return wrap(-inner) if isinstance(inner, int) else -inner
        return self._atom(depth)

    def _atom(self, depth: int) -> Number:
        kind, text = self._take()
        if kind == "op":
            if text != "(":
                raise _NotConstant
            inner = self._sum(depth + 1)
            if self._take() != ("op", ")"):
                raise _NotConstant
            return inner
        if kind == "param":
            value = self.params.get(text[1:])
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _NotConstant
            if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
                raise _NotConstant
            return value
        return _literal(kind, text)


def fold(text: str, params: Mapping[str, Any] | None = None) -> Number | None:
    """The server's value of the constant expression `text`, or None (see CypherArithmetic)."""
    return CypherArithmetic(text, params).value()
