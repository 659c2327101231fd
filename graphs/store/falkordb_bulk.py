"""FalkorDB's binary bulk-insert format (``GRAPH.BULK``): a graph's nodes and edges without Cypher.

Why: a Cypher load needs one statement per label and one per (relation, source label, target label)
pattern, because labels and relation types cannot be parameters, and FalkorDB parses and plans every
statement (about 0.3 ms each, more as the schema grows). A graph with 5,000 relation names had 30,000
patterns: most of its build went to parsing. The bulk format names each label or relation type once
per run of rows and points edges at node ids, so the load costs one command per few megabytes.

The server trusts these bytes (it does not check bounds), so the encoder is the one place that
writes them, and it refuses (``BulkUnsupported``) whatever the format cannot carry exactly: a label or
relation type with ``:`` (the format's label separator), a NUL, text that is not UTF-8 (a lone
surrogate), an integer outside 64 bits, a key two nodes share. The caller then loads with Cypher, as
before, and checks what a bulk load stored (counts, ids, key indexes) before trusting it.

Format (FalkorDB ``src/bulk_insert/bulk_insert.c``): a token is a header -- the label or relation
type, NUL-terminated; a 4-byte property count; the property names, NUL-terminated -- followed by one
record per entity: for an edge, the source and target node ids (8 bytes each); then one value per
header property: a type byte and its payload (NULL: none, BOOL: 1 byte, DOUBLE and LONG: 8 bytes,
STRING: NUL-terminated UTF-8, ARRAY: an 8-byte length and its values). A NULL value is skipped, so
a node gets exactly the properties its row has, in header order. Node ids are assigned in creation
order on a graph that has none yet. Numbers are in the machine's byte order (the server is local).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphs.store.props import EdgeRow

_NULL, _BOOL, _DOUBLE, _STRING, _LONG, _ARRAY = (b"\x00", b"\x01", b"\x02", b"\x03", b"\x04", b"\x05")
_I64 = struct.Struct("=q")
_F64 = struct.Struct("=d")
_U32 = struct.Struct("=I")
_IDS = struct.Struct("=QQ")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

TOKEN_BYTES = 8 * 1024**2
"""A token (one label's or relation type's run of rows) is cut at about this size."""

COMMAND_BYTES = 64 * 1024**2
"""One GRAPH.BULK command carries about this much (the server reads a command whole)."""


class BulkUnsupported(ValueError):
    """The graph holds something the bulk format cannot carry exactly: load it with Cypher."""


def _text(text: str) -> bytes:
    """NUL-terminated UTF-8."""
    if "\x00" in text:
        raise BulkUnsupported(f"text {text[:40]!r} holds NUL")
    try:
        return text.encode("utf-8") + b"\x00"
    except UnicodeEncodeError as exc:
        raise BulkUnsupported(f"text {text[:40]!r} is not UTF-8 ({exc.reason})") from exc


def _label(name: str) -> bytes:
    """A label or relation type: ``:`` would split it into several labels."""
    if ":" in name:
        raise BulkUnsupported(f"name {name[:40]!r} holds ':'")
    return _text(name)


def _value(out: bytearray, value: Any) -> None:
    kind = type(value)
    if kind is str:
        out += _STRING
        out += _text(value)
    elif kind is bool:
        out += _BOOL
        out += b"\x01" if value else b"\x00"
    elif kind is int:
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise BulkUnsupported(f"integer {value} is outside 64 bits")
        out += _LONG
        out += _I64.pack(value)
    elif kind is float:
        out += _DOUBLE
        out += _F64.pack(value)
    elif kind is list:
        out += _ARRAY
        out += _I64.pack(len(value))
        for item in value:
            _value(out, item)
    else:
        raise BulkUnsupported(f"value of type {kind.__name__}")


def _header(name: str, props: Sequence[str]) -> bytearray:
    out = bytearray(_label(name))
    out += _U32.pack(len(props))
    for prop in props:
        out += _text(prop)
    return out


def _is_subsequence(keys: Sequence[str], header: Sequence[str]) -> bool:
    it = iter(header)
    return all(k in it for k in keys)


def _runs(rows: Sequence[Any], field: str | int) -> Iterator[tuple[tuple[str, ...], Sequence[Any]]]:
    """Consecutive rows that can share one header: each row's property keys (``row[field]``) in the header's
    order with gaps (a missing property is written NULL, which the server skips, so the entity keeps its own
    keys in its own order), and the header in the order the keys first appear (so the server registers
    property names in the order a Cypher load would). A row extends the header only by keys after all of it.
    Why: the server sets up every token anew; optional properties cut a label's rows into many tokens."""
    start = 0
    while start < len(rows):
        header = tuple(rows[start][field])
        end = start + 1
        while end < len(rows):
            keys = tuple(rows[end][field])
            if keys[: len(header)] == header:
                header = keys
            elif not _is_subsequence(keys, header):
                break
            end += 1
        yield header, rows[start:end]
        start = end


def _values(out: bytearray, header: Sequence[str], props: dict[str, Any]) -> None:
    """One value per header property, NULL for the ones this row does not have."""
    if len(props) == len(header):
        for value in props.values():
            _value(out, value)
        return
    for name in header:
        if name in props:
            _value(out, props[name])
        else:
            out += _NULL


Token = tuple[bool, bytes, int]
"""(is an edge token, its bytes, the rows it creates)."""


def node_tokens(node_rows: dict[str, list[dict[str, Any]]], ids: dict[str, int]) -> Iterator[Token]:
    """Tokens in the order a Cypher load creates the nodes (labels sorted, rows as given); fills ``ids``
    with each key's node id (its position in that order) as it goes."""
    for label in sorted(node_rows):
        for keys, run in _runs(node_rows[label], "props"):
            out, count = _header(label, keys), 0
            for row in run:
                props = row["props"]
                key = props["key"]
                if key in ids:
                    raise BulkUnsupported(f"two nodes are stored under the key {key[:40]!r}")
                ids[key] = len(ids)
                _values(out, keys, props)
                count += 1
                if len(out) >= TOKEN_BYTES:
                    yield False, bytes(out), count
                    out, count = _header(label, keys), 0
            if count:
                yield False, bytes(out), count


def edge_tokens(edge_rows: dict[tuple[str, str, str], list[EdgeRow]], ids: dict[str, int]) -> Iterator[Token]:
    """Tokens in the order a Cypher load creates the edges ((relation, source label, target label)
    patterns sorted, rows as given), endpoints as the node ids in ``ids`` (complete by the first edge).
    A token does not name the labels, so the patterns of one relation share tokens: one per run of
    property keys, not one per pattern (the server sets up each token's relation anew)."""
    pack = _IDS.pack
    patterns = sorted(edge_rows)
    for rel, same in groupby(patterns, key=lambda pattern: pattern[0]):
        rows = [row for pattern in same for row in edge_rows[pattern]]
        for keys, run in _runs(rows, 2):
            out, count = _header(rel, keys), 0
            for src_key, dst_key, props in run:
                src, dst = ids.get(src_key), ids.get(dst_key)
                if src is None or dst is None:
                    raise BulkUnsupported(f"an edge of {rel[:40]!r} points at a key no node has")
                out += pack(src, dst)
                _values(out, keys, props)
                count += 1
                if len(out) >= TOKEN_BYTES:
                    yield True, bytes(out), count
                    out, count = _header(rel, keys), 0
            if count:
                yield True, bytes(out), count


def commands(tokens: Iterable[Token]) -> Iterator[tuple[list[Any], int]]:
    """GRAPH.BULK arguments after the graph name (node count, edge count, token counts, tokens) of about
    COMMAND_BYTES each, with the rows each creates; ``tokens``: all node tokens, then the edge tokens."""
    nodes: list[tuple[bytes, int]] = []
    edges: list[tuple[bytes, int]] = []
    size = 0

    def command() -> tuple[list[Any], int]:
        node_count = sum(n for _, n in nodes)
        edge_count = sum(n for _, n in edges)
        args: list[Any] = [node_count, edge_count, len(nodes), len(edges)]
        args += [t for t, _ in nodes] + [t for t, _ in edges]
        return args, node_count + edge_count

    for is_edge, token, rows in tokens:
        if size and size + len(token) > COMMAND_BYTES:
            yield command()
            nodes, edges, size = [], [], 0
        (edges if is_edge else nodes).append((token, rows))
        size += len(token)
    if nodes or edges:
        yield command()
