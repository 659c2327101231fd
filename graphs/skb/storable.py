"""What a graph store holds exactly: node keys, property names and values checked before anything is built.

Why: the SKB keeps the data exactly and answers from it in process; the graph store answers the same
questions in Cypher. Where the store would change the data, the two answers differ without a word:
FalkorDB's key index ignores whitespace at either end of a string and reads U+0001 as a separator, so
``Paris`` and ``Paris `` were one node to every keyed lookup (and an edge went to the wrong one); its
strings end at NUL; its integers are 64 bits (2**64 - 1 came back as 2**63 - 1); a property name that is
empty or holds a backtick cannot be sent as a parameter map key. The store used to repair these quietly
(NUL to U+FFFD, backtick to quote, clamp, drop), which merged distinct names and changed values. Now the
build refuses them here, naming the node (or edge), the property and the fix, and the store refuses the
same things with the same words if handed an SKB that was not validated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: What FalkorDB's key index trims from both ends of a string (C ``isspace``): keys may hold them inside.
KEY_TRIMMED = " \t\n\v\f\r"

KEY_FIX = (
    "keys are identifiers: use a short unique id without whitespace at either end or control characters, and keep "
    "text in a property (name, description)"
)
PROPERTY_FIX = (
    "rename the property (a non-empty name without backticks or NUL), write integers past 64 bits as strings, "
    "and remove NUL characters from text, in the data"
)

#: How many offending keys or properties an error names (the first ones met).
SHOWN = 5


def store_key_problem(key: str) -> str | None:
    """Why no graph store can hold ``key`` exactly as a node key, or None (a few string tests per key)."""
    if "\x00" in key:
        return "contains a NUL character, which the graph store cannot hold"
    if "\x01" in key:
        return "contains the control character U+0001, which the graph store's key index reads as a separator"
    if key and (key[0] in KEY_TRIMMED or key[-1] in KEY_TRIMMED):
        stripped = key.strip(KEY_TRIMMED)
        return (f"starts or ends with whitespace, which the graph store's key index ignores (a lookup of "
                f"{stripped[:60]!r} would find it)")  # fmt: skip
    return None


def property_name_problem(name: object) -> str | None:
    """Why a property cannot be stored under ``name``, or None."""
    if not isinstance(name, str):
        return f"has a name of type {type(name).__name__}, not text"
    if not name:
        return "has an empty name"
    if "`" in name:
        return "has a backtick (`) in its name"
    if "\x00" in name:
        return "has a NUL character in its name"
    return None


_LISTS = (list, tuple, set, frozenset)


def _scalar_problem(value: Any) -> str | None:
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            return f"text with a NUL character ({value[:40]!r}), which the graph store cannot hold"
    elif kind is int and not INT64_MIN <= value <= INT64_MAX:
        return f"the integer {value}, outside the 64 bits the graph store holds"
    return None


def value_problem(value: Any) -> str | None:
    """Why the store cannot hold ``value`` exactly, or None. Text and integers are checked, alone and as list
    items; other values (maps, nested lists) are stored as JSON text, which holds them exactly."""
    if type(value) in _LISTS:
        for item in value:
            problem = _scalar_problem(item)
            if problem:
                return f"holds a list with {problem}"
        return None
    problem = _scalar_problem(value)
    return None if problem is None else f"holds {problem}"


def props_problem(props: Mapping[Any, Any], names_ok: set[str] | None = None) -> str | None:
    """Each property of ``props`` the store cannot hold exactly (``property NAME`` and why, joined), or None.
    Called for every node and edge of a build: plain type tests first; ``names_ok``, names already found
    good (filled here), spares a name its tests on every node that has it."""
    found: list[str] | None = None
    for name, value in props.items():
        if names_ok is None or name not in names_ok:
            problem = property_name_problem(name)
            if problem:
                found = (found or []) + [f"property {name!r} {problem}"]
                continue
            if names_ok is not None:
                names_ok.add(name)
        kind = type(value)
        if kind is str:
            if "\x00" not in value:
                continue
        elif kind is int:
            if INT64_MIN <= value <= INT64_MAX:
                continue
        elif kind not in _LISTS:
            continue
        problem = value_problem(value)
        if problem:
            found = (found or []) + [f"property {name!r} {problem}"]
    return ", ".join(found) if found else None
