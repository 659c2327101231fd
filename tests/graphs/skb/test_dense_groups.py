"""Dense nodes keep their edges grouped by relation in the compact SKB, and every adjacency read
(``edge_count``, ``neighbor_ids``, ``neighbor_keys``) answers exactly as the in-memory SKB does, in the
same order, with the groups and without them (an index written before them). The graph is neutral: a
warehouse hub whose edges of three relations are interleaved, with a self-loop and parallel edges."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from graphs.errors import IndexCorruptError
from graphs.skb.compact import COMPACT_DIR, CompactSKB, dense_groups, open_compact, write_compact
from graphs.skb.model import SKB, Edge, Node

Direction = Literal["out", "in", "both"]
DIRECTIONS: tuple[Direction, ...] = ("out", "in", "both")
RELS = ("STORES", "SUPPLIED_BY", "NEAR", "NO_SUCH_REL")
LABELS = (None, "Item", "Vendor", "Warehouse", "NoSuchLabel")


def warehouse_skb() -> SKB:
    """``w-hub`` stores 30 items and is supplied by 10 vendors (edges interleaved, so grouping reorders
    them), is near two warehouses and itself, and stores item 0 twice; items are also near the hub (a
    relation whose ends have two labels), and a small warehouse has a few edges of each kind."""
    skb = SKB("depot-dense")
    for key in ("w-hub", "w-east", "w-west"):
        skb.add_node(Node(key, "Warehouse", {"name": key.replace("-", " ")}))
    for i in range(30):
        skb.add_node(Node(f"item-{i:02d}", "Item", {"name": f"item {i}"}))
    for i in range(10):
        skb.add_node(Node(f"vendor-{i}", "Vendor", {"name": f"vendor {i}"}))
    for i in range(30):
        skb.add_edge(Edge("w-hub", "STORES", f"item-{i:02d}"))
        if i % 3 == 0:
            skb.add_edge(Edge("w-hub", "SUPPLIED_BY", f"vendor-{i // 3}"))
        if i % 7 == 0:
            skb.add_edge(Edge(f"item-{i:02d}", "NEAR", "w-hub"))
    skb.add_edge(Edge("w-hub", "STORES", "item-00"))  # parallel edge
    skb.add_edge(Edge("w-hub", "NEAR", "w-hub"))  # self-loop
    skb.add_edge(Edge("w-east", "NEAR", "w-hub"))
    skb.add_edge(Edge("w-hub", "NEAR", "w-west"))
    skb.add_edge(Edge("w-east", "STORES", "item-01"))
    skb.add_edge(Edge("w-east", "SUPPLIED_BY", "vendor-0"))
    return skb


def compact_of(skb: SKB, root: Path, dense_edges: int) -> CompactSKB:
    write_compact(skb, root / "skb" / COMPACT_DIR, dense_edges=dense_edges)
    return open_compact(root / "skb")


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> CompactSKB:
    return compact_of(warehouse_skb(), tmp_path_factory.mktemp("grouped"), dense_edges=4)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> CompactSKB:
    """The same SKB with the groups' files removed: an index written before them."""
    root = tmp_path_factory.mktemp("legacy")
    compact_of(warehouse_skb(), root, dense_edges=4)
    for path in (root / "skb" / COMPACT_DIR).glob("*_dense_*.npy"):
        path.unlink()
    return open_compact(root / "skb")


def test_the_hub_and_only_dense_nodes_are_grouped(grouped: CompactSKB) -> None:
    out, inn = grouped._dense["out"], grouped._dense["in"]
    assert out is not None and inn is not None
    hub, east = grouped._index["w-hub"], grouped._index["w-east"]
    assert hub in out.row and east not in out.row  # w-east has 3 outgoing edges, at most dense_edges
    row = out.row[hub]
    rels = out.rel[out.ptr[row] : out.ptr[row + 1]]
    assert list(rels) == sorted(rels) and len(rels) == grouped.degree("w-hub") - len(grouped._in_idx[
        grouped._in_ptr[hub] : grouped._in_ptr[hub + 1]])


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("rel", RELS)
def test_neighbours_agree_with_the_skb_in_memory_in_order(
    grouped: CompactSKB, legacy: CompactSKB, rel: str, direction: Direction
) -> None:
    skb = warehouse_skb()
    keys = grouped.node_keys()
    for key, label in itertools.product(["w-hub", "w-east", "item-00", "vendor-0", "no-such-key"], LABELS):
        expected = skb.neighbor_keys(key, rel, direction, label) if key in skb.nodes else []
        for compact in (grouped, legacy):
            assert compact.neighbor_keys(key, rel, direction, label) == expected, (key, label)
            assert [keys[i] for i in compact.neighbor_ids(key, rel, direction, label)] == expected


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(
    "rels", [None, ["STORES"], ["NEAR"], ["SUPPLIED_BY", "NEAR"], ["NEAR", "NEAR"], ["NO_SUCH_REL"], []]
)
def test_edge_counts_agree_with_the_skb_in_memory(
    grouped: CompactSKB, legacy: CompactSKB, rels: list[str] | None, direction: Direction
) -> None:
    skb = warehouse_skb()
    for key, label in itertools.product(["w-hub", "w-east", "item-00", "item-07", "no-such-key"], LABELS):
        expected = skb.edge_count(key, rels, direction, label)
        assert grouped.edge_count(key, rels, direction, label) == expected, (key, label)
        assert legacy.edge_count(key, rels, direction, label) == expected, (key, label)


def test_groups_keep_edge_order_within_a_relation() -> None:
    # node 0 has edges 0..5 of relations 2, 0, 2, 1, 0, 2
    ptr = np.array([0, 6, 6])
    idx = np.arange(6, dtype=np.int32)
    rel = np.array([2, 0, 2, 1, 0, 2], dtype=np.int32)
    node, gptr, gidx, grel = dense_groups(ptr, idx, rel, dense_edges=4)
    assert node.tolist() == [0] and gptr.tolist() == [0, 6]
    assert gidx.tolist() == [1, 4, 3, 0, 2, 5] and grel.tolist() == [0, 0, 1, 2, 2, 2]


def test_inconsistent_groups_are_a_corrupt_index_with_the_fix(tmp_path: Path) -> None:
    compact_of(warehouse_skb(), tmp_path, dense_edges=4)
    np.save(tmp_path / "skb" / COMPACT_DIR / "out_dense_rel.npy", np.zeros(3, dtype=np.int32))
    with pytest.raises(IndexCorruptError, match="dense-node groups .* rebuild"):
        open_compact(tmp_path / "skb")
