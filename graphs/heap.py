"""Large read-only tables held as tuples, so the cyclic garbage collector stops visiting them.

Why: a full collection of CPython's cyclic garbage collector visits every element of every container it
tracks. A list is tracked for as long as it lives; a tuple of strings and numbers is untracked by the
first collection that sees it. The key and label tables of the SKB, of the indexes, of the lexicon and of
the scoring models grow with the graph: at 1M nodes they held ~9 M list elements, and a full collection
(one every few questions that parse thousands of rows) paused a question for 141 ms instead of ~55 ms.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

_ATOMS = (str, int, float, bool, type(None))


def table(values: Iterable[T]) -> tuple[T, ...]:
    """``values`` as a tuple (the same object when it is one already)."""
    return values if isinstance(values, tuple) else tuple(values)


def untracked_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (a parsed JSON object) with each list of strings and numbers in it, or in an object in it, as a
    tuple (other values as they are)."""
    return {key: _untracked(value) for key, value in meta.items()}


def _untracked(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, _ATOMS) for v in value):
        return tuple(value)
    if isinstance(value, dict):
        return {key: _untracked(v) for key, v in value.items()}
    return value
