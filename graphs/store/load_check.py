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

from graphs.errors import first_problems
from graphs.store.props import EdgeRow, quote_name

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


UNION_BRANCHES = 32
"""Labels whose lookups one round trip carries (``UNION ALL``): a sample spread over thousands of labels."""

ROWS_PER_READ = 20_000
"""Rows one read may return: far below a store's own cap on a reply (FalkorDB's RESULTSET_SIZE), which cuts a
longer reply short and would read as missing edges."""


def _parts(by_label: dict[str, list[str]], rows: Callable[[str], int]) -> list[dict[str, list[str]]]:
    """``by_label`` split into parts whose keys' expected rows (``rows(key)``, at least 1 each) stay within
    ROWS_PER_READ (a key with more is a part of its own)."""
    parts: list[dict[str, list[str]]] = [{}]
    total = 0
    for label in sorted(by_label):
        for key in by_label[label]:
            n = max(1, rows(key))
            if total and total + n > ROWS_PER_READ:
                parts.append({})
                total = 0
            parts[-1].setdefault(label, []).append(key)
            total += n
    return parts


def _read_by_label(read: Read, union: bool, by_label: dict[str, list[str]], pattern: str, columns: str) -> list[Any]:
    """Rows of ``UNWIND keys AS k MATCH (n:Label {key: k})<pattern> RETURN k AS k, <columns>`` for every
    label's keys; several labels per round trip where the store allows ``UNION ALL``. The rows are told apart
    by ``k`` alone: a key belongs to one node."""
    branches = [
        (f"UNWIND $k{i} AS k MATCH (n:{quote_name(label)} {{key: k}}){pattern} RETURN k AS k, {columns}", {f"k{i}": keys})
        for i, (label, keys) in enumerate(sorted(by_label.items())) if keys
    ]  # fmt: skip
    group = UNION_BRANCHES if union else 1
    rows: list[Any] = []
    for start in range(0, len(branches), group):
        part = branches[start : start + group]
        params: dict[str, Any] = {}
        for _, branch_params in part:
            params |= branch_params
        rows.extend(read(" UNION ALL ".join(cypher for cypher, _ in part), params))
    return rows


def load_mismatches(
    read: Read,
    node_rows: dict[str, list[dict[str, Any]]],
    edge_rows: dict[tuple[str, str, str], list[EdgeRow]],
    size: int = SAMPLE_NODES,
    union: bool = True,
) -> list[str]:
    """What the store answers differently from what was written, for a sample of the nodes; [] when nothing.
    ``union``: whether the store runs ``UNION ALL`` (several labels' lookups in one round trip)."""
    picked = sample(node_rows, size)
    keys = {row["props"]["key"] for rows in picked.values() for row in rows}
    written: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for (rel, _, _), loaded in edge_rows.items():
        for src, dst, props in loaded:
            if src in keys:
                written[src].append((rel, dst, _canonical(props)))
    label_of = {row["props"]["key"]: label for label, rows in picked.items() for row in rows}
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    wanted = {label: [row["props"]["key"] for row in rows] for label, rows in picked.items()}
    for part in _parts(wanted, lambda k: 1):
        for key, props in _read_by_label(read, union, part, "", "properties(n) AS p"):
            found[str(key)].append(dict(props or {}))
    small = {label: [k for k in ks if len(written.get(k, ())) <= EDGES_READ] for label, ks in wanted.items()}
    hubs = {label: [k for k in ks if len(written.get(k, ())) > EDGES_READ] for label, ks in wanted.items()}
    stored: dict[str, Counter[tuple[str, str, str]]] = defaultdict(Counter)
    for part in _parts(small, lambda k: len(written.get(k, ()))):
        for key, rel, dst, props in _read_by_label(
            read, union, part, "-[e]->(m)", "type(e) AS t, m.key AS d, properties(e) AS p"
        ):
            stored[str(key)][(str(rel), str(dst), _canonical(dict(props or {})))] += 1
    counts = {str(key): stored[str(key)].total() for key in keys if key in stored}
    for part in _parts(hubs, lambda k: 1):
        for key, count in _read_by_label(read, union, part, "-[e]->()", "count(e) AS c"):
            counts[str(key)] = int(count)
    wrong: list[str] = []
    for label, rows in picked.items():
        for row in rows:
            key = row["props"]["key"]
            got = found.get(key, [])
            if len(got) != 1:
                wrong.append(f"a lookup of {label} key {key[:60]!r} finds {len(got)} nodes, not 1")
            elif _canonical(got[0]) != _canonical(row["props"]):
                wrong.append(f"node {key[:60]!r} ({label}) was stored with other properties than written")
    for key in sorted(keys, key=lambda k: (label_of[k], k)):
        label, expected = label_of[key], written.get(key, [])
        if counts.get(key, 0) != len(expected):
            wrong.append(f"node {key[:60]!r} ({label}) has {counts.get(key, 0)} outgoing edges stored, "
                         f"{len(expected)} written")  # fmt: skip
        elif len(expected) <= EDGES_READ and stored[key] != Counter(expected):
            wrong.append(f"the outgoing edges of {key[:60]!r} ({label}) were stored other than written")
    return wrong


def mismatch_message(wrong: Sequence[str], where: str) -> str:
    return (
        f"the graph loaded into {where} answers differently from the data: {first_problems(wrong, SHOWN)}; the "
        "store cannot hold these keys or values exactly: change them in the data and rebuild with `skb index --force`"
    )


def keys_found(read: Read, by_label: dict[str, list[str]], union: bool = True) -> set[str]:
    """The keys of ``by_label`` (label -> keys) that a keyed lookup finds, read as the check reads: in parts under
    ROWS_PER_READ, several labels per round trip where the store runs ``UNION ALL``."""
    return {str(row[0]) for part in _parts(by_label, lambda k: 1) for row in _read_by_label(read, union, part, "", "1")}
