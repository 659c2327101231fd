"""The graph store of an update is the parent's FalkorDB graph patched in place: it holds exactly what a fresh
load of the changed graph holds (every node with its label and properties, every edge with its properties,
parallel edges counted), and a patch that comes out otherwise fails the update, leaving the parent serving."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from graphs.build import IndexConfig, build_index
from graphs.errors import StoreError
from graphs.manifest import Manifest
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.store.falkordb_store import FalkorDBStore
from graphs.update import parse_changes, store_patch, update_index

pytestmark = pytest.mark.integration

CONFIG = IndexConfig(dataset="neutral", store="falkordb", embedder="hash:64")

CHANGES: list[dict[str, Any]] = [
    {"op": "upsert", "node": {"key": "a1", "label": "Alpha", "props": {"name": "first alpha, renamed", "n": 7}}},
    {"op": "delete", "node": {"key": "b2"}},
    {"op": "upsert", "node": {"key": "b1", "label": "Beta", "props": {"name": "beta one, untagged"}}},
    {"op": "upsert", "node": {"key": "a9", "label": "Alpha", "props": {"name": "a new alpha"}}},
    {"op": "upsert", "edge": {"src": "a9", "rel": "POINTS_AT", "dst": "b1", "props": {"w": 0.25}}},
    {"op": "upsert", "edge": {"src": "b3", "rel": "BELONGS", "dst": "a9"}},
    {"op": "delete", "edge": {"src": "a3", "rel": "POINTS_AT", "dst": "b3"}},
    {"op": "upsert", "edge": {"src": "a2", "rel": "POINTS_AT", "dst": "b1", "props": {"w": 0.9}}},
    {"op": "upsert", "node": {"key": "b4", "label": "Alpha", "props": {"name": "fourth beta, now an alpha"}}},
]


def neutral_skb() -> SKB:
    """Labels and relations of no dataset; parallel edges, edge properties and a node with many edges."""
    skb = SKB("neutral", [NodeType(label="Alpha"), NodeType(label="Beta")])
    for i in range(1, 5):
        skb.add_node(Node(f"a{i}", "Alpha", {"name": f"alpha number {i}", "n": i}))
        skb.add_node(Node(f"b{i}", "Beta", {"name": f"beta number {i}", "tags": ["x", f"t{i}"]}))
    for i in range(1, 5):
        for j in range(1, 5):
            skb.add_edge(Edge(f"a{i}", "POINTS_AT", f"b{j}", {"w": round(0.1 * (i + j), 2)}))
    skb.add_edge(Edge("a2", "POINTS_AT", "b1", {"w": 0.5}))  # parallel to a2 -> b1 (w 0.3)
    for j in range(1, 5):
        skb.add_edge(Edge(f"b{j}", "BELONGS", "a1"))
    skb.add_edge(Edge("b4", "BELONGS", "a2"))
    return skb


def changed_by_hand() -> SKB:
    """The neutral graph with CHANGES made on the graph itself: what a rebuild loads."""
    old = neutral_skb()
    skb = SKB("neutral", old.node_types.values())
    for node in old.nodes.values():
        if node.key == "b2":
            continue
        if node.key == "a1":
            node = Node("a1", "Alpha", {"name": "first alpha, renamed", "n": 7})
        if node.key == "b1":
            node = Node("b1", "Beta", {"name": "beta one, untagged"})
        if node.key == "b4":
            node = Node("b4", "Alpha", {"name": "fourth beta, now an alpha"})
        skb.add_node(node)
    skb.add_node(Node("a9", "Alpha", {"name": "a new alpha"}))
    for edge in old.edges:
        if "b2" in (edge.src, edge.dst) or (edge.src, edge.dst) in {("a3", "b3"), ("a2", "b1")}:
            continue
        skb.add_edge(edge)
    skb.add_edge(Edge("a9", "POINTS_AT", "b1", {"w": 0.25}))
    skb.add_edge(Edge("b3", "BELONGS", "a9"))
    skb.add_edge(Edge("a2", "POINTS_AT", "b1", {"w": 0.9}))
    return skb


def graph_of(index_dir: Path) -> tuple[Counter[str], Counter[str]]:
    """Every node and edge the index's FalkorDB graph holds, as canonical JSON (multisets)."""
    with FalkorDBStore(index_dir / "falkordb", persist=False) as store:
        nodes = store._read("MATCH (n) RETURN labels(n), properties(n)")
        edges = store._read("MATCH (a)-[e]->(b) RETURN a.key, type(e), b.key, properties(e)")
    return (Counter(json.dumps([sorted(labels), props], sort_keys=True) for labels, props in nodes),
            Counter(json.dumps(list(row), sort_keys=True) for row in edges))


def changes() -> Any:
    return parse_changes("".join(json.dumps(line) + "\n" for line in CHANGES).encode())


def test_a_patched_store_holds_what_a_fresh_load_of_the_changed_graph_holds(tmp_path: Path) -> None:
    updated = tmp_path / "updated"
    build_index(neutral_skb(), updated, CONFIG)
    summary = update_index(updated, changes())
    assert summary.hnsw["store_patched"] is True
    rebuilt = tmp_path / "rebuilt"
    build_index(changed_by_hand(), rebuilt, CONFIG)
    got, want = graph_of(updated), graph_of(rebuilt)
    assert got == want
    nodes, edges = got
    # 22 edges, less b2's 5, a3 -> b3 and one of the parallel pair, plus a9's 2
    assert sum(nodes.values()) == 8 and sum(edges.values()) == 17
    assert '["Beta"], {"key": "b1", "name": "beta one, untagged"}]' in "".join(nodes)
    assert not any('"b2"' in e for e in edges) and any('"a9", "POINTS_AT", "b1", {"w": 0.25}' in e for e in edges)
    Manifest.read(updated).verify(updated)  # the dump's digest is the patched graph's


def _drop_new_edges(diff: store_patch.GraphDiff) -> None:
    diff.edges_created.clear()  # the new and the changed edges never reach the store


def _keep_a_deleted_node(diff: store_patch.GraphDiff) -> None:
    diff.deleted = {label: [k for k in keys if k != "b2"] for label, keys in diff.deleted.items()}


@pytest.mark.parametrize(("lose", "named"), [(_drop_new_edges, "edges where the changed graph has"),
                                             (_keep_a_deleted_node, "the deleted node 'b2' (Beta) is still found")])
def test_a_patch_that_comes_out_wrong_fails_the_update_and_the_parent_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lose: Any, named: str
) -> None:
    index_dir = tmp_path / "index"
    build_index(neutral_skb(), index_dir, CONFIG)
    parent = Manifest.read(index_dir).generation
    before = graph_of(index_dir)
    real = store_patch.graph_diff

    def lossy(*args: Any) -> store_patch.GraphDiff:
        diff = real(*args)
        lose(diff)
        return diff

    monkeypatch.setattr(store_patch, "graph_diff", lossy)
    with pytest.raises(StoreError, match="patched graph store answers differently from the changed graph") as err:
        update_index(index_dir, changes())
    assert named in str(err.value)
    assert Manifest.read(index_dir).generation == parent
    assert graph_of(index_dir) == before
    assert not list(tmp_path.glob(".index.tmp-*"))
