"""The graph store of a new generation patched from the parent's instead of loaded again.

Why: loading the embedded FalkorDB re-sends every node and edge (seconds on tens of thousands of nodes, minutes
at a million, plus a save of the whole graph), while a change set touches a few hundred. The parent's dump is
copied into the new generation (the parent's files are never written), a server started on the copy, and only
the difference of the two graphs around the changed nodes is written: nodes deleted (with their edges), nodes
whose label changed deleted and created again, properties replaced, and the parallel edges of every
(source, relation, target) whose list changed deleted and created again. Every edge that changed has a changed
node at an end (``graphs.update.changes`` marks both ends), so the difference around those nodes is the whole
difference.

The result is checked before it is saved: node and edge counts equal the changed graph's, and every node a write
touched is looked up by key and compared with its properties and outgoing edges (``graphs.store.load_check``).
Anything else, or a parent without a dump, falls back to the full load.

What may differ from a fresh load: the store's internal ids. A new node can take the id of a deleted one, where
a load numbers nodes in the graph's order; keyed lookups, counts and edges are the same, and only the order in
which the server meets a hub's edges when a query reads "the first N" of them can differ.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphs.errors import first_problems
from graphs.skb.model import SKB, Edge
from graphs.store.load_check import SHOWN, keys_found, load_mismatches
from graphs.store.props import EdgeRow, batched, edge_row, load_row, node_row, quote_name, store_props

#: Rows per UNWIND statement.
BATCH = 2000
#: Changed nodes beyond this share of a graph of over SMALL nodes are loaded in full: the patch's keyed writes
#: then cost more than the bulk load (a small graph costs little either way).
MAX_SHARE = 0.3
SMALL = 10_000

Triple = tuple[str, str, str]


@dataclass
class GraphDiff:
    """What the store must do to turn the parent's graph into the changed one, in that order."""

    deleted: dict[str, list[str]] = field(default_factory=dict)  # label -> keys (DETACH DELETE)
    edges_deleted: dict[Triple, list[dict[str, str]]] = field(default_factory=dict)  # (rel, src label, dst label)
    updated: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> {"k", "props"}
    created: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> {"props"}
    edges_created: dict[Triple, list[dict[str, Any]]] = field(default_factory=dict)  # rows as a load's


def _parallel(skb: SKB, triple: Triple) -> list[dict[str, Any]]:
    """The property maps, in the graph's order, of the edges ``src -[rel]-> dst``."""
    src, rel, dst = triple
    if src not in skb.nodes:
        return []
    return [e.props for e in skb.out_edges(src) if e.rel == rel and e.dst == dst]


def _parallel_of(skb: SKB, triples: Collection[Triple]) -> dict[Triple, list[dict[str, Any]]]:
    """``_parallel`` of each of ``triples`` in one pass over the edges: the parent graph's adjacency, which
    ``_parallel`` would build for the few edges a change set names, costs seconds at millions of edges."""
    wanted = set(triples)
    srcs = {src for src, _, _ in wanted}
    found: dict[Triple, list[dict[str, Any]]] = defaultdict(list)
    for edge in skb.edges:
        if edge.src in srcs:
            triple = (edge.src, edge.rel, edge.dst)
            if triple in wanted:
                found[triple].append(edge.props)
    return found


def _stored(props: list[dict[str, Any]]) -> list[str]:
    """Parallel edges' stored property maps as canonical JSON, sorted: equal lists hold the same edges."""
    return sorted(json.dumps(store_props(p) if p else {}, sort_keys=True) for p in props)


def graph_diff(old: SKB, new: SKB, touched: Collection[str], edges: Collection[Triple]) -> GraphDiff:
    """The writes that turn ``old`` into ``new`` in a store: ``touched``, every key whose node changed or was
    deleted (or whose edges changed); ``edges``, every (src, rel, dst) a change line upserted or deleted. An edge
    deleted with its node goes with the node's DETACH DELETE, and a node whose label changed gets all its edges
    again."""
    gone: set[str] = set()  # detached by the delete: their old edges need no delete of their own
    deleted: dict[str, list[str]] = defaultdict(list)
    updated: dict[str, list[dict[str, Any]]] = defaultdict(list)
    created: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key in sorted(touched):
        was, now = old.nodes.get(key), new.nodes.get(key)
        if was is not None and (now is None or now.label != was.label):
            deleted[was.label].append(key)
            gone.add(key)
        if now is None:
            continue
        props = store_props(now.props, key=key)
        if was is None or key in gone:
            created[now.label].append({"props": props})
        elif store_props(was.props, key=key) != props:
            updated[now.label].append({"k": key, "props": props})
    triples = set(edges)
    for key in gone & new.nodes.keys():  # created again: every edge it has now
        triples.update((e.src, e.rel, e.dst) for e in new.out_edges(key))
        triples.update((e.src, e.rel, e.dst) for e in new.in_edges(key))
    edges_deleted: dict[Triple, list[dict[str, str]]] = defaultdict(list)
    edges_created: dict[Triple, list[dict[str, Any]]] = defaultdict(list)
    before = _parallel_of(old, triples)
    for triple in sorted(triples):
        src, rel, dst = triple
        was_props = [] if src in gone or dst in gone else before.get(triple, [])
        now_props = _parallel(new, triple)
        # the same maps in the same order (an edge upserted as it was): no JSON needed to tell
        if was_props == now_props or (len(was_props) > 1 and _stored(was_props) == _stored(now_props)):
            continue
        if was_props:
            edges_deleted[(rel, old.nodes[src].label, old.nodes[dst].label)].append({"s": src, "d": dst})
        for props in now_props:
            edges_created[(rel, new.nodes[src].label, new.nodes[dst].label)].append(edge_row(Edge(src, rel, dst, props)))
    return GraphDiff(deleted=dict(deleted), edges_deleted=dict(edges_deleted), updated=dict(updated),
                     created=dict(created), edges_created=dict(edges_created))


def _edge_match(pattern: Triple) -> str:
    rel, src_label, dst_label = pattern
    return (f"UNWIND $rows AS r MATCH (a:{quote_name(src_label)} {{key: r.s}})-[e:{quote_name(rel)}]->"
            f"(b:{quote_name(dst_label)} {{key: r.d}})")


def _edge_create(pattern: Triple) -> str:
    rel, src_label, dst_label = pattern
    return (f"UNWIND $rows AS r MATCH (a:{quote_name(src_label)} {{key: r.s}}) MATCH (b:{quote_name(dst_label)} "
            f"{{key: r.d}}) CREATE (a)-[e:{quote_name(rel)}]->(b) SET e = r.p")


def _statements(diff: GraphDiff) -> list[tuple[str, list[Any]]]:
    """(Cypher, rows) in the order the writes must run: deletes first, so a key deleted and created again (a new
    label) is free when it is created."""
    parts: list[tuple[dict[Any, list[Any]], Callable[[Any], str]]] = [
        (diff.deleted, lambda label: f"UNWIND $rows AS k MATCH (n:{quote_name(label)} {{key: k}}) DETACH DELETE n"),
        (diff.edges_deleted, lambda pattern: f"{_edge_match(pattern)} DELETE e"),
        (diff.updated, lambda label: f"UNWIND $rows AS r MATCH (n:{quote_name(label)} {{key: r.k}}) SET n = r.props"),
        (diff.created, lambda label: f"UNWIND $rows AS r CREATE (n:{quote_name(label)}) SET n = r.props"),
        (diff.edges_created, _edge_create),
    ]
    out: list[tuple[str, list[Any]]] = []
    for groups, cypher_of in parts:
        for group, rows in sorted(groups.items()):
            cypher = cypher_of(group)
            out += [(cypher, list(batch)) for batch in batched(rows, BATCH)]
    return out


def patch_store(parent_dump: Path, data_dir: Path, old: SKB, new: SKB, touched: Collection[str],
                edges: Collection[Triple], *, progress: Callable[[int, int], None] | None = None) -> bool:
    """The changed graph in a FalkorDB dump at ``data_dir``, patched from ``parent_dump``; False (nothing kept
    at ``data_dir``) where the parent has no dump or the change is too large to be worth patching. A patch whose
    result does not check out raises ``StoreError``, as a load that does not would."""
    from graphs.errors import StoreError
    from graphs.store.falkordb_store import FalkorDBStore

    if not parent_dump.is_file() or (len(new.nodes) > SMALL and len(touched) > MAX_SHARE * len(new.nodes)):
        return False
    diff = graph_diff(old, new, touched, edges)
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(parent_dump, data_dir / parent_dump.name)
    statements = _statements(diff)
    total = max(1, len(statements))
    with FalkorDBStore(data_dir) as store:
        labels = sorted({n.label for n in new.nodes.values()} - {n.label for n in old.nodes.values()})
        if labels:
            store._create_key_indexes(labels)
        for done, (cypher, rows) in enumerate(statements, 1):
            store._write(cypher, {"rows": rows})
            if progress:
                progress(done, total)
        wrong = _count_mismatches(store, new) + _still_there(store, old, new, touched)
        if not wrong:
            written = _changed_records(old, new, touched, edges)
            node_rows, edge_rows = _rows_of(new, written)
            wrong = load_mismatches(store._read, node_rows, edge_rows, size=len(written) + 1)
        if wrong:
            raise StoreError(f"the patched graph store answers differently from the changed graph: "
                             f"{first_problems(wrong, SHOWN)}; nothing was swapped in (the previous generation keeps "
                             "serving); build the changed data in full with `skb index --force`")
        store._after_load()
    if progress:
        progress(total, total)
    return True


def _count_mismatches(store: Any, new: SKB) -> list[str]:
    nodes = store._read("MATCH (n) RETURN count(n)")[0][0]
    edges = store._read("MATCH ()-[e]->() RETURN count(e)")[0][0]
    wrong = []
    if nodes != len(new.nodes):
        wrong.append(f"it holds {nodes} nodes where the changed graph has {len(new.nodes)}")
    if edges != len(new.edges):
        wrong.append(f"it holds {edges} edges where the changed graph has {len(new.edges)}")
    return wrong


def _changed_records(old: SKB, new: SKB, touched: Collection[str], edges: Collection[Triple]) -> set[str]:
    """The nodes of the changed graph whose record or edges the change set changed, found from the two graphs (not
    from the writes, which they check): new or changed nodes, and both ends of every edge a line named. A changed
    node's neighbours whose text changed with it are not written, and not read back."""
    found = {key for key in touched if key in new.nodes and (
        key not in old.nodes or old.nodes[key].label != new.nodes[key].label or old.nodes[key].props != new.nodes[key].props)}
    found |= {end for src, _, dst in edges for end in (src, dst) if end in new.nodes}
    return found


def _still_there(store: Any, old: SKB, new: SKB, touched: Collection[str]) -> list[str]:
    """The deleted keys (the changed nodes of the parent that the changed graph lacks) a lookup still finds."""
    gone: dict[str, list[str]] = defaultdict(list)
    for key in sorted(touched):
        if key in old.nodes and key not in new.nodes:
            gone[old.nodes[key].label].append(key)
    found = keys_found(store._read, gone)
    return [f"the deleted node {key[:60]!r} ({label}) is still found"
            for label, keys in sorted(gone.items()) for key in keys if key in found]


def _rows_of(new: SKB, touched: Collection[str]) -> tuple[dict[str, list[dict[str, Any]]],
                                                          dict[Triple, list[EdgeRow]]]:
    """The load's rows (``graphs.store.props``) of the changed nodes still in the graph and their outgoing edges."""
    node_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key in sorted(touched):
        node = new.nodes.get(key)
        if node is not None:
            node_rows[node.label].append(node_row(node))
    edge_rows: dict[Triple, list[EdgeRow]] = defaultdict(list)
    for key in touched:
        for edge in new.out_edges(key):
            edge_rows[(edge.rel, new.nodes[edge.src].label, new.nodes[edge.dst].label)].append(load_row(edge))
    return dict(node_rows), dict(edge_rows)
