"""Which label and relation names a graph store can hold: checked where the name is read.

Why: stores quote label and relation names in backticks; a backtick or a control character (NUL
above all) in one passed every loader and failed only at the graph-store stage, after embedding,
with the store's raw parser error and no file, line or field. Loaders and the profile model call
`name_problem` so the error names the file, the line (or the profile field) and the fix.
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[`\x00-\x1f\x7f]")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a label or relation name, or None when it can."""
    found = _BAD.search(name)
    if found is None:
        return None
    ch = found.group(0)
    what = "a backtick (`)" if ch == "`" else ("a NUL character" if ch == "\x00" else f"control character {ch!r}")
    return f"contains {what}"


NAME_FIX = "rename it without backticks or control characters (letters, digits, spaces, _ : - . are fine)"
