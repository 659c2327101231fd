"""A Ray build against the in-process build of the same data: the same answers, and what sharding costs recall.

Why: ``--engine ray`` computes the embeddings on an actor pool, the HNSW graphs as shards, BM25 and the compact SKB
from partitions and the similarity edges by a sharded kNN. A user must be able to rely on it answering as the
in-process build does. This builds the data both ways (the in-process build reads a copy of an embedding cache
when one is given, the Ray build starts with none, so its embeddings come from the actor pool), runs the
benchmark's methods on both, and compares them per cell (``evals.studies.same_answers``).

It also measures what the shards alone cost: the Ray index's own vectors are indexed again as one HNSW graph with
the same parameters, and ``--queries`` node texts (a seeded sample, embedded as questions are) search both; the
report gives recall@20 of the sharded search against the one graph, and each against exact search.

    python -m evals.studies.ray_equivalence --dataset metaqa --data ../shared/metaqa/kb.txt \\
        --bench ../shared/metaqa/metaqa_dev.csv --ids evals/reports/metaqa-dev/sample_ids.txt \\
        --cache .skb/.skb-cache --work /tmp/ray-eq --out evals/reports/ray-build/metaqa.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.studies.hnsw_global_recall import K, exact_top, recall
from evals.studies.output import emit
from evals.studies.same_answers import compare, evaluate


def _bench_of(bench: Path, ids: Path | None, out: Path) -> Path:
    """The benchmark's rows whose id is listed in ``ids`` (all rows without it)."""
    if ids is None:
        return bench
    wanted = {line.strip() for line in ids.read_text(encoding="utf-8").splitlines() if line.strip()}
    with bench.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    keep = [row for row in rows[1:] if row and row[0] in wanted]
    with out.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([rows[0], *keep])
    return out


def _build(args: list[str], index_dir: Path) -> dict[str, Any]:
    """``skb index`` in a process of its own: its summary, wall seconds and the build process's CPU seconds."""
    skb = Path(sys.executable).with_name("skb")  # the CLI installed beside this interpreter
    cmd = [str(skb) if skb.exists() else "skb", "index", *args, "--index-dir", str(index_dir), "--json", "--quiet"]
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, check=False)
    wall = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"building {index_dir} failed (exit {done.returncode}): {done.stderr[-1500:]}")
    summary = json.loads(done.stdout)
    return {"wall_s": round(wall, 1), "build_process_cpu_s": round(after.children_user - before.children_user
                                                                    + after.children_system - before.children_system, 1),
            "timings_s": summary.get("timings_s", {}), "stderr_lines": len(done.stderr.splitlines())}


def shard_recall(index_dir: Path, queries: int, seed: int) -> dict[str, Any]:
    """Recall@20 of the index's sharded HNSW against one graph over the same vectors, and both against exact search,
    for ``queries`` node texts embedded as questions."""
    from graphs.bundle import IndexBundle
    from graphs.index.hnsw import HNSWIndex

    bundle = IndexBundle.open(index_dir, store="none")
    try:
        sharded = bundle.hnsw
        keys = list(sharded.keys)
        vectors = np.asarray(sharded.vectors(keys), dtype=np.float32)
        one = HNSWIndex.build(keys, list(sharded.labels), vectors, sharded.params)
        one.set_ef(sharded.params.ef)
        picked = random.Random(seed).sample(keys, min(queries, len(keys)))
        q = np.stack([bundle.embedder.embed_query(bundle.skb.node_text(k)) for k in picked]).astype(np.float32)
        a, b = sharded.search_batch(q, K), one.search_batch(q, K)
        exact = [set(row) for row in exact_top(q, vectors, keys)]
        return {
            "queries": len(picked), "shards": len(sharded.shard_ranges), "nodes": len(keys),
            "sharded_vs_one_graph": round(recall(a, [{k for k, _ in r} for r in b]), 4),
            "sharded_vs_exact": round(recall(a, exact), 4),
            "one_graph_vs_exact": round(recall(b, exact), 4),
        }
    finally:
        bundle.close()


def run(dataset: str, data: Path, bench: Path, ids: Path | None, work: Path, methods: list[str],
        cache: Path | None, embedder: str | None, queries: int, seed: int) -> dict[str, Any]:  # fmt: skip
    if work.exists():
        shutil.rmtree(work)
    (work / "local").mkdir(parents=True)
    (work / "ray").mkdir(parents=True)
    if cache is not None:  # the in-process side reads the cache beside its index (graphs.build.default_cache_dir)
        shutil.copytree(cache, work / "local" / ".skb-cache")
    common = ["--dataset", dataset, "--data", str(data), *(["--embedder", embedder] if embedder else [])]
    local_dir, ray_dir = work / "local" / "index", work / "ray" / "index"
    builds = {"in-process": _build(common, local_dir),
              "ray": _build([*common, "--engine", "ray", "--hnsw-shards", "2"], ray_dir)}
    questions = _bench_of(bench, ids, work / "bench.csv")
    results = {side: evaluate(questions, d, methods, work / f"runs-{side}")
               for side, d in (("ray", ray_dir), ("in-process", local_dir))}
    return {
        "dataset": dataset, "data": str(data), "bench": str(bench), "ids": str(ids) if ids else None,
        "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()], "builds": builds,
        "methods": {m: compare(results["ray"][m], results["in-process"][m], ("ray", "in-process")) for m in methods},
        "dense_recall": shard_recall(ray_dir, queries, seed),
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--ids", type=Path, default=None, help="a file of question ids to ask (default: all)")
    parser.add_argument("--work", type=Path, required=True, help="work directory (emptied first)")
    parser.add_argument("--method", action="append", default=None)
    parser.add_argument("--cache", type=Path, default=None, help="an embedding cache the in-process side copies")
    parser.add_argument("--embedder", default=None)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.dataset, args.data, args.bench, args.ids, args.work, args.method or ["agent", "bm25", "hybrid"],
                 args.cache, args.embedder, args.queries, args.seed)  # fmt: skip
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
