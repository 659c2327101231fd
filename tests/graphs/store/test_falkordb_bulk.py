"""Loading a graph into FalkorDB with the binary bulk format (``graphs.store.falkordb_bulk``).

A Cypher load parses one statement per (relation, source label, target label) pattern: a graph with
thousands of relation names spent most of its build in the parser. The bulk load must store exactly
what the Cypher load stores (ids, labels, types, properties with their types and order), fall back to
Cypher for what the format cannot carry, and never be open to a served index's server.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from graphs.errors import CypherValidationError
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.store import falkordb_bulk
from graphs.store.falkordb_store import FalkorDBStore
from graphs.store.props import edge_rows_by_pattern, node_rows_by_label
from tests.store_fixtures import tiny_skb

pytestmark = pytest.mark.integration


def many_relations_skb(relations: int, seed: int = 3) -> SKB:
    """``relations`` relation names over a dozen labels, each relation between several label pairs."""
    rng = random.Random(seed)
    labels = [f"Kind {i}" for i in range(12)]
    skb = SKB("many", node_types=[NodeType(label=lab) for lab in labels])
    keys = []
    for i in range(600):
        key = f"thing-{i}"
        skb.add_node(Node(key, labels[i % len(labels)], {"name": f"Thing {i}", "rank": i}))
        keys.append(key)
    for r in range(relations):
        for _ in range(4):
            props = {"weight": round(rng.random(), 6)} if r % 3 == 0 else {}
            skb.add_edge(Edge(rng.choice(keys), f"links to {r}", rng.choice(keys), props))
    skb.validate()
    return skb


def _typed(value: Any) -> Any:
    """A value with its type spelt out (1 and 1.0 and True compare equal in Python, not in the store)."""
    if isinstance(value, list):
        return ["list", [_typed(v) for v in value]]
    if isinstance(value, dict):
        return ["map", [(k, _typed(v)) for k, v in value.items()]]
    return [type(value).__name__, value]


def contents(store: FalkorDBStore) -> dict[str, Any]:
    """Everything the store holds, by id: labels, types, endpoints, properties in stored order and type."""
    graph = store._graph()

    def rows(cypher: str) -> list[list[Any]]:
        return [list(r) for r in graph.ro_query(cypher).result_set]

    return {
        "nodes": [
            (r[0], r[1], _typed(dict(r[2])))
            for r in rows("MATCH (n) RETURN id(n), labels(n), properties(n) ORDER BY id(n)")
        ],
        "edges": [
            (r[0], r[1], r[2], r[3], _typed(dict(r[4])))
            for r in rows("MATCH (a)-[e]->(b) RETURN id(e), type(e), id(a), id(b), properties(e) ORDER BY id(e)")
        ],
        "labels": rows("CALL db.labels()"),
        "types": rows("CALL db.relationshipTypes()"),
        "keys": rows("CALL db.propertyKeys()"),
        "indexes": sorted(map(str, rows("CALL db.indexes() YIELD label, properties RETURN label, properties"))),
    }


@pytest.fixture()
def cypher_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Loads in this test take the Cypher path (the reference the bulk path must match)."""
    monkeypatch.setattr(FalkorDBStore, "_load_native", lambda self, *args: False)
    yield


def _bulk_commands(store: FalkorDBStore) -> tuple[int, int]:
    """(GRAPH.BULK calls, GRAPH.QUERY calls) the server has answered since it started."""
    conn = store.server.connection()
    try:
        stats = conn.info("commandstats")
    finally:
        conn.close()
    return (int(stats.get("cmdstat_graph.BULK", {}).get("calls", 0)),
            int(stats.get("cmdstat_graph.QUERY", {}).get("calls", 0)))  # fmt: skip


def _load(tmp_path: Path, skb: SKB, name: str, **kw: Any) -> tuple[dict[str, Any], tuple[int, int]]:
    with FalkorDBStore(tmp_path / name, **kw) as store:
        store.load(skb)
        return contents(store), _bulk_commands(store)


def test_a_graph_with_hundreds_of_relation_names_loads_every_edge_typed_in_a_few_commands(tmp_path: Path) -> None:
    skb = many_relations_skb(300)
    with FalkorDBStore(tmp_path / "falkordb") as store:
        store.load(skb)
        stored = sorted(
            (r[0], r[1], r[2], r[3].get("weight"))
            for r in store._read("MATCH (a)-[e]->(b) RETURN a.key, type(e), b.key, properties(e)")
        )
        assert stored == sorted((e.src, e.rel, e.dst, e.props.get("weight")) for e in skb.edges)
        assert store.relationship_types() == sorted({e.rel for e in skb.edges})
        assert len(store.relationship_types()) == 300
        # typed lookups through the key index find the edges of one relation name
        one = skb.edges[5]
        found = store.neighbors([one.src], rel_types=[one.rel], direction="out")
        assert (one.src, one.rel, one.dst) in {(t.src, t.rel, t.dst) for t in found}
        indexed = {r[0] for r in store._read("CALL db.indexes() YIELD label, properties RETURN label, properties")
                   if r[1] == ["key"]}  # fmt: skip
        assert indexed == {n.label for n in skb.nodes.values()}
        bulk, queries = _bulk_commands(store)
    assert bulk == 1
    # one index per label and a few checks, not a statement per relation pattern (about 1,100 here)
    assert queries < 12 + 20


def test_a_refused_key_index_is_reported_with_its_label(tmp_path: Path) -> None:
    with FalkorDBStore(tmp_path / "falkordb") as store:
        store._create_key_indexes(["First Kind"])
        with pytest.raises(CypherValidationError, match="Second Kind"):
            store._create_key_indexes(["Second Kind", "Second Kind"])  # the second is refused: already indexed
        indexed = sorted(r[0] for r in store._read("CALL db.indexes() YIELD label RETURN label"))
        assert indexed == ["First Kind", "Second Kind"]


@pytest.mark.parametrize("make", [tiny_skb, lambda: many_relations_skb(40)], ids=["shapes", "many-relations"])
def test_the_bulk_load_stores_exactly_what_the_cypher_load_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    skb = make()
    # property maps of one label in different orders and with different keys, and every value type
    skb.add_node(Node("v:1", "Value Kinds", {"name": "first", "flag": True, "n": -(2**63), "x": 1.0,
                                             "words": ["a", "b"], "nums": [1, 2.5], "bools": [True, False],
                                             "empty": [], "text": "zero\x01width\u200b é 漢"}))  # fmt: skip
    skb.add_node(Node("v:2", "Value Kinds", {"x": 2, "name": "second", "flag": False, "n": 2**63 - 1}))
    skb.add_node(Node("v:3", "Value Kinds", {"name": "third", "x": 3.5}))
    skb.add_edge(Edge("v:1", "HAS", "v:2", {"at": 1.5, "why": ["x"], "ok": True}))
    skb.add_edge(Edge("v:3", "HAS", "v:2", {"ok": False, "at": 2, "ns:part": "a name with a colon"}))
    skb.add_node(Node("ü:1", "Ärzte Verzeichnis", {"name": "ärztin", "名前": "名"}))
    # optional properties: rows that share a header (NULL for the missing ones) and rows that cannot
    for i, props in enumerate([{"name": "a"}, {"name": "b", "later": 1}, {"name": "c"}, {"later": 2},
                               {"early": 0, "name": "d"}, {"name": "e", "later": 3, "last": [1.5]}, {}]):  # fmt: skip
        skb.add_node(Node(f"opt:{i}", "Optional Kind", props))
        skb.add_edge(Edge(f"opt:{i}", "HAS", "v:1", props))
    skb.add_edge(Edge("ü:1", "связь с", "v:1"))
    tokens = _tokens(skb)
    bulk, (bulk_calls, _) = _load(tmp_path, skb, "bulk")
    assert bulk_calls == 1
    monkeypatch.setattr(FalkorDBStore, "_load_native", lambda self, *args: False)
    cypher, (cypher_calls, _) = _load(tmp_path, skb, "cypher")
    assert cypher_calls == 0
    assert bulk == cypher
    assert len(bulk["nodes"]) == len(skb.nodes) and len(bulk["edges"]) == len(skb.edges)
    optional = [token for is_edge, token, _ in tokens if not is_edge and token.startswith(b"Optional Kind\x00")]
    # {name}, {name, later}, {name}, {later} share a token; {early, name} starts a second; {name, later, last}, {} a third
    assert len(optional) == 3


@pytest.mark.parametrize(
    "odd",
    [
        lambda skb: skb.add_edge(Edge("OMIM:1", "part:of", "HP:1")),  # the format's label separator
        lambda skb: skb.add_node(Node("t:1", "Time:Zone", {"name": "x"})),
    ],
    ids=["colon-in-relation", "colon-in-label"],
)
def test_what_the_bulk_format_cannot_carry_loads_with_cypher(tmp_path: Path, odd: Any) -> None:
    skb = tiny_skb()
    odd(skb)
    with pytest.raises(falkordb_bulk.BulkUnsupported):
        _tokens(skb)
    stored, (bulk_calls, _) = _load(tmp_path, skb, "falkordb")
    assert bulk_calls == 0
    assert len(stored["nodes"]) == len(skb.nodes) and len(stored["edges"]) == len(skb.edges)
    assert sorted(r[0] for r in stored["types"]) == sorted({e.rel for e in skb.edges})
    assert sorted(r[0] for r in stored["labels"]) == sorted({n.label for n in skb.nodes.values()})


def test_text_that_is_not_utf8_is_refused_as_the_cypher_load_refuses_it(tmp_path: Path) -> None:
    skb = tiny_skb()
    skb.add_node(Node("lone", "Disease", {"name": "half a pair \ud800"}))
    with pytest.raises(falkordb_bulk.BulkUnsupported, match="not UTF-8"):
        _tokens(skb)
    with FalkorDBStore(tmp_path / "falkordb") as store:
        with pytest.raises(CypherValidationError, match="surrogates not allowed"):
            store.load(skb)
        assert _bulk_commands(store)[0] == 0


def _tokens(skb: SKB) -> list[falkordb_bulk.Token]:
    ids: dict[str, int] = {}
    nodes = list(falkordb_bulk.node_tokens(node_rows_by_label(skb), ids))
    return nodes + list(falkordb_bulk.edge_tokens(edge_rows_by_pattern(skb), ids))


def test_large_graphs_are_sent_in_several_bounded_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(falkordb_bulk, "TOKEN_BYTES", 2_000)
    monkeypatch.setattr(falkordb_bulk, "COMMAND_BYTES", 6_000)
    skb = many_relations_skb(60)
    assert max(len(token) for _, token, _ in _tokens(skb)) < 2_000 + 200  # cut after the row that crossed it
    split, (calls, _) = _load(tmp_path, skb, "split")
    assert calls >= 5
    # a name the format cannot carry, met after several commands went out: the load starts again in Cypher
    odd = many_relations_skb(60)
    odd.add_edge(Edge("thing-1", "zz:last", "thing-2"))
    restarted, (odd_calls, _) = _load(tmp_path, odd, "restarted")
    assert odd_calls >= 3
    monkeypatch.setattr(FalkorDBStore, "_load_native", lambda self, *args: False)
    reference, _ = _load(tmp_path, skb, "cypher")
    assert split == reference
    odd_reference, _ = _load(tmp_path, odd, "odd-cypher")
    assert restarted == odd_reference
    assert len(restarted["edges"]) == len(odd.edges)


def test_an_empty_graph_loads(tmp_path: Path) -> None:
    with FalkorDBStore(tmp_path / "falkordb") as store:
        store.load(SKB("empty", node_types=[]))
        assert store.count_nodes() == 0
        assert _bulk_commands(store)[0] == 0


def test_a_served_index_server_refuses_the_bulk_command_and_still_loads_with_cypher(tmp_path: Path) -> None:
    """GRAPH.BULK trusts its bytes: only a building server (persist=True) lets our user send it."""
    skb = tiny_skb()
    with FalkorDBStore(tmp_path / "served", persist=False) as store:
        conn = store.server.connection()
        try:
            with pytest.raises(redis.exceptions.NoPermissionError):
                conn.execute_command("GRAPH.BULK", "other", "BEGIN", "0", "0", "0", "0")
        finally:
            conn.close()
        store.load(skb)
        assert _bulk_commands(store)[0] == 0
        assert store.count_nodes() == len(skb.nodes)
        assert len(store._read("MATCH ()-[e]->() RETURN e")) == len(skb.edges)


class _ServerWithANodeAlready(FalkorDBStore):
    """A server whose graph has a node before the bulk load (ids would not start at 0): stands in for a
    FalkorDB that numbers bulk-loaded entities otherwise than in creation order."""

    seeded = False

    def _create_key_indexes(self, labels: Any) -> None:
        super()._create_key_indexes(labels)
        if not self.seeded:
            self.seeded = True
            self._write("CREATE (:`Stray Kind` {key: 'stray'})")


def test_a_bulk_load_that_comes_out_other_than_written_is_redone_with_cypher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skb = many_relations_skb(30)
    with _ServerWithANodeAlready(tmp_path / "odd") as store:
        store.load(skb)
        assert _bulk_commands(store)[0] == 1  # tried, found wrong, and replaced
        redone = contents(store)
    monkeypatch.setattr(FalkorDBStore, "_load_native", lambda self, *args: False)
    reference, _ = _load(tmp_path, skb, "cypher")
    assert redone == reference
