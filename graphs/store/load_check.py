"""The check after a graph load: keyed lookups and edges of a sample of nodes read back and compared.

Why: counts agree when the store has every node and edge but answers a keyed lookup wrongly -- two keys
its index reads as one (``Paris`` and ``Paris ``: one lookup found both, the other nothing) gave the
right number of nodes and, through the Cypher load's keyed matches, the right number of edges on the
wrong nodes. Each sampled node is looked up by its label and key (the index every lookup uses): exactly
one node, with exactly the properties written; and its outgoing edges (relation, target key, properties)
are the ones written. The sample is spread over the whole load and its size fixed, so the check costs a
few queries and one pass over the edge rows, also for a million nodes.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from graphs.store.props import quote_name

SAMPLE_NODES = 256
"""Nodes read back after a load (all of them in a smaller graph)."""

EDGES_READ = 2_000
"""A sampled node with more outgoing edges has them counted, not read one by one."""

SHOWN = 5

Read = Callable[[str, dict[str, Any]], list[Any]]


def _read_back(value: Any) -> Any:
    """``value`` as a store's reply gives it: FalkorDB answers a double with 15 significant digits."""
    if type(value) is float:
        return float(f"{value:.15g}")
    if isinstance(value, dict):
        return {k: _read_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_read_back(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    return json.dumps(_read_back(value), sort_keys=True, default=str)


def sample(node_rows: dict[str, list[dict[str, Any]]], size: int = SAMPLE_NODES) -> dict[str, list[dict[str, Any]]]:
    """label -> rows of about ``size`` nodes evenly spaced over the rows of every label (in label order)."""
    total = sum(len(rows) for rows in node_rows.values())
    step = max(1, total // max(1, size))
    picked: dict[str, list[dict[str, Any]]] = {}
    at = 0
    for label in sorted(node_rows):
        rows = node_rows[label]
        first = (-at) % step
        chosen = rows[first::step]
        if chosen:
            picked[label] = chosen
        at += len(rows)
    return picked


def load_mismatches(
    read: Read,
    node_rows: dict[str, list[dict[str, Any]]],
    edge_rows: dict[tuple[str, str, str], list[dict[str, Any]]],
    size: int = SAMPLE_NODES,
) -> list[str]:
    """What the store answers differently from what was written, for a sample of the nodes; [] when nothing."""
    picked = sample(node_rows, size)
    keys = {row["props"]["key"] for rows in picked.values() for row in rows}
    written: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for (rel, _, _), rows in edge_rows.items():
        for row in rows:
            if row["s"] in keys:
                written[row["s"]].append((rel, row["d"], _canonical(row["p"])))
    wrong: list[str] = []
    for label, rows in picked.items():
        wanted = [row["props"]["key"] for row in rows]
        node = f"(n:{quote_name(label)} {{key: k}})"
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key, props in read(f"UNWIND $keys AS k MATCH {node} RETURN k, properties(n)", {"keys": wanted}):
            found[str(key)].append(dict(props or {}))
        for row in rows:
            key = row["props"]["key"]
            got = found.get(key, [])
            if len(got) != 1:
                wrong.append(f"a lookup of {label} key {key[:60]!r} finds {len(got)} nodes, not 1")
            elif _canonical(got[0]) != _canonical(row["props"]):
                wrong.append(f"node {key[:60]!r} ({label}) was stored with other properties than written")
        counts = {
            str(key): int(count)
            for key, count in read(f"UNWIND $keys AS k MATCH {node}-[e]->() RETURN k, count(e)", {"keys": wanted})
        }
        small = [key for key in wanted if len(written.get(key, ())) <= EDGES_READ]
        stored: dict[str, Counter[tuple[str, str, str]]] = defaultdict(Counter)
        if small:
            edges = read(
                f"UNWIND $keys AS k MATCH {node}-[e]->(m) RETURN k, type(e), m.key, properties(e)", {"keys": small}
            )
            for key, rel, dst, props in edges:
                stored[str(key)][(str(rel), str(dst), _canonical(dict(props or {})))] += 1
        for key in wanted:
            if counts.get(key, 0) != len(written.get(key, ())):
                wrong.append(f"node {key[:60]!r} ({label}) has {counts.get(key, 0)} outgoing edges stored, "
                             f"{len(written.get(key, ()))} written")  # fmt: skip
            elif key in small and stored[key] != Counter(written.get(key, ())):
                wrong.append(f"the outgoing edges of {key[:60]!r} ({label}) were stored other than written")
    return wrong


def mismatch_message(wrong: Sequence[str], where: str) -> str:
    more = f"; and {len(wrong) - SHOWN} more" if len(wrong) > SHOWN else ""
    return (
        f"the graph loaded into {where} answers differently from the data: {'; '.join(wrong[:SHOWN])}{more}; the "
        "store cannot hold these keys or values exactly: change them in the data and rebuild with `skb index --force`"
    )
