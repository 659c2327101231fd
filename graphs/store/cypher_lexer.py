"""The Cypher token stream the guard's checks read: comments dropped, string literals opaque.

Why a hand-written lexer: the checks must see keywords the way a server does (``cReAtE /* x */ (n)``
is a CREATE, ``'CREATE'`` is a string) yet never raise on odd input, except for unterminated strings,
comments and quoted identifiers, which are reported as CypherValidationError.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from graphs.errors import CypherValidationError

TokenKind = Literal["word", "qident", "string", "param", "number", "punct"]


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    pos: int


_PUNCT2 = ("<-", "->", "..", "<=", ">=", "<>", "=~", "+=")


def _is_word_start(ch: str) -> bool:
    return ch == "_" or ch.isalpha()


def _is_word_char(ch: str) -> bool:
    return ch == "_" or ch.isalnum()


#: Queries up to this many characters have their tokens remembered, the most recent this many (a bound: a
#: few MB at most). Why: every query is read by several checks (read-only, resources, schema references,
#: typed edges), each of which lexed it anew; lexing is a Python loop over the characters.
CACHE_QUERY_CHARS, CACHE_QUERIES = 4096, 256


def tokenize(cypher: str, *, backslash_escapes: bool = True) -> list[Token]:
    """Split Cypher into tokens, dropping whitespace and comments.

    Strings keep their raw content in ``text`` (without quotes) but are never
    inspected for keywords. ``backslash_escapes=False`` is used for a second,
    suspicious reading of strings that contain backslashes (see check_read_only).
    """
    if isinstance(cypher, str) and len(cypher) <= CACHE_QUERY_CHARS:
        return list(_remembered(cypher, backslash_escapes))
    return _tokenize(cypher, backslash_escapes)


@functools.lru_cache(maxsize=CACHE_QUERIES)
def _remembered(cypher: str, backslash_escapes: bool) -> tuple[Token, ...]:
    return tuple(_tokenize(cypher, backslash_escapes))  # tokens are frozen: the callers may share them


def _tokenize(cypher: str, backslash_escapes: bool) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(cypher)
    while i < n:
        ch = cypher[i]
        if ch.isspace():
            i += 1
            continue
        if cypher.startswith("//", i):
            while i < n and cypher[i] not in "\r\n":
                i += 1
            continue
        if cypher.startswith("/*", i):
            end = cypher.find("*/", i + 2)
            if end < 0:
                raise CypherValidationError(
                    f"unterminated /* comment starting at offset {i}; close it with */ or remove it"
                )
            i = end + 2
            continue
        if ch in "'\"":
            start = i
            i += 1
            buf: list[str] = []
            while True:
                if i >= n:
                    raise CypherValidationError(
                        f"unterminated string literal starting at offset {start}: "
                        f"{cypher[start : start + 30]!r}; close the quote {ch}"
                    )
                c = cypher[i]
                if c == "\\" and backslash_escapes and i + 1 < n:
                    buf.append(cypher[i : i + 2])
                    i += 2
                    continue
                if c == ch:
                    i += 1
                    break
                buf.append(c)
                i += 1
            tokens.append(Token("string", "".join(buf), start))
            continue
        if ch == "`":
            start = i
            i += 1
            buf = []
            while True:
                if i >= n:
                    raise CypherValidationError(
                        f"unterminated `quoted identifier` starting at offset {start}; close it with a backtick"
                    )
                if cypher[i] == "`":
                    if i + 1 < n and cypher[i + 1] == "`":
                        buf.append("`")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(cypher[i])
                i += 1
            tokens.append(Token("qident", "".join(buf), start))
            continue
        if ch == "$":
            start = i
            i += 1
            while i < n and _is_word_char(cypher[i]):
                i += 1
            tokens.append(Token("param", cypher[start:i], start))
            continue
        if ch.isdigit():
            start = i
            while i < n and cypher[i].isdigit():
                i += 1
            tokens.append(Token("number", cypher[start:i], start))
            continue
        if _is_word_start(ch):
            start = i
            while i < n and _is_word_char(cypher[i]):
                i += 1
            tokens.append(Token("word", cypher[start:i], start))
            continue
        two = cypher[i : i + 2]
        if two in _PUNCT2:
            tokens.append(Token("punct", two, i))
            i += 2
            continue
        tokens.append(Token("punct", ch, i))
        i += 1
    return tokens


def _is_name_position(tokens: Sequence[Token], idx: int) -> bool:
    """True when the word at idx is a property, label/type, map key or namespace part, not a keyword."""
    prev = tokens[idx - 1] if idx > 0 else None
    nxt = tokens[idx + 1] if idx + 1 < len(tokens) else None
    followed_by_paren = nxt is not None and nxt.kind == "punct" and nxt.text == "("
    if prev is not None and prev.kind == "punct" and prev.text in (".", ":", "|", "&", "!") and not followed_by_paren:
        return True
    # map key: {set: 1}
    return (
        nxt is not None
        and nxt.kind == "punct"
        and nxt.text == ":"
        and prev is not None
        and prev.kind == "punct"
        and prev.text in ("{", ",")
    )


def _context(cypher: str, pos: int) -> str:
    return cypher[max(0, pos - 20) : pos + 30].replace("\n", " ")
