"""HNSW graphs in shards: which rows each shard holds, building one shard's graphs, and the exact merge
of per-shard top-k lists.

Why shards: one HNSW graph is built by one process, in one memory. Split by contiguous row ranges, the
graphs of a shard (its global graph and one per label present in it) build independently -- in parallel
tasks on a cluster (``graphs.engine``) -- and a query searches every shard and keeps the best ``k`` of
their union. Every shard uses the index's global ids (row positions), so the id table, ``vectors.npy``
and the per-label id lists stay one for the whole index. A one-shard index is the unsharded layout.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np

from graphs.errors import ConfigError
from graphs.index.ann import ANNGraph, new_graph
from graphs.manifest import HNSWParams, fsync_file, sha256_file, temp_path_for

__all__ = ["ShardGraphs", "build_shard", "checked_rows", "graph_vectors", "merge_topk", "save_graph", "save_shard", "shard_dir",
           "shard_graphs", "shard_ranges"]

ShardGraphs: TypeAlias = tuple[ANNGraph, dict[str, ANNGraph]]
"""One shard's global graph and its per-label graphs (labels present in the shard only)."""


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous, near-equal row ranges covering ``0..n`` (fewer when ``n`` is smaller)."""
    count = max(1, min(int(shards), n)) if n else 1
    bounds = np.linspace(0, n, count + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def shard_dir(shard: int) -> str:
    return f"shard-{shard:03d}"


def checked_rows(keys: Sequence[str], labels: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as contiguous float32 rows, after checking they align with unique ``keys`` and ``labels``."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ConfigError(f"HNSW build needs a 2-D array of vectors, got shape {vectors.shape}")
    n = vectors.shape[0]
    if len(keys) != n or len(labels) != n:
        raise ConfigError(
            f"HNSW build got {len(keys)} keys, {len(labels)} labels and {n} vectors -- they must be aligned"
        )
    if n == 0:
        raise ConfigError("HNSW build got no vectors -- the SKB has no nodes to index")
    if len(set(keys)) != n:
        raise ConfigError("HNSW build got duplicate keys -- node keys must be unique")
    if not np.isfinite(vectors).all():
        raise ConfigError("HNSW build got NaN or infinite vector components -- check the embedder output")
    return vectors


def shard_graphs(
    vectors: np.ndarray, labels: Sequence[str], start: int, end: int, params: HNSWParams, seed: int, threads: int,
    *, global_graph: bool = True,
) -> Iterator[tuple[str | None, ANNGraph]]:
    """The graphs of rows ``start..end`` of ``vectors`` (all rows of the index), with global ids, one at a time:
    the global graph (``None``; unless ``global_graph`` is false), then each label's in name order. A caller that
    saves and drops each before asking for the next holds one graph in memory, not all of them."""
    ids = np.arange(start, end, dtype=np.int64)
    block = np.ascontiguousarray(vectors[start:end], dtype=np.float32)
    dim = block.shape[1]
    if global_graph:
        whole = new_graph(dim, len(ids), params, seed)
        whole.add_items(block, ids, num_threads=threads)
        yield None, whole
        del whole
    label_arr = np.asarray(labels[start:end], dtype=object)
    for label in sorted(set(label_arr.tolist())):
        rows = np.flatnonzero(label_arr == label)
        graph = new_graph(dim, len(rows), params, seed)
        graph.add_items(block[rows], ids[rows], num_threads=threads)
        yield label, graph
        del graph


def build_shard(
    vectors: np.ndarray, labels: Sequence[str], start: int, end: int, params: HNSWParams, seed: int, threads: int
) -> ShardGraphs:
    """The graphs of rows ``start..end`` of ``vectors`` (all rows of the index), with global ids."""
    built = dict(shard_graphs(vectors, labels, start, end, params, seed, threads))
    global_graph = built.pop(None)
    return global_graph, {label: graph for label, graph in built.items() if label is not None}


def graph_vectors(graph: ANNGraph, ids: Sequence[int] | np.ndarray, chunk: int = 16384) -> np.ndarray:
    """The vectors ``graph`` holds for ``ids`` (normalised, as a cosine graph stores them), read ``chunk`` at a time.

    Why in chunks: hnswlib hands its items over as one Python list of float lists before numpy sees them, about
    2.5 kB a 64-dimensional vector: reading 300k at once took 0.85 GB for a moment, a million nearly 3 GB."""
    dim = graph.dim
    out = np.empty((len(ids), dim), dtype=np.float32)
    for start in range(0, len(ids), chunk):
        part = [int(i) for i in ids[start : start + chunk]]
        out[start : start + len(part)] = np.asarray(graph.get_items(part, return_type="numpy"), dtype=np.float32)
    return out


def save_graph(graph: ANNGraph, target: Path) -> str:
    """Write one graph atomically; returns its sha256."""
    tmp = temp_path_for(target)
    try:
        graph.save_index(str(tmp))
        fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return sha256_file(target)


def save_shard(
    root: Path, shard: int, graphs: ShardGraphs, label_file: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Write a shard's graphs under ``root/shard-NNN/``: ({label: relative file}, {relative file: sha256})."""
    sub = shard_dir(shard)
    (root / sub).mkdir(parents=True, exist_ok=True)
    global_graph, by_label = graphs
    files = {f"{sub}/global.bin": save_graph(global_graph, root / sub / "global.bin")}
    names: dict[str, str] = {}
    for label in sorted(by_label):
        rel = f"{sub}/{label_file[label]}"
        files[rel] = save_graph(by_label[label], root / rel)
        names[label] = rel
    return names, files


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The best ``k`` of per-shard answers, per query: ``parts`` holds (ids, distances) arrays of shape
    (queries, k_s), one pair per shard. Ordered by distance, ties by id, so the merge is deterministic."""
    ids = np.concatenate([p[0] for p in parts], axis=1).astype(np.int64)
    dists = np.concatenate([p[1] for p in parts], axis=1).astype(np.float64)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for row_ids, row_d in zip(ids, dists, strict=True):
        order = np.lexsort((row_ids, row_d))[:k]
        out.append((row_ids[order], row_d[order]))
    return out
