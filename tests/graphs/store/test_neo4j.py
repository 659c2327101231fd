"""Neo4jStore over real Bolt: an in-process ArcadeDB server with its Neo4j-compatible Bolt plugin.

ArcadeDB reports Neo4j 5.26 compatibility but does not enforce READ access mode nor
transaction timeouts, which is exactly why the store runs the static guard and a
client-side timeout; these tests pin both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphs.errors import ConfigError, CypherValidationError, ReadOnlyViolationError, StoreUnavailableError
from graphs.skb.model import SKB, Node
from graphs.store import open_store
from graphs.store.neo4j_store import Neo4jStore
from tests.store_fixtures import ARCADEDB_PASSWORD, free_port, start_arcadedb, tiny_skb

pytestmark = pytest.mark.integration

PASSWORD = ARCADEDB_PASSWORD
DATABASE = "skbtest"

@pytest.fixture(scope="module")
def bolt_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("arcadedb_embedded")
    server = start_arcadedb(tmp_path_factory.mktemp("arcadedb"), [DATABASE])
    try:
        yield server.uri
    finally:
        server.stop()


@pytest.fixture(scope="module")
def store(bolt_uri: str) -> Iterator[Neo4jStore]:
    st = Neo4jStore(bolt_uri, "root", PASSWORD, DATABASE, timeout_s=10)
    st.load(tiny_skb(), batch_size=3)
    yield st
    st.close()


def test_the_server_runs_outside_the_test_process(bolt_uri: str) -> None:
    """A JVM in the test process crashes it once pytest's faulthandler is disabled (``ArcadeDBChild``)."""
    import sys

    assert bolt_uri.startswith("bolt://")
    jpype = sys.modules.get("jpype")
    assert jpype is None or not jpype.isJVMStarted()


def _pairs(triples: list) -> Counter[tuple[str, str, str]]:
    return Counter((t.src, t.rel, t.dst) for t in triples)


def test_load_counts_and_values(store: Neo4jStore) -> None:
    skb = tiny_skb()
    assert store.count_nodes() == len(skb.nodes)
    assert store.query("MATCH ()-[r]->() RETURN count(r) AS c").rows == [[len(skb.edges)]]
    res = store.query("MATCH (n:Disease {key: $k}) RETURN n.name AS name, n.synonyms AS syn, n", {"k": "OMIM:1"})
    assert res.columns == ["name", "syn", "n"]
    name, syn, node = res.rows[0]
    assert (name, syn) == ("Epilepsy", ["Seizure disorder", "Fits"])
    assert node["properties"]["key"] == "OMIM:1" and "extra" not in node["properties"]
    assert not store.notes  # every key index statement was accepted


def test_reload_replaces_contents(bolt_uri: str, store: Neo4jStore) -> None:
    small = SKB("small")
    small.add_node(Node("only", "Thing", {"name": "only"}))
    store.load(small)
    assert store.labels() == ["Thing"]  # emptied types (ArcadeDB keeps them in db.labels()) are left out
    assert store.schema().relations == []
    calls: list[tuple[int, int]] = []
    store.load(tiny_skb(), batch_size=4, progress=lambda d, t: calls.append((d, t)))
    total = len(tiny_skb().nodes) + len(tiny_skb().edges)
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert store.count_nodes() == len(tiny_skb().nodes)


def test_query_params_and_row_cap(store: Neo4jStore) -> None:
    res = store.query(
        "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p) WHERE d.key IN $keys RETURN p.name AS name ORDER BY name",
        {"keys": ["OMIM:1", "OMIM:2"]},
    )
    assert [r[0] for r in res.rows] == ["Headache", "Seizure", "Visual aura"]
    capped = store.query("UNWIND range(1, 30) AS x RETURN x", max_rows=5)
    assert [r[0] for r in capped.rows] == [1, 2, 3, 4, 5] and capped.truncated
    assert not store.query("UNWIND range(1, 5) AS x RETURN x", max_rows=5).truncated


def test_guard_refuses_writes_that_bolt_read_mode_would_allow(store: Neo4jStore) -> None:
    for write in ("CREATE (x:Disease {key: 'evil'})", "MATCH (n) DETACH DELETE n", "MATCH (n:Gene) SET n.x = 1"):
        with pytest.raises(ReadOnlyViolationError):
            store.query(write)
    assert store.count_nodes() == len(tiny_skb().nodes)
    assert store.query("MATCH (n:Gene) WHERE n.x IS NOT NULL RETURN count(n)").rows == [[0]]


def test_parameter_and_resource_guards_run_before_the_server(
    store: Neo4jStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same guarded query path as FalkorDB (CypherStore.query): bad values and resource
    bombs never reach the Bolt server (ArcadeDB ignores transaction timeouts)."""
    from graphs.store.cypher_guard import ParameterValueError, QueryTooComplexError

    def no_round_trip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the query reached the server")

    monkeypatch.setattr(store, "_run_query", no_round_trip)
    with pytest.raises(ParameterValueError):
        store.query("RETURN $p AS p", {"p": 2**70})
    with pytest.raises(QueryTooComplexError):
        store.query("RETURN size(range(1, 1000000000)) AS n")
    with pytest.raises(CypherValidationError, match="timeout_ms must be positive"):
        store.query("RETURN 1", timeout_ms=0)


def test_server_errors_are_validation_errors(store: Neo4jStore) -> None:
    with pytest.raises(CypherValidationError, match="rejected"):
        store.query("MATCH (n RETURN n")


def test_neighbors_with_filters_and_parallel_edges(store: Neo4jStore) -> None:
    out = store.neighbors(["OMIM:1"], direction="out")
    assert _pairs(out) == Counter({("OMIM:1", "ASSOCIATED_WITH", "SCN1A"): 2, ("OMIM:1", "HAS_PHENOTYPE", "HP:1"): 1})
    assert sorted(t.props["source"] for t in out if t.rel == "ASSOCIATED_WITH") == ["omim", "orphanet"]
    assert _pairs(store.neighbors(["OMIM:1"], direction="in")) == Counter({("X:1", "ODD REL", "OMIM:1"): 1})
    phen = store.neighbors(["OMIM:2"], rel_types=["HAS_PHENOTYPE"], direction="out", target_label="Phenotype")
    assert _pairs(phen) == Counter({("OMIM:2", "HAS_PHENOTYPE", "HP:2"): 1, ("OMIM:2", "HAS_PHENOTYPE", "HP:3"): 1})
    loops = store.neighbors(["HP:2", "HP:3"], rel_types=["IS_A"], direction="both")
    assert _pairs(loops) == Counter({("HP:2", "IS_A", "HP:2"): 1, ("HP:3", "IS_A", "HP:2"): 1})
    assert len(store.neighbors(["OMIM:1", "OMIM:2"], limit=3)) == 3
    with pytest.raises(CypherValidationError, match="HAS_PHENOTYPE"):
        store.neighbors(["OMIM:1"], rel_types=["HAS_PHENOTYPES"])


def test_schema_matches_the_skb(store: Neo4jStore) -> None:
    schema = store.schema()
    expected = tiny_skb().schema()
    assert {(i.label, i.count) for i in schema.labels} == {(i.label, i.count) for i in expected.labels}
    assert {(r.rel, r.src_label, r.dst_label, r.count) for r in schema.relations} == {
        (r.rel, r.src_label, r.dst_label, r.count) for r in expected.relations
    }
    phenotype = next(i for i in schema.labels if i.label == "Phenotype")
    assert {p.name: p.type for p in phenotype.properties} == {"key": "STRING", "name": "STRING", "depth": "INTEGER"}


def test_client_side_timeout_when_server_ignores_it(store: Neo4jStore) -> None:
    from graphs.errors import QueryTimeoutError

    slow = "UNWIND range(1, 3000) AS x UNWIND range(1, 3000) AS y RETURN count(*)"
    impatient = Neo4jStore(store.uri, "root", PASSWORD, DATABASE, client_timeout_grace_s=0.05)
    try:
        with pytest.raises(QueryTimeoutError, match="1 ms"):
            impatient.query(slow, timeout_ms=1)
    finally:
        impatient.close()


def test_unreachable_uri_names_uri_and_env_vars() -> None:
    uri = f"bolt://127.0.0.1:{free_port()}"
    with pytest.raises(StoreUnavailableError) as info:
        Neo4jStore(uri, "neo4j", "pw", connection_timeout_s=2)
    assert uri in str(info.value) and "NEO4J_URI" in str(info.value)


def test_wrong_password_is_a_config_error(bolt_uri: str) -> None:
    with pytest.raises(ConfigError, match="NEO4J_PASSWORD"):
        Neo4jStore(bolt_uri, "root", "wrong-password", DATABASE)


def test_from_env_and_open_store(
    bolt_uri: str, store: Neo4jStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("NEO4J_URI", "NEO4J_USER", "NEO4J_USERNAME", "NEO4J_PASSWORD", "NEO4J_DATABASE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="NEO4J_URI, NEO4J_USER, NEO4J_PASSWORD"):
        Neo4jStore.from_env()
    monkeypatch.setenv("NEO4J_URI", bolt_uri)
    monkeypatch.setenv("NEO4J_USER", "root")
    monkeypatch.setenv("NEO4J_PASSWORD", PASSWORD)
    monkeypatch.setenv("NEO4J_DATABASE", DATABASE)
    with open_store("neo4j", tmp_path) as st:
        assert isinstance(st, Neo4jStore)
        assert st.count_nodes() == len(tiny_skb().nodes)


def test_labels_fall_back_to_match_when_db_labels_is_missing(
    store: Neo4jStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_read = store._read

    def without_db_labels(cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        if cypher.startswith("CALL db.labels"):
            raise CypherValidationError("There is no procedure with the name `db.labels` registered")
        return real_read(cypher, params)

    monkeypatch.setattr(store, "_read", without_db_labels)
    store._invalidate()
    try:
        assert store.labels() == sorted(i.label for i in tiny_skb().schema().labels)
    finally:
        monkeypatch.undo()
        store._invalidate()


def test_search_nodes_aggregation_query_runs_over_bolt(store: Neo4jStore) -> None:
    """The same aggregation text search_nodes sends to FalkorDB, over Bolt: same rows, same order."""
    from tests.store_fixtures import CASES, expected, normalised, run

    for label, keys, rels, direction, target in CASES:
        rows = run(store, label, keys, rels, direction, target)
        assert normalised(rows) == expected(tiny_skb(), keys, rels, direction, target), (label, keys, direction)
    limited = run(store, "Disease", ["OMIM:1", "OMIM:2"], None, "out", None, limit=2)
    assert [r[0] for r in limited] == ["SCN1A", "CACNA1A"]
    weighted = run(store, "Gene", ["SCN1A"], None, "both", None, weight="score")
    assert [(r[0], r[4]) for r in weighted] == [("OMIM:1", 0.0)]


def test_a_membership_check_runs_over_bolt(store: Neo4jStore) -> None:
    """``among`` (search_nodes' membership check) over Bolt: only the listed neighbours, as in Python."""
    from tests.store_fixtures import expected, normalised

    rows = store.aggregate_neighbors(
        "Phenotype", ["HP:1", "HP:2"], rel_types=["HAS_PHENOTYPE"], direction="in", target_label="Disease",
        limit=50, among=["OMIM:2", "no-such-key"],
    )
    full = expected(tiny_skb(), ["HP:1", "HP:2"], ["HAS_PHENOTYPE"], "in", "Disease")
    assert normalised(rows) == [row for row in full if row[0] == "OMIM:2"]
