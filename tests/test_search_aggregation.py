"""search_nodes' aggregation query on a real FalkorDB (the Neo4j adapter runs the same text over Bolt in
tests/test_store_neo4j.py): one row per neighbour with its seeds, relation types and edge count, ordered
and limited by the server, checked against the same aggregation computed in Python from the SKB."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from graphs.model import SKB
from graphs.store.aggregate import aggregation_params, aggregation_query
from graphs.store.base import GraphStore
from graphs.store.falkordb_store import FalkorDBStore
from tests.store_fixtures import tiny_skb

pytestmark = pytest.mark.integration

Direction = Literal["out", "in", "both"]


def expected(
    skb: SKB, keys: list[str], rels: list[str] | None, direction: Direction, target: str | None
) -> list[tuple[str, list[str], list[str], int]]:
    """The aggregation in Python: (neighbour, sorted seeds, sorted rel types, edge count), server order."""
    seeds: dict[str, set[str]] = defaultdict(set)
    types: dict[str, set[str]] = defaultdict(set)
    paths: dict[str, int] = defaultdict(int)
    for edge in skb.edges:
        if rels and edge.rel not in rels:
            continue
        ends = []
        if direction in ("out", "both") and edge.src in keys:
            ends.append((edge.src, edge.dst))
        if direction in ("in", "both") and edge.dst in keys:
            ends.append((edge.dst, edge.src))
        for seed, other in ends:
            if target is not None and skb.nodes[other].label != target:
                continue
            seeds[other].add(seed)
            types[other].add(edge.rel)
            paths[other] += 1
    rows = [(k, sorted(seeds[k]), sorted(types[k]), paths[k]) for k in paths]
    return sorted(rows, key=lambda r: (-r[3], r[0]))


def run(
    store: GraphStore,
    label: str,
    keys: list[str],
    rels: list[str] | None,
    direction: Direction,
    target: str | None,
    limit: int = 100,
    weight: str | None = None,
) -> list[list[Any]]:
    cypher = aggregation_query(label, rels, direction, target, weight)
    return store.query(cypher, aggregation_params(keys, rels, limit)).rows


def normalised(rows: list[list[Any]]) -> list[tuple[str, list[str], list[str], int]]:
    """(key, distinct seeds, relation types, edge count); the query repeats a seed per parallel edge."""
    return [(str(k), sorted(set(map(str, s))), sorted(map(str, r)), int(p)) for k, s, r, p, _ in rows]


#: (seed label, keys, rel types, direction, target label): no self-loops seen from both ends
CASES: list[tuple[str, list[str], list[str] | None, Direction, str | None]] = [
    ("Disease", ["OMIM:1"], None, "out", None),  # a parallel edge: SCN1A reached by 2 edges
    ("Disease", ["OMIM:1", "OMIM:2"], ["HAS_PHENOTYPE"], "out", "Phenotype"),
    ("Disease", ["OMIM:1", "OMIM:2"], ["ASSOCIATED_WITH", "HAS_PHENOTYPE"], "out", None),
    ("Disease", ["OMIM:1"], None, "in", None),  # a label and relation type that need quoting
    ("Phenotype", ["HP:1", "HP:2"], ["HAS_PHENOTYPE"], "in", "Disease"),
    ("Gene", ["SCN1A", "CACNA1A"], None, "both", None),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBStore]:
    st = FalkorDBStore(Path(tmp_path_factory.mktemp("agg")), graph_name="agg")
    st.load(tiny_skb())
    yield st
    st.close()


@pytest.mark.parametrize(("label", "keys", "rels", "direction", "target"), CASES)
def test_aggregation_matches_python(
    store: FalkorDBStore,
    label: str,
    keys: list[str],
    rels: list[str] | None,
    direction: Direction,
    target: str | None,
) -> None:
    rows = run(store, label, keys, rels, direction, target)
    assert normalised(rows) == expected(tiny_skb(), keys, rels, direction, target)


def test_parallel_edges_count_as_paths_of_one_neighbour(store: FalkorDBStore) -> None:
    rows = normalised(run(store, "Disease", ["OMIM:1"], ["ASSOCIATED_WITH"], "out", None))
    assert rows == [("SCN1A", ["OMIM:1"], ["ASSOCIATED_WITH"], 2)]


def test_limit_and_order_are_applied_by_the_server(store: FalkorDBStore) -> None:
    full = normalised(run(store, "Disease", ["OMIM:1", "OMIM:2"], None, "out", None))
    assert full[0][0] == "SCN1A"  # two edges: first
    assert normalised(run(store, "Disease", ["OMIM:1", "OMIM:2"], None, "out", None, limit=2)) == full[:2]


def test_weight_property_sums_numbers_and_counts_missing_as_zero(store: FalkorDBStore) -> None:
    rows = run(store, "Gene", ["SCN1A"], None, "both", None, weight="score")
    assert [(r[0], r[4]) for r in rows] == [("OMIM:1", 0.0)]  # edges carry no `score`: zero, not an error
    none = run(store, "Gene", ["SCN1A"], None, "both", None)
    assert none[0][4] is None
