"""Hubs cost a bounded amount: ``search_nodes`` expands a key whose neighbourhood is larger than
``HUB_EDGES`` from a sample of that many edges (on a real FalkorDB), says so, and expands every other
key exactly as before; ``edge_count`` (what decides) agrees between the in-memory and the compact SKB
and with what the store reads. The graph is neutral (labels and relations of no dataset)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.messages import ToolMessage

import tools.search_nodes as search_nodes_module
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import CypherValidationError
from graphs.skb.compact import open_compact
from graphs.skb.model import SKB, Edge, Node
from graphs.store.falkordb_store import FalkorDBStore
from tools.results import Neighborhood
from tools.search_nodes import make_search_nodes

pytestmark = pytest.mark.integration

HUB_LEAVES = 120
SMALL_LEAVES = 6


def hub_skb() -> SKB:
    """One ``Station`` hub linked to 120 ``Parcel`` nodes, a small station linked to 6 of them (and to
    one parcel twice: a parallel edge), a self-loop, and a second relation into the hub."""
    skb = SKB("depot")
    skb.add_node(Node("st-hub", "Station", {"name": "central sorting station"}))
    skb.add_node(Node("st-small", "Station", {"name": "village post station"}))
    for i in range(HUB_LEAVES):
        skb.add_node(Node(f"p{i:03d}", "Parcel", {"name": f"parcel {i} of {'red' if i % 2 else 'blue'} crates"}))
    for i in range(HUB_LEAVES):
        skb.add_edge(Edge(f"p{i:03d}", "ROUTED_VIA", "st-hub"))
    for i in range(SMALL_LEAVES):
        skb.add_edge(Edge(f"p{i:03d}", "ROUTED_VIA", "st-small"))
    skb.add_edge(Edge("p000", "ROUTED_VIA", "st-small"))  # parallel edge
    skb.add_edge(Edge("st-small", "FEEDS", "st-hub"))
    skb.add_edge(Edge("st-hub", "FEEDS", "st-hub"))  # self-loop
    return skb


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hub") / "index"
    build_index(hub_skb(), path, IndexConfig(dataset="depot", embedder="hash:32"))
    return path


@pytest.fixture(scope="module")
def bundle(index_dir: Path) -> Iterator[IndexBundle]:
    b = IndexBundle.open(index_dir)
    yield b
    b.close()


def call(bundle: IndexBundle, args: dict[str, Any]) -> tuple[Neighborhood, str]:
    tool = make_search_nodes(bundle, lambda: "parcels of red crates routed via the central sorting station")
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage) and isinstance(message.artifact, Neighborhood)
    return message.artifact, str(message.content)


Direction = Literal["out", "in", "both"]
COUNT_CASES: list[tuple[str, list[str] | None, Direction, str | None]] = [
    ("st-hub", None, "both", None),
    ("st-hub", ["ROUTED_VIA"], "in", "Parcel"),
    ("st-hub", ["FEEDS"], "both", None),  # the self-loop counts once
    ("st-hub", ["FEEDS"], "in", "Station"),
    ("st-small", ["ROUTED_VIA"], "in", None),  # the parallel edge counts twice
    ("st-small", ["ROUTED_VIA", "FEEDS"], "both", "Station"),
    ("st-small", ["NO_SUCH_REL"], "both", None),
    ("p000", None, "out", "NoSuchLabel"),
    ("no-such-key", None, "both", None),
]


@pytest.mark.parametrize(("key", "rels", "direction", "label"), COUNT_CASES)
def test_edge_count_agrees_between_skb_compact_and_store(
    bundle: IndexBundle, index_dir: Path, key: str, rels: list[str] | None, direction: Direction, label: str | None
) -> None:
    skb = hub_skb()
    count = skb.edge_count(key, rels, direction, label)
    assert open_compact(index_dir / "skb").edge_count(key, rels, direction, label) == count
    if key in skb.nodes and (rels is None or set(rels) <= {"ROUTED_VIA", "FEEDS"}) and label != "NoSuchLabel":
        rows = bundle.store.aggregate_neighbors(
            skb.nodes[key].label, [key], rel_types=rels, direction=direction, target_label=label, limit=1000
        )
        assert sum(r.paths for r in rows) == count  # the count is what the store would read


def test_store_reads_at_most_max_edges_of_a_hub(tmp_path: Path) -> None:
    store = FalkorDBStore(tmp_path / "db", graph_name="hub")
    try:
        store.load(hub_skb())
        full = store.aggregate_neighbors("Station", ["st-hub"], rel_types=["ROUTED_VIA"], direction="in", limit=1000)
        assert len(full) == HUB_LEAVES
        sample = store.aggregate_neighbors(
            "Station", ["st-hub"], rel_types=["ROUTED_VIA"], direction="in", limit=1000, max_edges=25
        )
        assert len(sample) == 25 and {r.key for r in sample} <= {r.key for r in full}
        both = store.aggregate_neighbors(
            "Station", ["st-hub", "st-small"], rel_types=["ROUTED_VIA"], direction="in", limit=1000, max_edges=10
        )
        assert sum(r.paths for r in both) == 10  # the bound is on edges read, over all keys of the query
        with pytest.raises(CypherValidationError, match="max_edges"):
            store.aggregate_neighbors("Station", ["st-hub"], limit=10, max_edges=0)
    finally:
        store.close()


def test_a_hub_is_expanded_from_a_sample_and_says_so(bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch) -> None:
    args = {"keys": ["st-hub", "st-small"], "rel_types": ["ROUTED_VIA"], "direction": "in", "limit": 200}
    exact, exact_text = call(bundle, args)
    assert not exact.sampled and exact.sample_edges is None and "sampled" not in json.loads(exact_text)
    assert len(exact.neighbors) == HUB_LEAVES
    assert "sampled" not in exact.provenance.query

    monkeypatch.setattr(search_nodes_module, "HUB_EDGES", 40)
    result, text = call(bundle, args)
    assert result.sampled == {"st-hub": HUB_LEAVES} and result.sample_edges == 40
    assert result.truncated
    assert "sampled st-hub: 40 of 120 edges" in result.provenance.query
    shown = json.loads(text)
    assert shown["sampled"]["edges"] == {"st-hub": HUB_LEAVES} and shown["sampled"]["edges_read_per_key"] == 40
    # the small key (below the bound) is expanded whole: each of its parcels is there, with both seeds
    # where the hub's sample reached it too, and its parallel edge counted
    by_key = {n.key: n for n in result.neighbors}
    small = {f"p{i:03d}" for i in range(SMALL_LEAVES)}
    assert small <= set(by_key)
    assert all("st-small" in by_key[k].seeds for k in small)
    hub_reached = [n for n in result.neighbors if "st-hub" in n.seeds]
    assert len(hub_reached) == 40
    assert by_key["p000"].paths == 2 + ("st-hub" in by_key["p000"].seeds)
    assert {n.key for n in result.neighbors} <= {n.key for n in exact.neighbors}


def test_keys_below_the_bound_expand_exactly_as_before(bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_nodes_module, "HUB_EDGES", 40)
    result, _ = call(bundle, {"keys": ["st-small"], "rel_types": ["ROUTED_VIA"], "direction": "in", "limit": 50})
    assert not result.sampled
    assert sorted((n.key, n.paths) for n in result.neighbors) == sorted(
        [(f"p{i:03d}", 1) for i in range(1, SMALL_LEAVES)] + [("p000", 2)]
    )
    # a hub only by other relations is not sampled for the one it has few edges of
    feeds, _ = call(bundle, {"keys": ["st-hub"], "rel_types": ["FEEDS"], "direction": "both", "limit": 50})
    assert not feeds.sampled and {n.key for n in feeds.neighbors} == {"st-small", "st-hub"}
