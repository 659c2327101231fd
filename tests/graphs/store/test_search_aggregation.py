"""search_nodes' aggregation query on a real FalkorDB (the Neo4j adapter runs the same text over Bolt in
tests/graphs/store/test_neo4j.py): one row per neighbour with its seeds, relation types and edge count, ordered
and limited by the server, checked against the same aggregation computed in Python from the SKB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphs.errors import CypherValidationError, ReadOnlyViolationError
from graphs.store.aggregate import aggregation_params, aggregation_query
from graphs.store.falkordb_store import FalkorDBStore
from tests.store_fixtures import CASES, Direction, expected, normalised, run, tiny_skb

pytestmark = pytest.mark.integration

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
    assert [(r.key, r.weight) for r in rows] == [("OMIM:1", 0.0)]  # edges carry no `score`: zero, not an error
    none = run(store, "Gene", ["SCN1A"], None, "both", None)
    assert none[0].weight is None


def test_columns_the_caller_knows_are_not_returned(store: FalkorDBStore) -> None:
    """One relation type and no weight: the server returns key, seeds, paths only (the rest is filled in)."""
    cypher = aggregation_query("Disease", ["HAS_PHENOTYPE"], "out", "Phenotype")
    result = store.query(cypher, aggregation_params(["OMIM:1"], ["HAS_PHENOTYPE"], 10))
    assert result.columns == ["key", "seeds", "paths"]
    rows = run(store, "Disease", ["OMIM:1"], ["HAS_PHENOTYPE"], "out", "Phenotype", limit=10)
    assert [r.key for r in rows] == [str(r[0]) for r in result.rows]
    assert all(r.rels == ["HAS_PHENOTYPE"] and r.weight is None for r in rows)
    both = aggregation_query("Disease", None, "out", None, "score")
    assert store.query(both, aggregation_params(["OMIM:1"], None, 10)).columns == [
        "key",
        "seeds",
        "paths",
        "rels",
        "weight",
    ]


def test_unknown_names_are_errors_naming_the_valid_ones(store: FalkorDBStore) -> None:
    with pytest.raises(CypherValidationError, match="valid types"):
        run(store, "Disease", ["OMIM:1"], ["NOPE"], "out", None)
    with pytest.raises(CypherValidationError, match="valid labels"):
        run(store, "Disease", ["OMIM:1"], None, "out", "Nope")
    with pytest.raises(CypherValidationError, match="valid labels"):
        run(store, "Nope` {key: 1}) DETACH DELETE n //", ["OMIM:1"], None, "out", None)
    assert run(store, "Disease", ["OMIM:1"], None, "out", None, limit=0) == []


def test_aggregation_skips_the_tokenizer_but_not_the_read_only_server(
    store: FalkorDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store-built text does not pay the guard's tokenizer; the server's read-only command still
    refuses a write if one ever got into the text."""
    from graphs.store import base

    def tokenizer_called(*_: Any, **__: Any) -> None:
        raise AssertionError("the aggregation query went through the static guard")

    monkeypatch.setattr(base, "check_read_only", tokenizer_called)
    monkeypatch.setattr(base, "check_resources", tokenizer_called)
    assert run(store, "Disease", ["OMIM:1"], None, "out", None)
    with pytest.raises(ReadOnlyViolationError):
        store._run_query("CREATE (:Disease {key: 'x'})", {}, 1000, 10)


def test_one_key_is_aggregated_without_a_seeds_list(store: FalkorDBStore) -> None:
    """From one key every neighbour's seeds are that key (once per edge): the server does not build the
    list, the store fills it in, parallel edges included."""
    cypher = aggregation_query("Disease", None, "out", None, single_seed=True)
    result = store.query(cypher, aggregation_params(["OMIM:1"], None, 10))
    assert result.columns == ["key", "paths", "rels"]
    rows = {r.key: r for r in run(store, "Disease", ["OMIM:1"], None, "out", None)}
    assert rows["SCN1A"].seeds == ["OMIM:1", "OMIM:1"] and rows["SCN1A"].paths == 2  # a parallel edge
    assert all(r.seeds == ["OMIM:1"] * r.paths for r in rows.values())
    assert run(store, "Disease", ["OMIM:1", "OMIM:1"], None, "out", None) == list(rows.values())
