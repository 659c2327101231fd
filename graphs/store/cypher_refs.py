"""The labels, relation types and properties a Cypher query names, checked against the graph's schema.

Why: a model-written query that names a label the graph lacks returns nothing silently; naming the bad
name, the closest valid one and the valid choices lets the agent repair it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from graphs.errors import CypherValidationError
from graphs.skb.model import GraphSchema
from graphs.store.cypher_lexer import Token, tokenize


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
