"""HNSW in shards: every shard searched, the per-shard top-k merged exactly; a one-shard index is the
unsharded layout; the manifest records the layout and `skb verify`'s full check refuses a wrong one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evals.studies.scale.generate import generate
from graphs.build import IndexConfig, build_index
from graphs.embedding.embedder import embed_all, get_embedder
from graphs.engine import LocalEngine
from graphs.errors import IndexCorruptError
from graphs.index.hnsw import HNSWIndex, HNSWParams
from graphs.index.hnsw_shards import merge_topk
from graphs.loaders.jsonl import load_jsonl
from graphs.manifest import Manifest
from graphs.skb.model import SKB


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[SKB, list[str], list[str], np.ndarray]:
    root = tmp_path_factory.mktemp("generated")
    generate(2000, root / "data", seed=3)
    skb = load_jsonl(root / "data")
    keys = list(skb.nodes)
    labels = [skb.nodes[k].label for k in keys]
    vectors = embed_all(get_embedder("hash:64"), [skb.node_text(k) for k in keys])
    return skb, keys, labels, vectors


def _recall(one: list[list[tuple[str, float]]], many: list[list[tuple[str, float]]]) -> float:
    """The share of the sharded hits at least as similar as the one graph's k-th hit. Tie-aware: feature-
    hashed vectors tie often, and which of several equally similar nodes fills the last places is arbitrary
    (as a key-set overlap, one HNSW graph against an exact scan scores 0.94 here)."""
    found = sum(sum(1 for _, sim in b if sim >= a[-1][1] - 1e-6) for a, b in zip(one, many, strict=True))
    return found / sum(len(a) for a in one)


def test_sharded_dense_recall_at_20_against_one_graph(generated: tuple, tmp_path: Path) -> None:
    _, keys, labels, vectors = generated
    params = HNSWParams()
    one = HNSWIndex.build(keys, labels, vectors, params)
    sharded = HNSWIndex.build(keys, labels, vectors, params, shards=4)
    assert sharded.sharded and len(sharded.shard_ranges) == 4
    queries = vectors[::2][:1000]
    assert _recall(one.search_batch(queries, 20), sharded.search_batch(queries, 20)) >= 0.99
    for label in sorted(set(labels)):
        assert _recall(one.search_batch(queries[:200], 20, label), sharded.search_batch(queries[:200], 20, label)) >= 0.99
    # the same answers after a save and a load, searched from the files
    sharded.save(tmp_path / "hnsw")
    loaded = HNSWIndex.load(tmp_path / "hnsw")
    assert loaded.sharded and loaded.shard_ranges == sharded.shard_ranges
    assert loaded.search_batch(queries[:50], 20) == sharded.search_batch(queries[:50], 20)
    assert loaded.knn_by_key(keys[7], 5) == sharded.knn_by_key(keys[7], 5)


def test_merge_orders_by_distance_then_id() -> None:
    left = (np.array([[5, 9]]), np.array([[0.1, 0.3]]))
    right = (np.array([[2, 4]]), np.array([[0.1, 0.2]]))
    ids, dists = merge_topk([left, right], 3)[0]
    assert ids.tolist() == [2, 5, 4] and dists.tolist() == pytest.approx([0.1, 0.1, 0.2])


def test_one_shard_index_keeps_the_unsharded_layout(generated: tuple, tmp_path: Path) -> None:
    skb, *_ = generated
    build_index(skb, tmp_path / "index", IndexConfig(dataset="gen", embedder="hash:64", store="none"))
    hnsw = tmp_path / "index" / "hnsw"
    assert not list(hnsw.glob("shard-*")) and (hnsw / "global.bin").is_file()
    assert "shards" not in json.loads((hnsw / "ids.json").read_text())
    assert "hnsw_shards" not in Manifest.read(tmp_path / "index").extra


def test_manifest_records_the_shards_and_verify_refuses_a_wrong_layout(generated: tuple, tmp_path: Path) -> None:
    skb, *_ = generated
    index = tmp_path / "index"
    build_index(skb, index, IndexConfig(dataset="gen", embedder="hash:64", store="none"), engine=LocalEngine(shards=3))
    manifest = Manifest.read(index)
    ranges = manifest.extra["hnsw_shards"]
    assert len(ranges) == 3 and ranges[0][0] == 0 and ranges[-1][1] == len(skb.nodes)
    manifest.verify(index, full=True)
    manifest.extra["hnsw_shards"] = [[0, 10], [10, len(skb.nodes)]]
    with pytest.raises(IndexCorruptError, match="records HNSW shards"):
        manifest.verify(index, full=True)


def test_opening_an_index_whose_manifest_hides_its_shards_is_refused(generated: tuple, tmp_path: Path) -> None:
    from graphs.bundle import IndexBundle

    skb, *_ = generated
    index = tmp_path / "index"
    build_index(skb, index, IndexConfig(dataset="gen", embedder="hash:64", store="none"), engine=LocalEngine(shards=2))
    with IndexBundle.open(index, store="none") as bundle:
        assert bundle.hnsw.sharded
    raw = json.loads((index / "manifest.json").read_text())
    del raw["extra"]["hnsw_shards"]
    (index / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(IndexCorruptError, match="hnsw_shards"):
        IndexBundle.open(index, store="none")


def test_an_index_built_into_its_directory_writes_the_files_a_save_writes(generated: tuple, tmp_path: Path) -> None:
    """The build that saves each graph before the next (one graph in memory at a time) writes byte for byte the
    files of a build then a save (one thread: hnswlib inserts deterministically), on a graph of other labels; the
    index it returns opens a graph only when a search needs it, and answers as the loaded index does."""
    from graphs.index.hnsw_build import build_saved
    from graphs.manifest import sha256_file

    _, keys, labels, vectors = generated
    params = HNSWParams(M=8, ef_construction=40)
    saved = HNSWIndex.build(keys, labels, vectors, params, num_threads=1).save(tmp_path / "saved")
    index, written = build_saved(keys, labels, vectors, params, tmp_path / "direct", num_threads=1)
    assert written == saved and len(written) == len(set(labels)) + 3  # graphs, vectors.npy, ids.json
    assert all(sha256_file(tmp_path / "direct" / name) == digest for name, digest in written.items())
    assert not index._opened  # every graph is on disk only
    queries = vectors[:40]
    loaded = HNSWIndex.load(tmp_path / "saved")
    assert index.search_batch(queries, 10) == loaded.search_batch(queries, 10)
    label = min(labels)
    assert index.search_batch(queries, 10, label) == loaded.search_batch(queries, 10, label)
    assert set(index._opened) == {(None, 0), (label, 0)}
