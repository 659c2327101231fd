"""Static checks on model-written Cypher before it reaches a store.

Why a static guard when FalkorDB has GRAPH.RO_QUERY: the Neo4j adapter also
talks to Bolt servers (ArcadeDB) whose READ access mode does not block writes,
so the guard is the only line of defence there, and a uniform error with the
offending clause named lets the agent repair its query instead of failing.

Both checks run on a token stream in which comments are dropped and string
literals are opaque, so ``WHERE n.name = 'CREATE'`` passes while
``cReAtE /* x */ (n)`` does not. The tokenizer is deliberately tolerant: it
never raises on odd input except for unterminated strings, comments and quoted
identifiers, which it reports as CypherValidationError.

Procedure allowlist (``CALL name``), kept tight on purpose; all are schema or
index reads that exist on FalkorDB and/or Neo4j:
``db.labels``, ``db.relationshipTypes``, ``db.propertyKeys``,
``db.schema.visualization``, ``db.indexes``, ``db.idx.fulltext.queryNodes``
(FalkorDB full-text search) and ``dbms.components`` (server version).

This module is the policy (what a read path may run) and the one entry point, `check_query`; the
lexer (`cypher_lexer`), the schema references (`cypher_refs`) and the cost limits (`cypher_limits`)
live beside it and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphs.errors import CypherValidationError, ParameterValueError, QueryTooComplexError, ReadOnlyViolationError
from graphs.store.cypher_lexer import Token, _context, _is_name_position, tokenize
from graphs.store.cypher_limits import (
    MAX_EXPRESSION_DEPTH,
    MAX_PARAM_DEPTH,
    MAX_PARSE_COST,
    MAX_QUERY_CHARS,
    MAX_RANGE_ELEMENTS,
    MAX_RANGE_TOTAL,
    check_params,
    check_resources,
)
from graphs.store.cypher_refs import SchemaRefs, check_against_schema, extract_refs

__all__ = [
    "ALLOWED_PROCEDURES",
    "ALLOWED_PROCEDURE_NAMES",
    "MAX_EXPRESSION_DEPTH",
    "MAX_PARAM_DEPTH",
    "MAX_PARSE_COST",
    "MAX_QUERY_CHARS",
    "MAX_RANGE_ELEMENTS",
    "MAX_RANGE_TOTAL",
    "STATEMENT_START_KEYWORDS",
    "WRITE_KEYWORDS",
    "ParameterValueError",
    "QueryTooComplexError",
    "SchemaRefs",
    "Token",
    "check_against_schema",
    "check_params",
    "check_query",
    "check_read_only",
    "check_resources",
    "extract_refs",
    "tokenize",
]

ALLOWED_PROCEDURE_NAMES: tuple[str, ...] = (
    "db.labels",
    "db.relationshipTypes",
    "db.propertyKeys",
    "db.schema.visualization",
    "db.indexes",
    "db.idx.fulltext.queryNodes",
    "dbms.components",
)
ALLOWED_PROCEDURES: frozenset[str] = frozenset(name.lower() for name in ALLOWED_PROCEDURE_NAMES)
"""Lower-cased for matching: procedure names are compared case-insensitively (stricter, never looser)."""

WRITE_KEYWORDS: frozenset[str] = frozenset(
    {
        "CREATE",
        "MERGE",
        "DELETE",
        "DETACH",
        "SET",
        "REMOVE",
        "DROP",
        "FOREACH",
        "LOAD",
        # administration commands (Neo4j): never legitimate on a read path
        "ALTER",
        "GRANT",
        "DENY",
        "REVOKE",
        "RENAME",
        "TERMINATE",
    }
)
"""Words that are refused wherever they appear as keywords (not as property, label or map-key names)."""

STATEMENT_START_KEYWORDS: frozenset[str] = frozenset({"START", "STOP"})
"""Admin commands (START/STOP DATABASE) refused only as the first word: elsewhere they are ordinary names."""


def _procedure_name(tokens: Sequence[Token], idx: int) -> tuple[str, int]:
    """Read a dotted procedure name starting at idx; returns (name, index after it)."""
    parts: list[str] = []
    j = idx
    while j < len(tokens) and tokens[j].kind in ("word", "qident"):
        parts.append(tokens[j].text)
        j += 1
        if j < len(tokens) and tokens[j].kind == "punct" and tokens[j].text == ".":
            j += 1
            continue
        break
    return ".".join(parts), j


def _find_violation(cypher: str, tokens: Sequence[Token]) -> str | None:
    """The first reason the token stream is not a single read-only statement, or None."""
    fix = "the read path accepts MATCH/OPTIONAL MATCH/WITH/UNWIND/WHERE/RETURN queries only"
    for idx, tok in enumerate(tokens):
        if tok.kind == "punct" and tok.text == ";":
            if idx + 1 < len(tokens):
                return (
                    f"multiple statements: ';' at offset {tok.pos} is followed by more text "
                    f"({_context(cypher, tokens[idx + 1].pos)!r}); send a single statement"
                )
            continue
        if tok.kind != "word" or _is_name_position(tokens, idx):
            continue
        upper = tok.text.upper()
        if upper in WRITE_KEYWORDS:
            clause = "LOAD CSV" if upper == "LOAD" else upper
            if upper == "DETACH":
                clause = "DETACH DELETE"
            return (
                f"{clause} clause at offset {tok.pos} ({_context(cypher, tok.pos)!r}) writes or administers "
                f"the database; {fix}"
            )
        if upper in STATEMENT_START_KEYWORDS and idx == 0:
            return f"{upper} administration command is not allowed; {fix}"
        if upper == "APOC" and idx + 1 < len(tokens) and tokens[idx + 1].text == ".":
            return (
                f"APOC call at offset {tok.pos} is not allowed (APOC can run arbitrary, writing Cypher); "
                "use plain Cypher"
            )
        if upper == "CALL":
            nxt = tokens[idx + 1] if idx + 1 < len(tokens) else None
            if nxt is None:
                return "CALL without a procedure or subquery"
            if nxt.kind == "punct" and nxt.text in ("{", "("):
                # CALL { ... } / CALL (x) { ... } subquery: its body is scanned like the rest.
                continue
            name, _ = _procedure_name(tokens, idx + 1)
            if name.lower() not in ALLOWED_PROCEDURES:
                allowed = ", ".join(ALLOWED_PROCEDURE_NAMES)
                return (
                    f"CALL {name or nxt.text} at offset {tok.pos}: procedure is not on the read-only "
                    f"allowlist ({allowed})"
                )
    return None


def check_read_only(cypher: str) -> None:
    """Raise ReadOnlyViolationError unless `cypher` is one statement free of writes and unlisted procedures."""
    if not isinstance(cypher, str):
        raise CypherValidationError(f"query must be a string, got {type(cypher).__name__}")
    tokens = tokenize(cypher)
    if not tokens:
        raise CypherValidationError("empty query; send a MATCH ... RETURN statement")
    reason = _find_violation(cypher, tokens)
    if reason is not None:
        raise ReadOnlyViolationError(f"read-only query refused: {reason}")
    if any(t.kind == "string" and "\\" in t.text for t in tokens):
        # A server that did not honour a backslash escape would end the string earlier and
        # execute what we read as string content; refuse if that reading hides a write.
        try:
            raw_tokens = tokenize(cypher, backslash_escapes=False)
        except CypherValidationError:
            return
        raw_reason = _find_violation(cypher, raw_tokens)
        if raw_reason is not None:
            raise ReadOnlyViolationError(
                "read-only query refused: with backslashes in a string literal the query is ambiguous and "
                f"one reading contains a write ({raw_reason}); avoid escaped quotes next to Cypher keywords"
            )


def check_query(cypher: str, params: Mapping[str, Any] | None = None) -> None:
    """Every static check a model-written query passes before a store runs it: read-only, bounded, sendable."""
    check_read_only(cypher)
    check_params(params)
    check_resources(cypher, params)
