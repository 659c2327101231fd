"""An index built with mapped graphs (USearch): its graphs are searched from their files as read-only memory maps,
find what an exact scan finds, follow an update's churn without returning a deleted row or writing the parent's
files, and carry through a whole build, its phrase index and an update, on a graph of any labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import ConfigError, IndexCorruptError
from graphs.index.ann import MappedGraph, load_graph, new_graph
from graphs.index.hnsw import HNSWIndex, HNSWParams
from graphs.index.hnsw_build import build_saved
from graphs.index.phrases import ENTRIES_FILE, PHRASE_DIR, PhraseIndex, graph_of
from graphs.manifest import Manifest, sha256_file
from graphs.update import parse_changes, update_index
from graphs.update.hnsw_patch import patch_hnsw
from tests.graphs.hnsw_support import DIM, churn, exact_top, rows, unit
from tests.small_graphs import catalog_skb

PARAMS = HNSWParams(M=16, ef_construction=100, ef=64, mapped=True)


def mapped_files() -> set[str]:
    """The files this process has memory-mapped (``/proc/self/maps``)."""
    return {line.split(maxsplit=5)[5].strip() for line in Path("/proc/self/maps").read_text().splitlines()
            if len(line.split(maxsplit=5)) == 6}


def recall(index: HNSWIndex, keys: list[str], labels: list[str], vectors: np.ndarray, queries: np.ndarray,
           label: str | None, **kw: bool) -> float:
    members = [i for i, lab in enumerate(labels) if label is None or lab == label]
    hits = 0
    for q in queries:
        got = {k for k, _ in index.search(q, 10, label=label, **kw)}
        hits += len(got & set(exact_top([keys[i] for i in members], vectors[members], q, 10)))
    return hits / (10 * len(queries))


def test_saved_graphs_are_searched_where_they_lie_and_find_the_exact_neighbours(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    keys, labels, vectors = rows(rng, 900, ("Gadget", "Widget"), every=3, prefix="row")
    build_saved(keys, labels, vectors, PARAMS.model_copy(update={"global_graph": True}), tmp_path)
    index = HNSWIndex.load(tmp_path)
    assert index.params.mapped
    queries = unit(rng, 30)
    assert recall(index, keys, labels, vectors, queries, None) >= 0.97
    assert recall(index, keys, labels, vectors, queries, "Widget") >= 0.97
    assert recall(index, keys, labels, vectors, queries, None, per_label=True) >= 0.97
    for label in (None, "Gadget", "Widget"):
        graph = index.graph(label)
        assert isinstance(graph, MappedGraph) and graph.mapped
    assert {str(tmp_path / name) for name in ("global.bin", "Gadget.bin", "Widget.bin")} <= mapped_files()
    # the stored vectors are unit length, as hnswlib's cosine graphs keep them
    assert np.allclose(index.vector("row7"), vectors[7], atol=1e-6)
    assert np.allclose(np.linalg.norm(index.graph(None).get_items([3, 4]), axis=1), 1.0, atol=1e-6)


def test_a_sharded_mapped_index_searches_every_shard_from_its_files(tmp_path: Path) -> None:
    """The layout the Ray engine writes (one task a shard: ``build_shard`` and ``save_shard``)."""
    rng = np.random.default_rng(4)
    keys, labels, vectors = rows(rng, 800, ("Left", "Right"), every=4, prefix="row")
    HNSWIndex.build(keys, labels, vectors, PARAMS, shards=2).save(tmp_path)
    index = HNSWIndex.load(tmp_path)
    assert index.sharded and all(isinstance(index._graph(None, s), MappedGraph) for s in range(2))
    queries = unit(rng, 20)
    assert recall(index, keys, labels, vectors, queries, None) >= 0.97
    assert recall(index, keys, labels, vectors, queries, "Right") >= 0.97


def test_an_update_reads_a_mapped_graph_in_and_never_writes_the_parent_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    keys, labels, vectors = rows(rng, 600, ("Odd", "Even"))
    HNSWIndex.build(keys, labels, vectors, PARAMS).save(tmp_path / "g0")
    digests = {p.name: sha256_file(p) for p in (tmp_path / "g0").iterdir()}
    index = HNSWIndex.load(tmp_path / "g0")
    gone: set[str] = set()
    for round_ in range(1, 9):  # 1 % edited, 1 % deleted, 1 % added per round
        keys, labels, vectors, dead = churn(rng, keys, labels, vectors, 6 * round_, ("Odd", "Even"))
        gone |= set(dead)
        patched = patch_hnsw(index, keys, labels, vectors, PARAMS)
        assert patched is not None  # deleted slots are reused: the global graph never passes the share
        index, report = patched
        assert report.written[None] == 12 and not index.deleted
        index.save(tmp_path / f"g{round_}")
        index = HNSWIndex.load(tmp_path / f"g{round_}")
        assert list(index.keys) == keys and isinstance(index.graph(None), MappedGraph)
    assert {p.name: sha256_file(p) for p in (tmp_path / "g0").iterdir()} == digests
    queries = unit(rng, 30)
    for label in (None, "Odd"):
        for q in queries:
            assert not gone & {k for k, _ in index.search(q, 10, label=label)}
        assert recall(index, keys, labels, vectors, queries, label) >= 0.97


def test_a_mapped_phrase_graph_loads_mapped_and_answers_by_inner_product(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vectors = unit(rng, 300)
    keys = [f"term{i // 3}" for i in range(300)]
    PhraseIndex(graph_of(vectors, mapped=True), keys, ["name"] * 300, mapped=True).save(tmp_path)
    assert json.loads((tmp_path / ENTRIES_FILE).read_text())["mapped"] is True
    loaded = PhraseIndex.load(tmp_path, DIM)
    assert loaded.mapped and isinstance(loaded.graph, MappedGraph) and loaded.graph.mapped
    hits = loaded.search(vectors[[30, 31]], 3)
    assert hits[0][0][0] == "term10" and hits[0][0][1] == pytest.approx(1.0, abs=1e-5)
    assert hits[1][0][0] == "term10"


def test_mapped_graphs_follow_a_whole_build_and_an_update(tmp_path: Path) -> None:
    skb = catalog_skb()
    common = {"dataset": "catalog", "store": "none", "embedder": "hash:64"}
    mapped = build_index(skb, tmp_path / "mapped", IndexConfig(**common, hnsw_mapped=True))
    plain = build_index(catalog_skb(), tmp_path / "plain", IndexConfig(**common))
    assert mapped.nodes == plain.nodes
    index_dir = tmp_path / "mapped"
    assert Manifest.read(index_dir).hnsw.mapped
    assert json.loads((index_dir / PHRASE_DIR / ENTRIES_FILE).read_text())["mapped"] is True
    with IndexBundle.open(index_dir) as bundle, IndexBundle.open(tmp_path / "plain") as other:
        hnsw = bundle.hnsw
        assert all(isinstance(hnsw.graph(label), MappedGraph) for label in hnsw.label_names())
        query = bundle.embedder.embed_query("electric kettle that boils water")
        assert [k for k, _ in hnsw.search(query, 5)] == [k for k, _ in other.hnsw.search(query, 5)]
    changes = parse_changes(b'{"op": "delete", "node": {"key": "C_KETTLE"}}\n')
    summary = update_index(index_dir, changes)
    assert summary.deleted_nodes == 1
    with IndexBundle.open(index_dir) as bundle:
        assert bundle.manifest.hnsw.mapped and "C_KETTLE" not in bundle.hnsw
        query = bundle.embedder.embed_query("electric kettle")
        assert "C_KETTLE" not in {k for k, _ in bundle.hnsw.search(query, 20)}
        phrases = PhraseIndex.load(index_dir / PHRASE_DIR, bundle.manifest.embedder.dim)
        assert phrases.mapped and "C_KETTLE" not in {k for k, _ in phrases.search(query[None, :], 20)[0]}


def test_a_damaged_mapped_graph_and_a_missing_library_are_named(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    graph = new_graph(DIM, 10, PARAMS, 0)
    graph.add_items(unit(np.random.default_rng(1), 10), np.arange(10))
    graph.save_index(str(tmp_path / "g.bin"))
    (tmp_path / "bad.bin").write_bytes(b"not a graph" * 10)
    with pytest.raises(IndexCorruptError, match="bad.bin"):
        load_graph(tmp_path / "bad.bin", DIM, mapped=True)
    with pytest.raises(IndexCorruptError, match="not a 8-dimensional"):
        load_graph(tmp_path / "g.bin", 8, mapped=True)
    monkeypatch.setitem(sys.modules, "usearch.index", None)  # as where the extra is not installed
    with pytest.raises(ConfigError, match=r"skb-agent\[mapped\]"):
        load_graph(tmp_path / "g.bin", DIM, mapped=True)


def test_a_vector_asked_of_a_mapped_graph_by_an_unknown_id_is_refused() -> None:
    graph = new_graph(DIM, 4, PARAMS, 0)
    vectors = unit(np.random.default_rng(8), 4)
    graph.add_items(vectors, np.arange(4))
    assert np.allclose(graph.get_items([2]), vectors[[2]], atol=1e-6)
    for ids in ([9], [1, 9]):
        with pytest.raises(RuntimeError, match="not in the graph"):
            graph.get_items(ids)


def test_every_element_of_a_mapped_graph_is_found_by_its_own_vector() -> None:
    """Asked to insert on several threads, a mapped graph still reaches every element (USearch's concurrent
    insertion lost some: ``MappedGraph``'s docstring)."""
    missed = 0
    for seed in range(20):
        vectors = unit(np.random.default_rng(seed), 300)
        graph = new_graph(DIM, 300, PARAMS, 0)
        graph.add_items(vectors, np.arange(300), num_threads=2)
        ids, _ = graph.knn_query(vectors, k=1, num_threads=1)
        missed += int((ids[:, 0] != np.arange(300)).sum())
    assert missed == 0
