"""A build that consumes its SKB (``build_index(..., consume=True)``, what ``skb index`` does) empties it once the
graph's files are written and reads the compact SKB it wrote for the later stages: the index is the one a build
that keeps the SKB makes, file for file where a build is reproducible, and the graph store holds the same graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from graphs.build import IndexConfig, build_index
from graphs.loaders.hpo import load_hpo
from graphs.manifest import Manifest
from graphs.sage.edges import SimilarityConfig
from graphs.skb import state
from graphs.skb.compact import CompactSKB
from graphs.store.falkordb_store import FalkorDBStore
from graphs.store.load_process import StoreLoad
from tests.store_fixtures import tiny_skb

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hpo_mini"
#: Files two builds of the same SKB write differently: graphs built by several insertion threads (every ``.bin`` of
#: ``hnsw/`` and ``phrases/``; their vectors and id tables are compared), the stage timings in the similarity
#: statistics, the graph server's dump (compared by its contents below).
VARYING = ("hnsw/", "phrases/phrases.bin", "sage/stats.json", "falkordb/dump.rdb")


def _varies(rel: str) -> bool:
    return (rel.endswith(".bin") and rel.startswith(VARYING[:2])) or rel in VARYING[2:]


def _digests(index: Path) -> dict[str, str]:
    manifest = Manifest.read(index)
    return {**manifest.files, **{rel: d.sha256 for rel, d in manifest.data_files.items()}}


def _graph(index: Path) -> tuple[list[Any], list[Any]]:
    with FalkorDBStore(index / "falkordb") as store:
        nodes = store.query("MATCH (n) RETURN labels(n)[0] AS label, properties(n) AS props ORDER BY n.key").rows
        edges = store.query("MATCH (a)-[r]->(b) RETURN a.key AS s, type(r) AS rel, b.key AS d, properties(r) AS p "
                            "ORDER BY s, rel, d", max_rows=100_000).rows
    return nodes, edges


def test_a_consumed_skb_gives_the_index_of_a_kept_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = IndexConfig(dataset="hpo", similarity=SimilarityConfig(percentile=90))  # phrases and similarity too
    kept = load_hpo(FIXTURE)
    build_index(kept, tmp_path / "kept", config)
    loaded: list[type] = []
    load = FalkorDBStore.load

    def recorded(self: FalkorDBStore, skb: Any, **kwargs: Any) -> None:
        loaded.append(type(skb))
        load(self, skb, **kwargs)

    spawned: list[Path] = []
    start = StoreLoad.__init__

    def spawn(self: StoreLoad, skb_dir: Path, data_dir: Path, tables: bool = False) -> None:
        spawned.append(skb_dir)
        assert tables  # the planner's tables are made there too, before the load
        start(self, skb_dir, data_dir, tables)

    tables: list[tuple[type, int]] = []  # (what the tables were made from, nodes left in the SKB being built)
    building: list[Any] = []
    precompute = state.precompute

    def tables_of(skb: Any, *args: Any) -> None:
        tables.append((type(skb), len(building[-1].nodes)))
        precompute(skb, *args)

    monkeypatch.setattr(FalkorDBStore, "load", recorded)
    monkeypatch.setattr(StoreLoad, "__init__", spawn)
    monkeypatch.setattr(state, "precompute", tables_of)
    consumed = load_hpo(FIXTURE)
    building.append(consumed)
    build_index(consumed, tmp_path / "consumed", config, consume=True)
    assert len(kept.nodes) > 50 and (len(consumed.nodes), len(consumed.edges)) == (0, 0)
    # the store was loaded from the compact files, by a process of its own (not in this one)
    assert loaded == [] and len(spawned) == 1 and spawned[0].name == "skb"
    # the planner's tables were made by that process (the same files below), not in this one
    assert tables == []
    # without the embedded store, this process makes them: from the compact SKB, once the graph's objects are gone
    none = load_hpo(FIXTURE)
    building.append(none)
    build_index(none, tmp_path / "no-store", config.model_copy(update={"store": "none"}), consume=True)
    assert tables == [(CompactSKB, 0)]
    assert {rel: d for rel, d in _digests(tmp_path / "no-store").items() if rel.startswith("skb/state/")} == {
        rel: d for rel, d in _digests(tmp_path / "kept").items() if rel.startswith("skb/state/")}
    a, b = _digests(tmp_path / "kept"), _digests(tmp_path / "consumed")
    assert set(a) == set(b)
    assert any(rel.startswith("phrases/") for rel in a) and any(rel.startswith("sage/") for rel in a)
    assert "hnsw/vectors.npy" in a and "hnsw/ids.json" in a
    assert {rel: d for rel, d in a.items() if not _varies(rel)} == {rel: d for rel, d in b.items() if not _varies(rel)}
    assert _graph(tmp_path / "kept") == _graph(tmp_path / "consumed")
    assert Manifest.read(tmp_path / "kept").counts == Manifest.read(tmp_path / "consumed").counts


def test_a_graph_with_edge_properties_and_other_names_loads_the_same_from_its_compact_form(tmp_path: Path) -> None:
    config = IndexConfig(dataset="tiny", embedder="hash:64")
    kept = tiny_skb()
    assert any(edge.props for edge in kept.edges)  # the rows carry edge properties through the compact form
    build_index(kept, tmp_path / "kept", config)
    build_index(tiny_skb(), tmp_path / "consumed", config, consume=True)
    assert _graph(tmp_path / "kept") == _graph(tmp_path / "consumed")
    assert _digests(tmp_path / "kept")["skb/compact/edge_props.bin"] == _digests(tmp_path / "consumed")[
        "skb/compact/edge_props.bin"]
