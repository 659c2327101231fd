"""An HNSW index without the global graph (``HNSWParams.global_graph``; large indexes and one-label indexes by
default): searches without a label merge the label graphs and find what an index with it finds, its vectors are
the same, it saves and loads, an update patches it without one, and the rule says when it is built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphs.errors import ConfigError, IndexCorruptError
from graphs.index.hnsw import GLOBAL_FILE, HNSWIndex, HNSWParams
from graphs.index.hnsw_build import build_saved
from graphs.index.hnsw_params import GLOBAL_GRAPH_UP_TO, MERGE_LABELS_UP_TO, wants_global_graph
from graphs.update.hnsw_patch import patch_hnsw

DIM = 24
WITH = HNSWParams(M=16, ef_construction=100, ef=64, global_graph=True)
WITHOUT = WITH.model_copy(update={"global_graph": False})


def _data(n: int = 900, seed: int = 3) -> tuple[list[str], list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    keys = [f"item-{i}" for i in range(n)]
    labels = [("Widget", "Gadget", "Sprocket")[i % 3] for i in range(n)]
    return keys, labels, vectors


def _exact(keys: list[str], vectors: np.ndarray, query: np.ndarray, k: int) -> list[str]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return [keys[i] for i in np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")[:k]]


def test_the_rule_builds_it_for_small_indexes_of_several_labels_or_many_labels() -> None:
    assert wants_global_graph(40_000, 3) and wants_global_graph(GLOBAL_GRAPH_UP_TO, 8)
    assert not wants_global_graph(GLOBAL_GRAPH_UP_TO + 1, 4)
    assert wants_global_graph(1_000_000, MERGE_LABELS_UP_TO + 1)  # a merge of that many searches costs more
    assert not wants_global_graph(1_000, 1)  # its one label graph holds the same rows


def test_without_it_a_search_without_a_label_merges_the_label_graphs(tmp_path: Path) -> None:
    keys, labels, vectors = _data()
    with_global, _ = build_saved(keys, labels, vectors, WITH, tmp_path / "with", num_threads=1)
    without, files = build_saved(keys, labels, vectors, WITHOUT, tmp_path / "without", num_threads=1)
    assert GLOBAL_FILE not in files and not (tmp_path / "without" / GLOBAL_FILE).exists()
    assert json.loads((tmp_path / "without" / "ids.json").read_text())["global"] is None
    assert with_global.has_global_graph and not without.has_global_graph
    # the vectors as stored (normalised by the graphs) are the same bytes either way
    assert (tmp_path / "with" / "vectors.npy").read_bytes() == (tmp_path / "without" / "vectors.npy").read_bytes()
    loaded = HNSWIndex.load(tmp_path / "without")
    rng = np.random.default_rng(9)
    found = 0
    for query in rng.normal(size=(30, DIM)).astype(np.float32):
        merged = with_global.search(query, 10, per_label=True)
        assert without.search(query, 10) == merged == loaded.search(query, 10)
        assert without.search(query, 10, per_label=True) == merged
        found += len({key for key, _ in merged} & set(_exact(keys, vectors, query, 10)))
        assert all(label == "Gadget" for label in (labels[keys.index(k)] for k, _ in loaded.search(query, 5, "Gadget")))
    assert found >= 0.95 * 30 * 10
    with pytest.raises(ConfigError, match="without its global graph"):
        loaded.graph(None)


def test_a_one_label_index_builds_no_global_graph_and_searches_its_label_graph(tmp_path: Path) -> None:
    keys, _, vectors = _data(300)
    index, files = build_saved(keys, ["Thing"] * len(keys), vectors, HNSWParams(M=16, ef_construction=100), tmp_path)
    assert GLOBAL_FILE not in files and not index.has_global_graph
    query = vectors[5]
    assert index.search(query, 5) == index.search(query, 5, "Thing") and index.search(query, 1)[0][0] == keys[5]


def test_an_id_table_without_it_needs_vectors_and_every_label_graph(tmp_path: Path) -> None:
    keys, labels, vectors = _data(300)
    build_saved(keys, labels, vectors, WITHOUT, tmp_path)
    (tmp_path / "vectors.npy").unlink()
    with pytest.raises(IndexCorruptError, match="names no global graph"):
        HNSWIndex.load(tmp_path)


def test_an_index_without_it_is_patched_without_it(tmp_path: Path) -> None:
    keys, labels, vectors = _data(600)
    parent = HNSWIndex.build(keys, labels, vectors, WITHOUT)
    assert not parent.has_global_graph
    dead = set(keys[:6])
    keep = [i for i, k in enumerate(keys) if k not in dead]
    new_keys = [keys[i] for i in keep] + ["fresh-0", "fresh-1"]
    new_labels = [labels[i] for i in keep] + ["Widget", "Gadget"]
    new_vectors = np.concatenate([vectors[keep], np.random.default_rng(1).normal(size=(2, DIM)).astype(np.float32)])
    patched = patch_hnsw(parent, new_keys, new_labels, new_vectors / np.linalg.norm(new_vectors, axis=1, keepdims=True),
                         WITHOUT)
    assert patched is not None
    index, report = patched
    assert not index.has_global_graph and None not in report.written
    for i in range(6):  # a deleted node's own vector finds it nowhere
        assert not dead & {key for key, _ in index.search(vectors[i], 20)}
    assert index.search(new_vectors[-1], 1)[0][0] == "fresh-1"
    index.save(tmp_path / "patched")
    assert HNSWIndex.load(tmp_path / "patched").search(new_vectors[-2], 1)[0][0] == "fresh-0"
