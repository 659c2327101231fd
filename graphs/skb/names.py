"""Which label and relation names a graph store can hold: checked where the name is read.

Why: stores quote label and relation names in backticks; a backtick or a control character (NUL
above all) in one passed every loader and failed only at the graph-store stage, after embedding,
with the store's raw parser error and no file, line or field. Loaders and the profile model call
`name_problem` so the error names the file, the line (or the profile field) and the fix.
"""

from __future__ import annotations

import re

from graphs.skb.storable import store_key_problem

_BAD = re.compile(r"[`\x00-\x1f\x7f]")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a label or relation name, or None when it can."""
    found = _BAD.search(name)
    if found is None:
        return None
    ch = found.group(0)
    what = "a backtick (`)" if ch == "`" else ("a NUL character" if ch == "\x00" else f"control character {ch!r}")
    return f"contains {what}"


#: Longest node key (UTF-8 bytes) a graph store can match: FalkorDB's key index finds no longer string,
#: so an edge to such a node was silently not created (the build then failed with a wrong diagnosis).
MAX_KEY_BYTES = 4096


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a node key, or None when it can (cheap for the usual short key)."""
    problem = store_key_problem(key)
    if problem:
        return problem
    if len(key) * 4 <= MAX_KEY_BYTES:
        return None
    size = len(key.encode("utf-8", "surrogatepass"))
    if size <= MAX_KEY_BYTES:
        return None
    return (f"is {size:,} bytes long (UTF-8), over the {MAX_KEY_BYTES:,} a graph store can match; keys are "
            "identifiers: shorten it and keep long text in a property (name, description)")


NAME_FIX = "rename it without backticks or control characters (letters, digits, spaces, _ : - . are fine)"
