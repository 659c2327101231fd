"""Command-line values shared by `skb ask` and `skb eval`: one reading of ``--set name=value``."""

from __future__ import annotations

import json
from collections.abc import Sequence

from graphs.errors import ConfigError


def parse_settings(items: Sequence[str] | None) -> dict[str, object]:
    """``--set name=value`` items as overrides; a value is JSON when it parses (3, true, null, [..]), else text.

    Why one function: both commands take the same option, so a typo reads the same error in both."""
    out: dict[str, object] = {}
    for item in items or []:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set {item!r}: write name=value (e.g. k_prime=5, or section.key=value: clause.candidates=3)")
        try:
            value: object = json.loads(raw)
        except ValueError:  # not JSON, or a number past the interpreter's digit limit: the text, checked as such
            value = raw
        out[name.strip()] = value
    return out
