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

import ast
import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from graphs.errors import CypherValidationError, ParameterValueError, QueryTooComplexError, ReadOnlyViolationError
from graphs.skb.model import GraphSchema

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


# ---------------------------------------------------------------------------
# resource bounds: parse cost, list and string growth, parameter values
#
# Why static bounds: FalkorDB's Cypher parser backtracks, so parse time doubles with every
# level of expression nesting (brackets, CASE, prefix -, + and NOT), and parsing happens before
# the per-query timeout starts; `RETURN` + 22 minus signs + `1` parsed for 7 s. Likewise
# range() and string concatenation inside one expression are materialised in full before the
# server's per-query memory check runs (range(1, 5e7) reached 785 MB under a 256 MiB cap).
# Measured on this project's FalkorDB (see the README safety section): depth 12 parses in
# about 10-150 ms, depth 16 in 0.3-1 s, depth 18 in 1-2 s.

MAX_QUERY_CHARS = 10_000
"""Longest query text the store accepts (the cypher tool's own argument limit is lower)."""

MAX_EXPRESSION_DEPTH = 12
"""Deepest nesting of brackets ( [ {, CASE ... END and prefix operators (-, +, NOT) in one expression."""

MAX_PARSE_COST = 2**15
"""Bound on the estimated parse cost: the sum over tokens of 2**(nesting depth at the token).
One depth-12 chain costs about 2**13; a flat 4,000-character query a few thousand. It stops
many moderately deep sub-expressions in one query (300 copies of a depth-11 chain parsed for 10 s)."""

MAX_RANGE_ELEMENTS = 100_000
"""Most elements one range() call may produce (100,000 integers are about 1.6 MB on the server)."""

MAX_RANGE_TOTAL = 1_000_000
"""Most elements all range() calls of one query may produce together. Ranges cannot multiply
inside one expression because nested iteration is refused; UNWIND range() x UNWIND range()
multiplies rows, which stream and are bounded by the server timeout."""

MAX_PARAM_DEPTH = 32
"""Deepest nesting of lists and maps in a query parameter value."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")", "]", "}"}
_BINARY_PUNCT = frozenset(
    {",", "=", "<>", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "^", "=~", "|", ":", "..", ";", "+="}
)
"""Tokens that end the operand of a prefix operator (when they are not prefix operators themselves)."""
_OPERAND_END_WORDS = frozenset(
    {
        "AND", "OR", "XOR", "IN", "IS", "CONTAINS", "STARTS", "ENDS", "AS", "WHERE", "RETURN", "WITH",
        "ORDER", "BY", "LIMIT", "SKIP", "UNION", "THEN", "ELSE", "WHEN", "END", "MATCH", "OPTIONAL",
        "UNWIND", "CALL", "YIELD", "DISTINCT", "ASC", "DESC", "ASCENDING", "DESCENDING",
    }
)  # fmt: skip


def _unary_position(prev: Token | None) -> bool:
    """True when a `-`/`+` after `prev` is a prefix operator (nothing to its left to add to)."""
    if prev is None:
        return True
    if prev.kind == "punct":
        return prev.text not in _CLOSERS
    return prev.kind == "word" and prev.text.upper() in (_OPERAND_END_WORDS | {"NOT"})


def _nesting(tokens: Sequence[Token]) -> tuple[int, int, Token | None]:
    """(max depth, estimated parse cost, token where the depth limit was first passed).

    A level is an open bracket, an open CASE, or a prefix operator whose operand has not ended;
    prefix levels end at the next binary operator, separator, keyword or closing bracket.
    Stops counting once the depth passes MAX_EXPRESSION_DEPTH (the answer is "too deep" anyway).
    """
    stack: list[str] = []
    deepest, cost = 0, 0
    prev: Token | None = None
    for idx, tok in enumerate(tokens):
        text = tok.text
        upper = text.upper() if tok.kind == "word" else ""
        name = tok.kind == "word" and _is_name_position(tokens, idx)
        prefix = (tok.kind == "punct" and text in ("-", "+") and _unary_position(prev)) or (upper == "NOT" and not name)
        ends_operand = (tok.kind == "punct" and (text in _BINARY_PUNCT or text in _CLOSERS)) or (
            upper in _OPERAND_END_WORDS and not name
        )
        if ends_operand and not prefix:
            while stack and stack[-1] == "prefix":
                stack.pop()
        cost += 2 ** len(stack)
        if tok.kind == "punct" and text in _OPENERS:
            stack.append(text)
        elif tok.kind == "punct" and text in _CLOSERS:
            if stack:
                stack.pop()
        elif upper == "CASE" and not name:
            stack.append("CASE")
        elif upper == "END" and not name and stack and stack[-1] == "CASE":
            stack.pop()
        elif prefix:
            stack.append("prefix")
        if len(stack) > deepest:
            deepest = len(stack)
            if deepest > MAX_EXPRESSION_DEPTH:
                return deepest, cost, tok
        prev = tok
    return deepest, cost, None


def _call_args(tokens: Sequence[Token], open_idx: int) -> tuple[list[list[Token]], int]:
    """Top-level comma-separated arguments of the call whose '(' is at open_idx; and the index after ')'."""
    args: list[list[Token]] = [[]]
    depth = 0
    j = open_idx + 1
    while j < len(tokens):
        tok = tokens[j]
        if tok.kind == "punct" and tok.text in _OPENERS:
            depth += 1
        elif tok.kind == "punct" and tok.text in _CLOSERS:
            if depth == 0:
                return (args if args != [[]] else []), j + 1
            depth -= 1
        elif depth == 0 and tok.kind == "punct" and tok.text == ",":
            args.append([])
            j += 1
            continue
        args[-1].append(tok)
        j += 1
    return (args if args != [[]] else []), j


_CONST_CHARS = frozenset("0123456789.eE+-*/^() \t\r\n")


def _constant(cypher: str, arg: Sequence[Token], params: Mapping[str, Any] | None) -> float | None:
    """The numeric value of a range() argument when it is a literal, a constant expression of
    literals or a $parameter; None when it depends on data (or is not a number)."""
    if not arg:
        return None
    if len(arg) == 1 and arg[0].kind == "param":
        value = (params or {}).get(arg[0].text[1:])
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if any(t.kind not in ("number", "punct", "word") for t in arg):
        return None
    end = arg[-1].pos + len(arg[-1].text)
    text = cypher[arg[0].pos : end]
    if not set(text) <= _CONST_CHARS:
        return None
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _fold(tree.body)


def _fold(node: ast.AST) -> float | None:
    """Evaluate a tree of numbers and + - * / ** without ever computing a huge power."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _fold(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp):
        left, right = _fold(node.left), _fold(node.right)
        if left is None or right is None:
            return None
        try:
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div):
                return left / right if right else None
            if isinstance(node.op, ast.Pow):
                return math.inf if abs(right) > 400 and abs(left) > 1 else float(left**right)
        except (OverflowError, ZeroDivisionError, TypeError):
            return math.inf
    return None


def _range_elements(cypher: str, args: Sequence[Sequence[Token]], params: Mapping[str, Any] | None) -> float | None:
    """How many elements range(start, end[, step]) produces; None when a bound is not constant."""
    if len(args) not in (2, 3):
        return None
    values = [_constant(cypher, a, params) for a in args]
    if any(v is None or math.isnan(v) for v in values):
        return None
    start, end = values[0], values[1]
    step = values[2] if len(values) == 3 else 1.0
    assert start is not None and end is not None and step is not None
    if step == 0:
        return 0.0  # the server reports a zero step itself
    if math.isinf(start) or math.isinf(end) or math.isinf(step):
        return math.inf
    return max(0.0, math.floor((end - start) / step) + 1)


def _reduce_growth(tokens: Sequence[Token], open_idx: int) -> str | None:
    """The accumulator name when a reduce() body uses it twice as an operand (`s + s`, `[s, s]`),
    which doubles the value on every step; None otherwise."""
    args, _ = _call_args(tokens, open_idx)
    if not args:
        return None
    first = args[0]
    if not first or first[0].kind not in ("word", "qident"):
        return None
    acc = first[0].text
    body: list[Token] = []
    flat = [t for a in args for t in a]
    for k, tok in enumerate(flat):
        if tok.kind == "punct" and tok.text == "|":
            body = flat[k + 1 :]
            break
    operand_marks = {"+", "*", ",", "(", ")", "[", "]", "{", "}", ":"}
    uses = 0
    for k, tok in enumerate(body):
        if tok.kind not in ("word", "qident") or tok.text != acc:
            continue
        before = body[k - 1] if k > 0 else None
        after = body[k + 1] if k + 1 < len(body) else None
        if before is not None and before.kind == "punct" and before.text == ".":
            continue  # a property named like the accumulator
        near = [t.text for t in (before, after) if t is not None and t.kind == "punct"]
        if any(mark in operand_marks for mark in near) or after is None:
            uses += 1
    return acc if uses >= 2 else None


_ITERATING_FUNCTIONS = frozenset({"all", "any", "none", "single", "reduce", "filter", "extract"})


def _nested_iteration(tokens: Sequence[Token]) -> Token | None:
    """The first list iteration (`[x IN ...`, all/any/none/single/reduce(x IN ...)) that runs inside the
    body of another one, or None.

    Why: one expression is evaluated without the server's timeout or memory checks, which run
    between records only; `[x IN l | [y IN l | x + y]]` over 20,000 collected keys ran for over a
    minute and past 1.7 GB under a 5 s timeout and a 256 MiB cap. A single level is linear in data
    the query already holds; the source of an iteration (`[x IN [y IN l WHERE ...] | x]`) is not
    nested, only its WHERE/| body is.
    """
    stack: list[list[bool]] = []  # per open bracket: [is an iteration, its body has started]
    for idx, tok in enumerate(tokens):
        if tok.kind == "word" and tok.text.upper() == "WHERE" and stack and stack[-1][0]:
            stack[-1][1] = True
            continue
        if tok.kind != "punct":
            continue
        if tok.text in _OPENERS:
            prev = tokens[idx - 1] if idx > 0 else None
            var = tokens[idx + 1] if idx + 1 < len(tokens) else None
            kw = tokens[idx + 2] if idx + 2 < len(tokens) else None
            comprehension = (
                tok.text == "["
                and var is not None
                and var.kind in ("word", "qident")
                and kw is not None
                and kw.kind == "word"
                and kw.text.upper() == "IN"
            )
            function = (
                tok.text == "("
                and prev is not None
                and prev.kind == "word"
                and prev.text.lower() in _ITERATING_FUNCTIONS
                and not _is_name_position(tokens, idx - 1)
            )
            iterating = comprehension or function
            if iterating and any(is_iter and in_body for is_iter, in_body in stack):
                return tok
            stack.append([iterating, False])
        elif tok.text in _CLOSERS:
            if stack:
                stack.pop()
        elif tok.text == "|" and stack and stack[-1][0]:
            stack[-1][1] = True
    return None


def check_resources(cypher: str, params: Mapping[str, Any] | None = None) -> None:
    """Raise QueryTooComplexError when `cypher` could hold a server thread or its memory unbounded.

    Checks, in order: text length, expression nesting depth and estimated parse cost (see
    MAX_EXPRESSION_DEPTH, MAX_PARSE_COST), range() calls (their element counts must be constant
    and at most MAX_RANGE_ELEMENTS each, MAX_RANGE_TOTAL together), nested list iteration inside
    one expression, and reduce() bodies that double their accumulator.
    """
    if not isinstance(cypher, str):
        raise CypherValidationError(f"query must be a string, got {type(cypher).__name__}")
    if len(cypher) > MAX_QUERY_CHARS:
        raise QueryTooComplexError(
            f"query is {len(cypher)} characters; the limit is {MAX_QUERY_CHARS}: pass data as $parameters "
            "and split the question into smaller queries"
        )
    tokens = tokenize(cypher)
    depth, cost, where = _nesting(tokens)
    if where is not None:
        raise QueryTooComplexError(
            f"expression nesting deeper than {MAX_EXPRESSION_DEPTH} levels at offset {where.pos} "
            f"({_context(cypher, where.pos)!r}); brackets, CASE and prefix operators (-, +, NOT) each count a "
            "level and the server's parse time doubles with every level: flatten the expression "
            "(name intermediate values with WITH, drop redundant brackets and double negations)"
        )
    if cost > MAX_PARSE_COST:
        raise QueryTooComplexError(
            f"query is too expensive to parse (estimated cost {cost} > {MAX_PARSE_COST}: many nested "
            f"sub-expressions, deepest {depth} levels); split it into simpler queries or flatten the nesting"
        )
    nested = _nested_iteration(tokens)
    if nested is not None:
        raise QueryTooComplexError(
            f"nested list iteration at offset {nested.pos} ({_context(cypher, nested.pos)!r}): an iteration "
            "inside the WHERE/| body of another one runs within a single expression, where the server's "
            "timeout and memory cap do not apply; make the outer loop rows instead (UNWIND list AS x, "
            "then iterate once per row)"
        )
    total = 0.0
    for idx, tok in enumerate(tokens):
        if tok.kind != "word" or _is_name_position(tokens, idx):
            continue
        nxt = tokens[idx + 1] if idx + 1 < len(tokens) else None
        if nxt is None or nxt.kind != "punct" or nxt.text != "(":
            continue
        prev = tokens[idx - 1] if idx > 0 else None
        if prev is not None and prev.kind == "punct" and prev.text == ".":
            continue  # a namespaced function (string.join) is not range/reduce
        lowered = tok.text.lower()
        if lowered == "range":
            args, _ = _call_args(tokens, idx + 1)
            count = _range_elements(cypher, args, params)
            if count is None:
                raise QueryTooComplexError(
                    f"range() at offset {tok.pos} ({_context(cypher, tok.pos)!r}) has a bound that is not a "
                    "number literal or a numeric $parameter: the server builds the whole list before any memory check, "
                    f"so bounds must be known in advance (at most {MAX_RANGE_ELEMENTS} elements); "
                    "pass the bounds as $parameters or iterate over the list itself (UNWIND list AS x)"
                )
            total += count
            if count > MAX_RANGE_ELEMENTS or total > MAX_RANGE_TOTAL:
                raise QueryTooComplexError(
                    f"range() at offset {tok.pos} ({_context(cypher, tok.pos)!r}) produces {count:.3g} elements "
                    f"({total:.3g} for the query's ranges together); the limit is {MAX_RANGE_ELEMENTS} per "
                    f"range() and {MAX_RANGE_TOTAL} per query: use smaller bounds or filter with WHERE "
                    "instead of enumerating numbers"
                )
        elif lowered == "reduce":
            acc = _reduce_growth(tokens, idx + 1)
            if acc is not None:
                raise QueryTooComplexError(
                    f"reduce() at offset {tok.pos} uses its accumulator {acc!r} twice in one step "
                    f"({_context(cypher, tok.pos)!r}), which doubles the value each iteration and exhausts "
                    "memory; append a single element per step (acc + x) or use collect()"
                )


def _param_path(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    return f"{path}.{text}" if text.isidentifier() else f"{path}[{text[:40]!r}]"


def check_params(params: Mapping[str, Any] | None) -> None:
    """Raise ParameterValueError, naming the parameter path, for a value the server would not see as sent.

    FalkorDB silently clamps integers beyond 64 bits to INT64_MAX, reports NaN/Infinity as a
    syntax error in the query, and cuts strings at a NUL character; a very deep value made
    the Python client raise RecursionError. Each is refused here with the path of the value
    (``$keys[3]``, ``$filter.name``) so the caller can fix that value. Walks iteratively, so
    the depth bound itself cannot overflow the stack.
    """
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise ParameterValueError(f"params must be a map of name -> value, got {type(params).__name__}")
    todo: list[tuple[str, Any, int]] = []
    for name, value in params.items():
        if not isinstance(name, str) or "\x00" in name:
            raise ParameterValueError(f"parameter name {name!r} must be a string without NUL characters")
        todo.append((f"${name}", value, 0))
    while todo:
        path, value, depth = todo.pop()
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ParameterValueError(
                    f"parameter {path} = {str(value)[:30]}{'...' if len(str(value)) > 30 else ''} does not fit in "
                    f"a signed 64-bit integer ({INT64_MIN} .. {INT64_MAX}); the server would silently change it: "
                    "pass a smaller number, or a string if it is an identifier"
                )
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ParameterValueError(
                    f"parameter {path} is {value!r}; NaN and infinite numbers (e.g. 1e999) cannot be sent: "
                    "pass a finite number or null"
                )
            continue
        if isinstance(value, str):
            if "\x00" in value:
                raise ParameterValueError(
                    f"parameter {path} contains a NUL character (U+0000) at position {value.index(chr(0))}; "
                    "the graph stores text without NUL, so remove it"
                )
            continue
        if isinstance(value, Mapping | list | tuple):
            if depth >= MAX_PARAM_DEPTH:
                raise ParameterValueError(
                    f"parameter {path} nests lists/maps deeper than {MAX_PARAM_DEPTH} levels; flatten the value"
                )
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if not isinstance(key, str) or "\x00" in key:
                        raise ParameterValueError(
                            f"parameter {path} has the map key {str(key)[:40]!r}; map keys must be strings "
                            "without NUL characters"
                        )
                    todo.append((_param_path(path, key), item, depth + 1))
            else:
                todo.extend((_param_path(path, i), item, depth + 1) for i, item in enumerate(value))
            continue
        raise ParameterValueError(
            f"parameter {path} is a {type(value).__name__}; use strings, numbers, booleans, null, lists and maps"
        )


def check_query(cypher: str, params: Mapping[str, Any] | None = None) -> None:
    """Every static check a model-written query passes before a store runs it: read-only, bounded, sendable."""
    check_read_only(cypher)
    check_params(params)
    check_resources(cypher, params)
