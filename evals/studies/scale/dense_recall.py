"""Dense recall@20 of a large built index against exact search, at several search ``ef``.

Why: an index past ``graphs.index.hnsw_params.LARGE_INDEX`` nodes builds its HNSW graphs with fewer candidates (half the
build's largest stage) and searches them with more. This measures what a built index finds, as the agent searches
it: 1,000 node-text queries (nodes' own vectors; searched in their label's graph, and without a label, the label
graphs merged) and generated questions embedded by the index's embedder (without a label), each against the exact
top 20 over the index's vectors, with milliseconds per search.

    python -m evals.studies.scale.dense_recall --index-dir /tmp/scale/index/1000000 \\
        --data /tmp/scale/data/1000000 --ef 128 --ef 256 --out recall.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evals.studies.output import emit
from evals.studies.scale.run import questions

K = 20
#: Rows of the vectors compared at once by the exact search (1,000 queries: a 256 MB block of similarities).
BLOCK = 1 << 16
#: Similarities this close count as equal (float32 scores of the graphs against float32 products here).
TIE = 1e-5


def exact_top(queries: np.ndarray, vectors: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Each query's K-th best cosine similarity over ``vectors`` (only ``rows`` where given), exactly."""
    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    pool = np.arange(len(vectors)) if rows is None else rows
    best = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    for start in range(0, len(pool), BLOCK):
        block = np.asarray(vectors[pool[start:start + BLOCK]], dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True) + 1e-12
        sims = np.concatenate([best, unit_q @ block.T], axis=1)
        best = -np.partition(-sims, min(K, sims.shape[1]) - 1, axis=1)[:, :K]
    return np.asarray(best.min(axis=1), dtype=np.float64)


def _measure(search: Callable[[int, np.ndarray], list[tuple[str, float]]], queries: np.ndarray,
             kth: np.ndarray) -> dict[str, float]:
    """Recall@K where a hit is any result at least as similar as the exact K-th: generated names repeat, and
    the exact top K then picks among equal vectors at random."""
    started = time.perf_counter()
    got = [search(i, q) for i, q in enumerate(queries)]
    ms = (time.perf_counter() - started) * 1000 / len(queries)
    hits = [min(K, sum(sim >= bar - TIE for _, sim in g)) / K for g, bar in zip(got, kth, strict=True)]
    return {"recall@20": round(float(np.mean(hits)), 4), "ms_per_search": round(ms, 3)}


def run(index_dir: Path, data: Path | None, n: int, efs: list[int], seed: int) -> dict[str, Any]:
    from graphs.bundle import IndexBundle
    from graphs.manifest import Manifest

    bundle = IndexBundle.open(index_dir, store="none")
    try:
        hnsw = bundle.hnsw
        keys, labels = list(hnsw.keys), list(hnsw.labels)
        vectors = hnsw.vectors(keys)
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(len(keys), size=min(n, len(keys)), replace=False))
        node_q = np.asarray(vectors[picked], dtype=np.float32)
        label_arr = np.asarray(labels, dtype=object)
        by_label = {label: np.flatnonzero(label_arr == label) for label in hnsw.label_names()}
        truth_any = exact_top(node_q, vectors)
        truth_label = np.zeros(len(picked))
        for label, of_label in by_label.items():
            mine = np.flatnonzero(label_arr[picked] == label)
            if len(mine):
                truth_label[mine] = exact_top(node_q[mine], vectors, of_label)
        asked = [q for q, _ in questions(data, n, seed)] if data is not None else []
        question_q = np.stack([bundle.embedder.embed_query(q) for q in asked]).astype(np.float32) if asked else None
        truth_q = exact_top(question_q, vectors) if question_q is not None else np.zeros(0)
        own = label_arr[picked].tolist()

        def unrestricted(_: int, q: np.ndarray) -> list[tuple[str, float]]:
            return hnsw.search(q, K, per_label=True)

        for i, q in enumerate(node_q):  # every graph opened and its pages warm before anything is timed
            hnsw.search(q, K, label=own[i])
        rows: list[dict[str, Any]] = []
        for ef in efs:
            hnsw.set_ef(ef)
            rows.append({"queries": "node texts", "search": "their label", "ef": ef,
                         **_measure(lambda i, q: hnsw.search(q, K, label=own[i]), node_q, truth_label)})
            rows.append({"queries": "node texts", "search": "no label", "ef": ef,
                         **_measure(unrestricted, node_q, truth_any)})
            if question_q is not None:
                rows.append({"queries": "questions", "search": "no label", "ef": ef,
                             **_measure(unrestricted, question_q, truth_q)})
        params = Manifest.read(index_dir).hnsw
        return {"index_dir": str(index_dir), "nodes": len(keys), "labels": {k: len(v) for k, v in by_label.items()},
                "built_with": params.model_dump(), "node_queries": len(picked), "questions": len(asked),
                "load_avg": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    finally:
        bundle.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None, help="the generated graph, for question queries")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--ef", type=int, action="append", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    emit(run(args.index_dir, args.data, args.n, args.ef or [128, 256], args.seed), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
