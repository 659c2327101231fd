"""Two indexes of one SKB built with different embedders: how far apart are their vectors and rankings?

Why: a faster embedder (int8, shorter window, another model) is only acceptable when retrieval
stays where it was. This compares a *candidate* index with a *baseline* index over the same
nodes, each queried with its own embedder (the one its manifest names), on question texts
from benchmark CSVs and on the shorter segments of those questions (split at commas,
semicolons and "and": a stand-in for the mentions the linker embeds).

Reported per query set: cosine between the two embedders' query vectors; top-k agreement
with the baseline's exact top-k (the candidate exact, the candidate's HNSW, and the
baseline's own HNSW as the reference for what approximate search alone costs); top-1
agreement. When both indexes hold a phrase artifact, the same for phrase vectors.

    python -m evals.studies.embedder_recall --baseline IDX_FP32 --candidate IDX_INT8 \
        --bench ../shared/bench/hpo_cases_dev_answerable.csv --limit 300 --out report.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

_SEGMENT = re.compile(r",|;|\band\b")


def _questions(paths: list[Path], limit: int) -> list[str]:
    """The first ``limit`` queries of each benchmark (read and checked by ``evals.bench.load_bench``)."""
    from evals.bench import load_bench

    return [q.query for path in paths for q in load_bench(path, limit=limit).questions]


def _segments(questions: list[str], n: int) -> list[str]:
    parts = [p.strip() for q in questions for p in _SEGMENT.split(q) if len(p.strip()) > 8]
    return parts[:: max(1, len(parts) // n)][:n]


def _exact_top(matrix: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    sims = queries @ matrix.T
    return [set(np.argpartition(-row, k)[:k].tolist()) for row in sims]


def _overlap(a: list[set[int]], b: list[set[int]], k: int) -> float:
    return float(np.mean([len(x & y) / k for x, y in zip(a, b, strict=True)]))


def _node_matrix(bundle: Any) -> tuple[list[str], np.ndarray]:
    keys = list(bundle.hnsw.keys)
    return keys, np.asarray(bundle.hnsw.vectors(keys), dtype=np.float32)


def _phrase_matrix(bundle: Any) -> tuple[list[str], np.ndarray, Any] | None:
    from graphs.index.phrases import phrase_index_for

    index = phrase_index_for(bundle)
    if index is None:
        return None
    rows = list(range(len(index)))
    return index.keys, np.asarray(index.graph.get_items(rows, return_type="numpy"), dtype=np.float32), index.graph


def compare(baseline: Any, candidate: Any, sets: dict[str, list[str]], k: int = 10) -> dict[str, Any]:
    keys_a, mat_a = _node_matrix(baseline)
    keys_b, mat_b = _node_matrix(candidate)
    if keys_a != keys_b:
        raise SystemExit("the two indexes hold different nodes (or a different order): build both from one SKB")
    pos = {key: i for i, key in enumerate(keys_a)}
    report: dict[str, Any] = {"k": k, "nodes": len(keys_a)}
    queries = {
        name: (
            np.asarray(baseline.embedder.embed(texts), dtype=np.float32),
            np.asarray(candidate.embedder.embed(texts), dtype=np.float32),
        )
        for name, texts in sets.items()
    }
    for name, texts in sets.items():
        qa, qb = queries[name]
        cos = np.sum(qa * qb, axis=1)
        exact_a, exact_b = _exact_top(mat_a, qa, k), _exact_top(mat_b, qb, k)
        hnsw_b = [{pos[key] for key, _ in row} for row in candidate.hnsw.search_batch(qb, k)]
        hnsw_a = [{pos[key] for key, _ in row} for row in baseline.hnsw.search_batch(qa, k)]
        report[f"nodes/{name}"] = {
            "n": len(texts),
            "query_cosine_min": float(cos.min()),
            "query_cosine_mean": float(cos.mean()),
            "topk_candidate_exact_vs_baseline_exact": _overlap(exact_b, exact_a, k),
            "topk_candidate_hnsw_vs_baseline_exact": _overlap(hnsw_b, exact_a, k),
            "topk_baseline_hnsw_vs_baseline_exact": _overlap(hnsw_a, exact_a, k),
            "top1_agreement": float(np.mean(np.argmax(qb @ mat_b.T, axis=1) == np.argmax(qa @ mat_a.T, axis=1))),
        }
    pa, pb = _phrase_matrix(baseline), _phrase_matrix(candidate)
    if pa is not None and pb is not None and pa[0] == pb[0]:
        phrase_cos = np.sum(pa[1] * pb[1], axis=1)
        entry: dict[str, Any] = {
            "phrases": len(pa[0]),
            "vector_cosine_min": float(phrase_cos.min()),
            "vector_cosine_p1": float(np.percentile(phrase_cos, 1)),
            "vector_cosine_mean": float(phrase_cos.mean()),
        }
        for name, (qa, qb) in queries.items():
            exact_a, exact_b = _exact_top(pa[1], qa, k), _exact_top(pb[1], qb, k)
            ids, _ = pb[2].knn_query(qb, k=k)
            best_a = [pa[0][int(i)] for i in np.argmax(qa @ pa[1].T, axis=1)]
            best_b = [pb[0][int(i)] for i in np.argmax(qb @ pb[1].T, axis=1)]
            entry[name] = {
                "topk_candidate_exact_vs_baseline_exact": _overlap(exact_b, exact_a, k),
                "topk_candidate_hnsw_vs_baseline_exact": _overlap([set(r.tolist()) for r in ids], exact_a, k),
                "top1_node_agreement": float(np.mean([a == b for a, b in zip(best_a, best_b, strict=True)])),
            }
        report["phrases"] = entry
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="index built with the reference embedder")
    parser.add_argument("--candidate", type=Path, required=True, help="index built with the embedder under test")
    parser.add_argument("--bench", type=Path, action="append", required=True, help="benchmark CSV (repeatable)")
    parser.add_argument("--limit", type=int, default=300, help="questions per CSV")
    parser.add_argument("--segments", type=int, default=1000, help="question segments to embed")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from graphs.bundle import IndexBundle
    from graphs.errors import SKBError

    try:
        questions = _questions(args.bench, args.limit)
        sets = {"questions": questions, "segments": _segments(questions, args.segments)}
        with IndexBundle.open(args.baseline, store="none") as baseline, IndexBundle.open(
            args.candidate, store="none"
        ) as candidate:
            report = compare(baseline, candidate, sets, args.k)
    except SKBError as exc:  # a missing or malformed benchmark or index: the message names the fix
        raise SystemExit(str(exc)) from exc
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
