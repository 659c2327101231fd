"""The constant bounds of ``range()`` are folded the way Python reads the same text (``^`` as ``**``), without
``ast`` (CPython 3.11's AST conversion is not safe beside other threads' AST work): a table of the cases
that matter, and random expressions compared with Python's own parser."""

from __future__ import annotations

import ast
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphs.store.cypher_limits import _Arithmetic


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1000*1000*1000", 1e9),
        ("10^9", 1e9),
        ("-5", -5.0),
        ("-2^2", -4.0),  # the power binds tighter than the sign on its left
        ("2^3^2", 512.0),  # and groups to the right
        ("2^-1", 0.5),
        ("(1 + 2) * 3 - 4 / 8", 8.5),
        ("1.e5 + .5 + 5.", 100005.5),
        ("10^500", math.inf),  # never computed
        ("(-8)^(1/3)", math.inf),  # not a real number: unbounded, so refused by the caller
        ("1/0", None),
        ("4//2", None),  # floor division is not folded
        ("007", None),  # Python refuses a leading zero
        ("(1+2", None),
        ("1 2", None),
        ("5e", None),
        ("", None),
        ("(" * 150 + "1" + ")" * 150, None),  # deeper than any expression the guard lets through
    ],
)
def test_table(text: str, value: float | None) -> None:
    assert _Arithmetic(text).value() == value


def _python(text: str) -> float | None:
    """The reference: Python's parser, numbers as floats, the same refusals and the same bound on powers."""
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None

    def fold(node: ast.AST) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = fold(node.operand)
            return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
        if isinstance(node, ast.BinOp):
            left, right = fold(node.left), fold(node.right)
            if left is None or right is None:
                return None
            try:
                if isinstance(node.op, ast.Add):
                    return left + right
                if isinstance(node.op, ast.Sub):
                    return left - right
                if isinstance(node.op, ast.Mult):
                    return left * right
                if isinstance(node.op, ast.Div):
                    return left / right if right else None
                if isinstance(node.op, ast.Pow):
                    return math.inf if abs(right) > 400 and abs(left) > 1 else float(left**right)
            except (OverflowError, ZeroDivisionError, TypeError):
                return math.inf
        return None

    return fold(tree.body)


_ATOMS = st.sampled_from(["0", "1", "2", "9", "10", "3.5", ".5", "5.", "1e3", "2e-2", "00", "007", "1.e5"])
_OPS = st.sampled_from(["+", "-", "*", "/", "^", "**", "//"])
_EXPR = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["-", "+"]), inner).map("".join),
        inner.map(lambda e: f"({e})"),
        st.tuples(inner, st.sampled_from(["", " "]), _OPS, st.sampled_from(["", " "]), inner).map("".join),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(text=_EXPR, cut=st.integers(min_value=0, max_value=2))
def test_random_expressions_fold_as_python_reads_them(text: str, cut: int) -> None:
    text = text[: len(text) - cut] if cut else text  # truncated texts are refused alike
    got, want = _Arithmetic(text).value(), _python(text)
    assert got == want or (got is not None and want is not None and math.isnan(got) and math.isnan(want)), text
