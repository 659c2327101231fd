"""Per-label HNSW graphs against one graph searched with a label filter: build time, memory, recall, latency.

Why: an index inserts every vector twice, once into the global graph and once into its label's graph, so a
search restricted to one label walks a graph of that label only. The alternative keeps the global graph
alone and filters by label while searching (hnswlib's ``filter``). This measures both on a generated graph
with the index's own parameters (``HNSWParams``' defaults) and the fast deterministic embedder:

- build: CPU and wall seconds of the per-label graphs (the global graph is built in both designs);
- memory: the bytes of each design's graphs as saved;
- recall@k of a label-restricted search against the exact top-k of that label (brute force; a hit as
  similar as the exact k-th counts, since the hashing embedder gives many equal similarities);
- latency p50/p95 of one label-restricted query.

    python -m evals.studies.hnsw_label_filter --data .skb/scale/data/100000 --out evals/reports/hnsw_label_filter
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphs.embedding.embedder import embed_all, get_embedder
from graphs.index.ann import new_graph
from graphs.loaders.jsonl import load_jsonl
from graphs.manifest import HNSWParams


def _size(graph: Any) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.bin")
        graph.save_index(path)
        return os.path.getsize(path)


def _build(vectors: np.ndarray, ids: np.ndarray, params: HNSWParams, threads: int) -> tuple[Any, float, float]:
    """A graph of ``vectors[ids]`` labelled by row id; (graph, CPU s, wall s)."""
    c0, t0 = time.process_time(), time.perf_counter()
    graph = new_graph(vectors.shape[1], len(ids), params, 100)
    graph.add_items(vectors[ids], ids, num_threads=threads)
    graph.set_ef(params.ef)
    return graph, time.process_time() - c0, time.perf_counter() - t0


def _pcts(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values) * 1000
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3), "p95_ms": round(float(np.percentile(arr, 95)), 3)}


def run(data: Path, queries: int, k: int, threads: int, seed: int) -> dict[str, Any]:
    skb = load_jsonl(data)
    keys = list(skb.nodes)
    labels = np.asarray([skb.nodes[key].label for key in keys])
    vectors = embed_all(get_embedder("hash:64"), [skb.node_text(key) for key in keys])
    del skb
    params = HNSWParams()
    rows = np.arange(len(keys), dtype=np.int64)
    one, cpu_global, wall_global = _build(vectors, rows, params, threads)
    per_label: dict[str, Any] = {}
    cpu_labels = wall_labels = 0.0
    for label in sorted(set(labels.tolist())):
        graph, cpu, wall = _build(vectors, rows[labels == label], params, threads)
        per_label[label] = graph
        cpu_labels, wall_labels = cpu_labels + cpu, wall_labels + wall
    rng = np.random.default_rng(seed)
    asked = vectors[rng.choice(len(keys), size=queries, replace=False)]
    result: dict[str, Any] = {
        "nodes": len(keys), "dim": int(vectors.shape[1]), "k": k, "queries": queries, "params": params.model_dump(),
        "load_avg": os.getloadavg()[0],
        "build": {"global_cpu_s": round(cpu_global, 2), "global_wall_s": round(wall_global, 2),
                  "per_label_cpu_s": round(cpu_labels, 2), "per_label_wall_s": round(wall_labels, 2)},
        "bytes": {"global": _size(one), "per_label": sum(_size(g) for g in per_label.values())},
        "labels": {},
    }
    for label, graph in per_label.items():
        members = rows[labels == label]
        sims = np.sort(asked @ vectors[members].T, axis=1)
        kth = sims[:, -k]  # the exact k-th similarity: a hit at least as similar counts (ties make keys arbitrary)
        allowed = labels == label
        out: dict[str, Any] = {"nodes": len(members)}
        for name in ("per_label", "filter"):
            found, times = 0, []
            for q, least in zip(asked, kth, strict=True):
                t = time.perf_counter()
                if name == "per_label":
                    _, dists = graph.knn_query(q, k=k, num_threads=1)
                else:
                    _, dists = one.knn_query(q, k=k, num_threads=1, filter=lambda i, a=allowed: bool(a[i]))
                times.append(time.perf_counter() - t)
                found += int(np.sum(1.0 - dists[0] >= least - 1e-5))
            out[name] = {"recall": round(found / (k * len(kth)), 4), **_pcts(times)}
        result["labels"][label] = out
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a generated graph (evals.studies.scale.generate)")
    parser.add_argument("--out", type=Path, default=Path("evals/reports/hnsw_label_filter"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.data, args.queries, args.k, args.threads, args.seed)
    result["load_avg_end"] = os.getloadavg()[0]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
