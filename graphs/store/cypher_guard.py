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
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from graphs.errors import CypherValidationError, ReadOnlyViolationError
from graphs.model import GraphSchema

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


def tokenize(cypher: str, *, backslash_escapes: bool = True) -> list[Token]:
    """Split Cypher into tokens, dropping whitespace and comments.

    Strings keep their raw content in ``text`` (without quotes) but are never
    inspected for keywords. ``backslash_escapes=False`` is used for a second,
    suspicious reading of strings that contain backslashes (see check_read_only).
    """
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


def _context(cypher: str, pos: int) -> str:
    return cypher[max(0, pos - 20) : pos + 30].replace("\n", " ")


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


# ---------------------------------------------------------------------------
# schema check


@dataclass
class SchemaRefs:
    """Names a query refers to, as the tolerant extractor found them."""

    labels: set[str]
    rel_types: set[str]
    properties: set[tuple[str | None, str]]
    """(label or None when the variable is an unlabelled node, property name)."""


def _names_after_colon(tokens: Sequence[Token], j: int, *, allow_pipe: bool = True) -> tuple[list[str], int]:
    """Read `A|B:C&!D` starting right after a ':'; returns the names and the index after them.

    `allow_pipe=False` outside patterns: in `[x IN l WHERE x:A | x.name]` the pipe ends the predicate.
    """
    separators = ("|", ":", "&") if allow_pipe else (":", "&")
    names: list[str] = []
    while j < len(tokens):
        tok = tokens[j]
        if tok.kind == "punct" and tok.text in ("!", "%"):
            j += 1
            continue
        if tok.kind not in ("word", "qident"):
            break
        names.append(tok.text)
        j += 1
        if j < len(tokens) and tokens[j].kind == "punct" and tokens[j].text in separators:
            j += 1
            continue
        break
    return names, j


def extract_refs(cypher: str) -> SchemaRefs:
    """Labels, relationship types and (label, property) pairs a query mentions.

    Heuristics, tuned to avoid false alarms: `x:Name` inside `-[...]` is a relationship
    type, elsewhere a label; `{k: v}` keys count as properties only inside a node pattern;
    `v.prop` counts only when `v` was bound in a node pattern (relationship and
    UNWIND/WITH variables are skipped because the schema has no types for them).
    """
    tokens = tokenize(cypher)
    labels: set[str] = set()
    rels: set[str] = set()
    props: set[tuple[str | None, str]] = set()
    node_vars: dict[str, set[str]] = {}
    rel_vars: set[str] = set()
    # stack of (bracket, kind) with kind in: node, rel, list, map, call, group
    stack: list[tuple[str, str]] = []
    pattern_owner: list[str | None] = []  # variable of the node pattern each stack entry belongs to
    i = 0
    n = len(tokens)
    while i < n:
        tok = tokens[i]
        prev = tokens[i - 1] if i > 0 else None
        if tok.kind == "punct" and tok.text in ("(", "[", "{"):
            if tok.text == "(":
                kind = (
                    "call" if prev is not None and prev.kind in ("word", "qident") and not _is_clause(prev) else "node"
                )
            elif tok.text == "[":
                kind = "rel" if prev is not None and prev.kind == "punct" and prev.text in ("-", "<-") else "list"
            else:
                kind = "map"
            owner: str | None = None
            if kind in ("node", "rel"):
                var_tok = tokens[i + 1] if i + 1 < n else None
                after = tokens[i + 2] if i + 2 < n else None
                if (
                    var_tok is not None
                    and var_tok.kind in ("word", "qident")
                    and after is not None
                    and after.kind == "punct"
                    and after.text in (":", ")", "]", "{", "*")
                ):
                    owner = var_tok.text
                    if kind == "node":
                        node_vars.setdefault(owner, set())
                    else:
                        rel_vars.add(owner)
            stack.append((tok.text, kind))
            pattern_owner.append(owner)
            i += 1
            continue
        if tok.kind == "punct" and tok.text in (")", "]", "}"):
            if stack:
                stack.pop()
                pattern_owner.pop()
            i += 1
            continue
        top = stack[-1][1] if stack else "top"
        if tok.kind == "punct" and tok.text == ":" and top != "map":
            names, j = _names_after_colon(tokens, i + 1, allow_pipe=top in ("node", "rel"))
            if top == "rel":
                rels.update(names)
            else:
                labels.update(names)
                var_tok = tokens[i - 1] if i > 0 else None
                owner = None
                if top == "node" and pattern_owner and pattern_owner[-1] is not None:
                    owner = pattern_owner[-1]
                elif var_tok is not None and var_tok.kind in ("word", "qident"):
                    owner = var_tok.text if var_tok.text in node_vars else None
                if owner is not None:
                    node_vars.setdefault(owner, set()).update(names)
            i = max(j, i + 1)
            continue
        if (
            top == "map"
            and tok.kind in ("word", "qident")
            and len(stack) >= 2
            and stack[-2][1] == "node"
            and prev is not None
            and prev.kind == "punct"
            and prev.text in ("{", ",")
            and i + 1 < n
            and tokens[i + 1].text == ":"
        ):
            owner = pattern_owner[-2]
            node_labels = node_vars.get(owner, set()) if owner is not None else set()
            if node_labels:
                props.update((label, tok.text) for label in node_labels)
            else:
                props.add((None, tok.text))
            i += 2
            continue
        if (
            tok.kind in ("word", "qident")
            and i + 2 < n
            and tokens[i + 1].kind == "punct"
            and tokens[i + 1].text == "."
            and tokens[i + 2].kind in ("word", "qident")
            and (prev is None or not (prev.kind == "punct" and prev.text == "."))
            and tok.text in node_vars
            and tok.text not in rel_vars
        ):
            # a function namespace (`db.labels`) is never a bound node variable, so it is skipped here
            node_labels = node_vars[tok.text]
            prop = tokens[i + 2].text
            if not (i + 3 < n and tokens[i + 3].kind == "punct" and tokens[i + 3].text == "("):
                if node_labels:
                    props.update((label, prop) for label in node_labels)
                else:
                    props.add((None, prop))
            i += 3
            continue
        i += 1
    return SchemaRefs(labels=labels, rel_types=rels, properties=props)


_CLAUSE_WORDS = frozenset(
    {"MATCH", "WHERE", "AND", "OR", "XOR", "NOT", "RETURN", "WITH", "OPTIONAL", "EXISTS", "IN", "UNION", "ALL", "CALL"}
)


def _is_clause(tok: Token) -> bool:
    """A word before '(' that introduces a pattern (MATCH (n)) rather than calling a function (count(n))."""
    return tok.kind == "word" and tok.text.upper() in _CLAUSE_WORDS and tok.text.upper() not in ("EXISTS", "ALL")


def _choices(valid: Iterable[str], limit: int = 40) -> str:
    items = sorted(set(valid))
    text = ", ".join(items[:limit])
    if len(items) > limit:
        text += f", ... ({len(items) - limit} more)"
    return text or "(none)"


def _suggest(name: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(valid), n=2, cutoff=0.6)
    lowered = [v for v in valid if v.lower() == name.lower() and v != name]
    hints = list(dict.fromkeys(lowered + close))
    return f" (did you mean {' or '.join(hints)}?)" if hints else ""


def check_against_schema(cypher: str, schema: GraphSchema) -> None:
    """Raise CypherValidationError naming every unknown label, relationship type and property.

    The message lists the valid choices so a model can repair the query in one step.
    """
    refs = extract_refs(cypher)
    valid_labels = set(schema.label_names())
    valid_rels = set(schema.relation_names())
    all_props = {p.name for info in schema.labels for p in info.properties}
    problems: list[str] = []
    bad_labels = sorted(refs.labels - valid_labels)
    if bad_labels:
        problems.append(
            "unknown label(s) "
            + ", ".join(f"{name!r}{_suggest(name, valid_labels)}" for name in bad_labels)
            + f"; valid labels: {_choices(valid_labels)}"
        )
    bad_rels = sorted(refs.rel_types - valid_rels)
    if bad_rels:
        problems.append(
            "unknown relationship type(s) "
            + ", ".join(f"{name!r}{_suggest(name, valid_rels)}" for name in bad_rels)
            + f"; valid types: {_choices(valid_rels)}"
        )
    by_label: dict[str | None, list[str]] = {}
    for label, prop in sorted(refs.properties, key=lambda lp: (lp[0] or "", lp[1])):
        if label is not None and label not in valid_labels:
            continue  # already reported as an unknown label
        valid = set(schema.properties_of(label)) if label is not None else all_props
        if prop not in valid:
            by_label.setdefault(label, []).append(prop)
    for label, names in by_label.items():
        valid = set(schema.properties_of(label)) if label is not None else all_props
        where = f"on {label}" if label is not None else "on any label"
        problems.append(
            f"unknown propert{'y' if len(names) == 1 else 'ies'} {where}: "
            + ", ".join(f"{name!r}{_suggest(name, valid)}" for name in names)
            + f"; valid properties {where}: {_choices(valid)}"
        )
    if problems:
        raise CypherValidationError("query does not match the graph schema: " + "; ".join(problems))
