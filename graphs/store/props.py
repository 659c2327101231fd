"""Property and name handling shared by the FalkorDB and Neo4j stores.

Why: both stores accept only scalars and lists of scalars as property values and
both need labels/relationship types spliced into Cypher text (they cannot be
parameters), so sanitising values and quoting names must behave identically.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from graphs.errors import LoaderError
from graphs.skb.model import SKB, Edge, LabelInfo, Node, PropertyInfo, RelationInfo, value_type_name
from graphs.skb.storable import INT64_MAX, INT64_MIN, store_key_problem, value_problem

Scalar = str | int | float | bool


def quote_name(name: str) -> str:
    """Backtick-quote a label, relationship type or property name for Cypher text."""
    return "`" + name.replace("`", "``") + "`"


class _Unstorable(ValueError):
    """A key, property name or value no store holds exactly (``graphs.skb.storable``)."""


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


def _scalar_or_json(value: Any) -> Scalar:
    if isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def store_value(value: Any) -> Scalar | list[Scalar] | None:
    """A value a graph store can hold: None is dropped, nested structures become JSON text.

    Lists of scalars stay lists (both stores index and return them natively); a list
    mixing types or holding dicts becomes a list of JSON strings so nothing is lost.
    """
    if value is None or not _finite(value):
        return None  # NaN/inf have no Cypher literal; treated like a missing value
    kind = type(value)
    if (kind is str and "\x00" in value) or (kind is int and not INT64_MIN <= value <= INT64_MAX):
        raise _Unstorable
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        if value_problem(value):
            raise _Unstorable
        items = [v for v in value if v is not None and _finite(v)]
        if all(isinstance(v, str) for v in items) or all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in items
        ):
            return list(items)
        if all(isinstance(v, bool) for v in items):
            return list(items)
        return [v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str) for v in items]
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return _scalar_or_json(value)


def store_props(props: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
    """The property map as stored, with `key` forced to the node key when given. Names are kept as they are:
    what no store holds exactly raises ``_Unstorable`` (names were rewritten, and two became one; NUL became
    U+FFFD; integers were clamped), and the rows below then raise ``SKB.check_storable``'s error naming them."""
    out: dict[str, Any] = {}
    if key is not None:
        if store_key_problem(key):
            raise _Unstorable
        out["key"] = key
    for name, value in props.items():
        if key is not None and name == "key":
            continue
        if type(name) is not str or not name or "`" in name or "\x00" in name:
            raise _Unstorable
        converted = store_value(value)
        if converted is not None:
            out[name] = converted
    return out


def _refusal(skb: SKB) -> LoaderError:
    """The error naming what in ``skb`` no store holds exactly, in the words ``SKB.validate`` uses."""
    try:
        skb.check_storable(f"graph {skb.name!r}")
    except LoaderError as exc:
        return exc
    return LoaderError(f"graph {skb.name!r}", "holds a key or value the graph store cannot hold exactly",
                       fix="run skb.validate() to see which")  # fmt: skip


def batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    size = max(1, size)
    for start in range(0, len(items), size):
        yield items[start : start + size]


_NO_PROPS: dict[str, Any] = {}
"""The one property map of every edge without properties (most edges of a large graph): an empty dict per edge
row cost 64 bytes each, 0.6 GB at ten million edges. Rows are read, never changed."""


def node_row(node: Node) -> dict[str, Any]:
    """One node's load row, {"props": {...}} for `UNWIND $rows AS r ... SET n = r.props` (``_Unstorable`` as
    ``store_props``)."""
    return {"props": store_props(node.props, key=node.key)}


EdgeRow = tuple[str, str, dict[str, Any]]
"""One edge's load row: (src key, dst key, props as stored). Why a tuple and not the dict of ``edge_row``: a load holds
one row per edge of the graph at once, and a three-entry dict costs 200 bytes against a tuple's 80 (10.4 million
edges: 1.2 GB less); ``edge_params`` makes the Cypher rows of a batch when it is sent."""


def load_row(edge: Edge) -> EdgeRow:
    """One edge's load row (``_Unstorable`` as ``store_props``)."""
    return (edge.src, edge.dst, store_props(edge.props) if edge.props else _NO_PROPS)


def edge_params(rows: Iterable[EdgeRow]) -> list[dict[str, Any]]:
    """Load rows as the rows of ``UNWIND $rows AS r ... r.s, r.d, r.p``."""
    return [{"s": src, "d": dst, "p": props} for src, dst, props in rows]


def edge_row(edge: Edge) -> dict[str, Any]:
    """One edge's Cypher row, {"s": src key, "d": dst key, "p": props} (``_Unstorable`` as ``store_props``)."""
    return edge_params([load_row(edge)])[0]


def node_rows_by_label(skb: SKB) -> dict[str, list[dict[str, Any]]]:
    """Per label, rows of the form {"props": {...}} ready for `UNWIND $rows AS r ... SET n = r.props`."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    try:
        for node in skb.iter_nodes():
            rows[node.label].append(node_row(node))
    except _Unstorable:
        raise _refusal(skb) from None
    return dict(rows)


def edge_rows_by_pattern(skb: SKB) -> dict[tuple[str, str, str], list[EdgeRow]]:
    """Per (rel, src label, dst label), the load rows (``EdgeRow``) in edge order; dangling edges are refused."""
    if skb.arrays_are_fixed:
        return _edge_rows_from_arrays(skb)
    rows: dict[tuple[str, str, str], list[EdgeRow]] = defaultdict(list)
    for i, edge in enumerate(skb.edges):
        src = skb.nodes.get(edge.src)
        dst = skb.nodes.get(edge.dst)
        if src is None or dst is None:
            missing = edge.src if src is None else edge.dst
            raise LoaderError(
                skb.name,
                f"edge {edge.src!r} -[{edge.rel}]-> {edge.dst!r} refers to unknown node {missing!r}",
                record=i,
                fix="call skb.validate() before loading, and add the node or drop the edge",
            )
        try:
            rows[(edge.rel, src.label, dst.label)].append(load_row(edge))
        except _Unstorable:
            raise _refusal(skb) from None
    return dict(rows)


def _edge_rows_from_arrays(skb: SKB) -> dict[tuple[str, str, str], list[EdgeRow]]:
    """``edge_rows_by_pattern`` where the SKB holds its label and edge arrays (a compact SKB): the ends' labels
    come from the arrays, not from a node per end (which a compact SKB would build), and its edges refer to node
    ids, so none dangles."""
    labels, node_label = skb.label_ids()
    rels, rel_ids, src_ids, dst_ids = skb.edge_arrays()
    n_labels = len(labels)
    groups: dict[int, list[EdgeRow]] = defaultdict(list)
    edges = iter(skb.edges)
    step = 65536
    try:
        for start in range(0, len(rel_ids), step):
            end = start + step
            codes = ((np.asarray(rel_ids[start:end], dtype=np.int64) * n_labels + node_label[src_ids[start:end]])
                     * n_labels + node_label[dst_ids[start:end]]).tolist()
            for code, edge in zip(codes, edges):
                groups[code].append(load_row(edge))
    except _Unstorable:
        raise _refusal(skb) from None
    return {(rels[code // (n_labels * n_labels)], labels[code // n_labels % n_labels], labels[code % n_labels]): rows
            for code, rows in groups.items()}


def label_info_from_samples(label: str, count: int, samples: Sequence[dict[str, Any]], max_samples: int) -> LabelInfo:
    """Build a LabelInfo from sampled property maps; `key` first, then `name`, then the rest as first seen."""
    infos: dict[str, PropertyInfo] = {}
    for props in samples:
        for pname, value in props.items():
            info = infos.get(pname)
            if info is None:
                info = infos[pname] = PropertyInfo(name=pname, type=value_type_name(value))
            if len(info.samples) < max_samples and value not in (None, "", []):
                info.samples.append(str(value)[:80])
    ordered = [infos.pop(p) for p in ("key", "name") if p in infos] + list(infos.values())
    if not any(p.name == "key" for p in ordered):
        ordered.insert(0, PropertyInfo(name="key", type="STRING"))
    return LabelInfo(label=label, count=count, properties=ordered)


def relations_from_rows(rows: Sequence[Sequence[Any]]) -> list[RelationInfo]:
    """Rows of `type(r), labels(a)[0], labels(b)[0], count(r)` as sorted relation patterns."""
    return sorted(
        (RelationInfo(rel=str(r[0]), src_label=str(r[1]), dst_label=str(r[2]), count=int(r[3])) for r in rows),
        key=lambda ri: (ri.rel, ri.src_label, ri.dst_label),
    )


def group_by_label(keys: Sequence[str], key_labels: dict[str, str]) -> dict[str, list[str]]:
    """label -> keys (deduplicated, in order) for the keys whose label is known."""
    by_label: dict[str, list[str]] = {}
    for key in dict.fromkeys(keys):
        found = key_labels.get(key)
        if found is not None:
            by_label.setdefault(found, []).append(key)
    return by_label
