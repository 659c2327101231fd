"""Building an unsharded HNSW index straight into its directory, one graph in memory at a time.

Why: ``HNSWIndex.build`` holds the global graph and every label's graph until they are saved, and a graph holds
its vectors and links (about 0.65 GB for a million 64-dimensional vectors at M 32): the build's peak held both
the global graph and all label graphs. Here each graph is saved as soon as it is built and dropped before the
next; the index returned opens them from the files when a later stage searches. The files are those
``HNSWIndex.save`` writes for the same rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphs.index.hnsw import GLOBAL_FILE, HNSWIndex, HNSWParams, _num_threads, label_file
from graphs.index.hnsw_params import resolved_params
from graphs.index.hnsw_shards import checked_rows, graph_vectors, save_graph, shard_graphs


def build_saved(
    keys: list[str],
    labels: list[str],
    vectors: np.ndarray,
    params: HNSWParams,
    out: Path,
    *,
    num_threads: int | None = None,
    seed: int = 100,
) -> tuple[HNSWIndex, dict[str, str]]:
    """The index of ``vectors`` written to ``out``: (the index, {file relative to ``out``: sha256}). The global
    graph is built where ``params.global_graph`` asks for it (None: ``wants_global_graph``)."""
    vectors = checked_rows(keys, labels, vectors)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n, dim = vectors.shape
    names = {label: label_file(label) for label in sorted(set(labels))}
    params = resolved_params(params, n, len(names))
    with_global = bool(params.global_graph)
    label_arr = np.asarray(labels, dtype=object)
    counts = dict(zip(*np.unique(label_arr, return_counts=True), strict=True))
    files: dict[str, str] = {}
    # the vectors as the graphs hold them (normalised), which vectors.npy stores: from the global graph, or
    # from each label's graph where there is none
    stored = vectors if with_global else np.empty((n, dim), dtype=np.float32)
    graphs = shard_graphs(vectors, labels, 0, n, params, seed, num_threads or _num_threads(), global_graph=with_global)
    for label, graph in graphs:
        name = GLOBAL_FILE if label is None else names[label]
        files[name] = save_graph(graph, out / name)
        if label is None:
            stored = graph_vectors(graph, range(n))
        elif not with_global:
            rows = np.flatnonzero(label_arr == label)
            stored[rows] = graph_vectors(graph, rows)
        del graph  # before the next graph is built
    whole = HNSWIndex._opener(out / GLOBAL_FILE, dim, n, params.mapped) if with_global else None
    index = HNSWIndex(list(keys), list(labels), dim, params, whole,
                      {label: HNSWIndex._opener(out / name, dim, int(counts[label]), params.mapped)
                       for label, name in names.items()},
                      vectors=stored)
    return index, files | index.write_table(out)
