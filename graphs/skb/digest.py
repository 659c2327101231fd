"""Digests of the code that computes stored state, so state computed by other code is never reused.

Why its own module: every kind of stored state (the compact SKB's schema, the lexicon, the scoring
matrices) is keyed by it, and none of them needs the compact format to compute it.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from graphs.skb.model import SKB, Edge, GraphSchema, Node, NodeType

_DIGEST_LOCK = threading.Lock()
_DIGESTS: dict[tuple[Any, ...], str] = {}


def code_digest(*objects: Any) -> str:
    """sha256 over the source of the functions and classes that compute some stored state (dataclasses by
    their fields, other values by ``repr``): state computed by other code is not reused.

    Why the source and not a version number: derived state (a schema, a lexicon, scoring matrices) is only
    valid for the code that computed it, and a forgotten version bump would serve stale state silently.
    Why the computing functions and not whole modules: a method added to ``SKB`` or a new linker rule does
    not change what was stored, and retiring valid state costs every cold start seconds of recomputation
    until the index is rebuilt."""
    import dataclasses
    import inspect

    key = tuple(obj if callable(obj) else ("repr", repr(obj)) for obj in objects)  # functions and classes hash
    # once per process and under a lock: inspect.getsource parses a class's module with ``ast``, and
    # CPython 3.11 raises "AST constructor recursion depth mismatch" when threads parse at once (readers
    # reopening an index after a rebuild did)
    with _DIGEST_LOCK:
        found = _DIGESTS.get(key)
        if found is not None:
            return found
        parts = []
        for obj in objects:
            if dataclasses.is_dataclass(obj) and isinstance(obj, type):
                parts.append(obj.__name__ + repr([(f.name, str(f.type)) for f in dataclasses.fields(obj)]))
            elif inspect.isclass(obj):
                parts.append(class_source(obj))
            elif inspect.isfunction(obj) or inspect.ismethod(obj):
                parts.append(inspect.getsource(obj))
            else:
                parts.append(repr(obj))
        digest = _DIGESTS[key] = hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()
        return digest


_CLASS_LINES: dict[str, dict[str, int]] = {}


def _class_lines(path: str, lines: list[str]) -> dict[str, int]:
    """Every class of a module by qualified name -> its first line (a decorator's, if any; from 0), as
    ``inspect`` finds one class at a time, but from one parse of the module."""
    import ast

    found = _CLASS_LINES.get(path)
    if found is None:
        found = {}

        def visit(node: ast.AST, stack: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    name = ".".join([*stack, child.name])
                    first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                    found.setdefault(name, first - 1)
                    visit(child, [*stack, child.name])
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    visit(child, [*stack, child.name, "<locals>"])
                else:
                    visit(child, stack)

        visit(ast.parse("".join(lines)), [])
        _CLASS_LINES[path] = found
    return found


def class_source(cls: type) -> str:
    """``inspect.getsource(cls)``, with the module parsed once for all its classes instead of once a class
    (a digest of several classes of one module parsed it for each)."""
    import inspect
    import linecache

    path = inspect.getsourcefile(cls)
    lines = linecache.getlines(path) if path else []
    first = _class_lines(path, lines).get(cls.__qualname__) if path and lines else None
    if first is None:
        return inspect.getsource(cls)
    return "".join(inspect.getblock(lines[first:]))


def schema_digest() -> str:
    """The code that computes ``SKB.schema()``."""
    from graphs.skb.model import LabelInfo, PropertyInfo, RelationInfo, relation_counts, value_type_name

    return code_digest(SKB.schema, SKB.relation_patterns, relation_counts, value_type_name, Node, Edge, NodeType,
                       PropertyInfo, LabelInfo, RelationInfo, GraphSchema)
