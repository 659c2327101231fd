"""How much of the exact top 20 the global HNSW graph finds for real questions, against the per-label graphs merged.

Why: an unrestricted dense search (hybrid search, linking a mention by its embedding) walks the index's global
graph. Node-text queries find themselves easily; questions land between clusters, and on a graph of many short,
alike texts (names of people and films) the greedy walk can stop in the wrong cluster. Every index also holds one
graph per node label, each searched on its own when a label is asked for; searching each and merging their top k
is exact over the union, and each label's graph is smaller and more uniform. This measures both on a benchmark's
questions, embedded as the agent embeds them, against exact search over the index's own vectors: recall@20, the
share of questions whose exact nearest node is in the top 20, and milliseconds per query.

    python -m evals.studies.hnsw_global_recall --index-dir .skb/metaqa --bench ../shared/metaqa/metaqa_dev.csv \\
        --n 500 --out evals/reports/hnsw-global/metaqa.json
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.studies.output import emit

K = 20


def _spread(bench: Path, n: int) -> list[str]:
    with bench.open(newline="", encoding="utf-8") as fh:
        questions = [row["query"] for row in csv.DictReader(fh)]
    return questions[:: max(1, len(questions) // n)][:n]


def exact_top(queries: np.ndarray, vectors: np.ndarray, keys: list[str]) -> list[list[str]]:
    """Each query's exact top-K keys over ``vectors`` (rows of ``keys``), nearest first."""
    order = np.argsort(-(queries @ vectors.T), axis=1)[:, :K]
    return [[keys[i] for i in row] for row in order.tolist()]


def recall(got: list[list[tuple[str, float]]], truth: list[set[str]]) -> float:
    """Mean share of each query's ``truth`` (K keys) that ``got`` holds."""
    return float(np.mean([len({k for k, _ in g} & t) / K for g, t in zip(got, truth, strict=True)]))


def _score(got: list[list[tuple[str, float]]], exact: list[set[str]], first: list[str]) -> dict[str, float]:
    return {
        "recall@20": round(recall(got, exact), 4),
        "nearest_found": round(float(np.mean([f in {k for k, _ in g} for g, f in zip(got, first, strict=True)])), 4),
    }


def run(index_dir: Path, bench: Path, n: int, global_efs: list[int], label_efs: list[int]) -> dict[str, Any]:
    from graphs.bundle import IndexBundle

    bundle = IndexBundle.open(index_dir, store="none")
    try:
        hnsw = bundle.hnsw
        questions = _spread(bench, n)
        queries = np.stack([bundle.embedder.embed_query(q) for q in questions]).astype(np.float32)
        keys = list(hnsw.keys)
        vectors = np.asarray(hnsw.vectors(keys), dtype=np.float32)
        top = exact_top(queries, vectors, keys)
        exact, first = [set(row) for row in top], [row[0] for row in top]
        labels = hnsw.label_names()
        if hnsw.sharded:
            raise SystemExit(f"{index_dir} is sharded; this study compares one global graph with the label graphs")
        rows: list[dict[str, Any]] = []
        graph = hnsw.graph(None)  # walked directly: an unrestricted search_batch merges the label graphs

        def walk(batch: np.ndarray) -> list[list[tuple[str, float]]]:
            ids, dists = graph.knn_query(batch, k=K, num_threads=1)
            if hnsw.slot_rows is not None:
                ids = hnsw.slot_rows[ids]
            return [[(keys[int(i)], 1.0 - float(d)) for i, d in zip(r, q, strict=True)] for r, q in zip(ids, dists, strict=True)]

        for ef in global_efs:
            hnsw.set_ef(ef)
            walk(queries[:5])  # opened and warm
            started = time.perf_counter()
            got = [walk(q[None, :])[0] for q in queries]  # one query at a time, as a question searches
            ms = (time.perf_counter() - started) * 1000 / len(questions)
            rows.append({"search": "global graph", "ef": ef, **_score(got, exact, first), "ms_per_query": round(ms, 3)})
        for ef in label_efs:
            hnsw.set_ef(ef)
            for label in labels:
                hnsw.search_batch(queries[:5], K, label=label)
            started = time.perf_counter()
            merged = []
            for q in queries:
                hits = [h for label in labels for h in hnsw.search(q, K, label=label)]
                merged.append(sorted(hits, key=lambda h: (-h[1], h[0]))[:K])
            ms = (time.perf_counter() - started) * 1000 / len(questions)
            rows.append({"search": f"{len(labels)} label graphs merged", "ef": ef, **_score(merged, exact, first),
                         "ms_per_query": round(ms, 3)})  # fmt: skip
        return {"index_dir": str(index_dir), "bench": str(bench), "questions": len(questions), "nodes": len(keys),
                "labels": len(labels), "load_avg": [round(x, 2) for x in os.getloadavg()], "rows": rows}  # fmt: skip
    finally:
        bundle.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--global-ef", type=int, action="append", default=None)
    parser.add_argument("--label-ef", type=int, action="append", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.index_dir, args.bench, args.n, args.global_ef or [128, 256, 512], args.label_ef or [64, 128])
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
