"""Making untrusted text safe to hand to tokenizers, prompts and the plan block.

Why: questions and node texts come from users and datasets. A lone UTF-16 surrogate
(``"\\ud800"``, legal in a Python str, illegal in UTF-8) makes the HF tokenizer raise
TypeError and JSON encoders emit invalid UTF-8; a literal ``<plan>`` in a question or a
node name could be mistaken for the agent's own plan block. These helpers are pure
and cheap (a fast path returns the input unchanged when there is nothing to fix).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAN_TAG = re.compile(r"<(\s*/?\s*plan\b)", re.IGNORECASE)
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so it always encodes as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def neutralize_plan_tags(text: str) -> str:
    """``<plan>`` / ``</plan>`` written as ``&lt;plan>``: untrusted text can never open or close
    the plan block that the offline planner parses out of the human message."""
    return _PLAN_TAG.sub(r"&lt;\1", text)


def quoted(text: object) -> str:
    """A value as a JSON string literal: prompts show node names and texts as quoted data."""
    return neutralize_plan_tags(json.dumps(clean_text(str(text)), ensure_ascii=False))


def block_json(obj: Any) -> str:
    """JSON for embedding between tags: ``<``, ``>`` and ``&`` as ``\\u`` escapes (still valid
    JSON that decodes to the same strings), so no value can close the block early."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    return clean_text(text).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

