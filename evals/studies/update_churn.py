"""Dense recall after rounds of churn: an HNSW index patched round after round against one built afresh.

Why: an update patches the parent's graphs (``graphs.update.hnsw_patch``): changed and deleted nodes' slots are
marked deleted and stay in the graph, new vectors go into new slots, and a graph is built anew only once its
deleted slots pass a share of its live elements. Marked slots still route searches, so recall could decay round
after round; this measures it against an index of the same vectors built afresh, and against exact search.

The vectors are an index's own (``--index``: its ``hnsw/`` directory, real embeddings). Two fifths of the nodes are
held out at the start (:data:`HELD_OUT`); each round deletes ``--delete`` of the live nodes, gives ``--edit`` of them the vector of a
held-out node (a changed text) and adds ``--add`` from the held-out pool with their own labels. Queries are held-out
vectors not in the index (texts like the graph's, not in it). At each checked round the patched index, a fresh build
of the same rows and exact search answer the same queries, globally and per label; recall@k of the patched index
against the fresh one (the share of the fresh top-k it returns) is what ``graphs.update`` must keep >= 0.98.

``python -m evals.studies.update_churn --index .skb/hpo --rounds 20 --out evals/reports/updates/churn_hpo.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphs.index.hnsw import HNSWIndex
from graphs.update.hnsw_patch import patch_hnsw

#: Share of the nodes held out at the start: the pool that edits and additions draw from, and queries come from.
HELD_OUT = 0.4


def _top(index: HNSWIndex, queries: np.ndarray, k: int, label: str | None) -> list[list[str]]:
    return [[key for key, _ in hits] for hits in index.search_batch(queries, k, label=label)]


def _exact(keys: list[str], labels: list[str], vectors: np.ndarray, queries: np.ndarray, k: int,
           label: str | None) -> list[list[str]]:  # fmt: skip
    rows = np.arange(len(keys)) if label is None else np.flatnonzero(np.asarray(labels, dtype=object) == label)
    scores = queries @ vectors[rows].T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[keys[rows[j]] for j in row] for row in order]


def _recall(found: list[list[str]], truth: list[list[str]]) -> float:
    return statistics.fmean(len(set(f) & set(t)) / max(len(t), 1) for f, t in zip(found, truth, strict=True))


def run(index_dir: Path, rounds: int, share: dict[str, float], k: int, queries_n: int, check_every: int,
        seed: int) -> dict[str, Any]:  # fmt: skip
    source = HNSWIndex.load(index_dir / "hnsw")
    all_keys, all_labels = list(source.keys), list(source.labels)
    all_vectors = np.ascontiguousarray(source.vectors(all_keys), dtype=np.float32)
    label_of = dict(zip(all_keys, all_labels, strict=True))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(all_keys))
    cut = int(len(order) * HELD_OUT)
    held = [all_keys[i] for i in order[:cut]]
    live = {all_keys[i]: all_vectors[i] for i in order[cut:]}
    vec_of = {k_: all_vectors[i] for i, k_ in enumerate(all_keys)}
    params = source.params

    def arrays() -> tuple[list[str], list[str], np.ndarray]:
        keys = list(live)
        return keys, [label_of[k_] for k_ in keys], np.stack([live[k_] for k_ in keys])

    keys, labels, vectors = arrays()
    started = time.perf_counter()
    index = HNSWIndex.build(keys, labels, vectors, params)
    build_s = time.perf_counter() - started
    names = sorted(set(all_labels))
    rows: list[dict[str, Any]] = []
    for r in range(1, rounds + 1):
        current = list(live)
        picked = rng.permutation(len(current))
        n_del, n_edit = round(share["delete"] * len(current)), round(share["edit"] * len(current))
        n_add = round(share["add"] * len(current))
        for i in picked[:n_del]:
            del live[current[i]]
        for i in picked[n_del:n_del + n_edit]:
            live[current[i]] = vec_of[held.pop()]  # the node's text changed: another real vector
        for _ in range(n_add):
            key = held.pop()
            live[key] = vec_of[key]
        keys, labels, vectors = arrays()
        started = time.perf_counter()
        patched = patch_hnsw(index, keys, labels, vectors, params)
        rebuilt = patched is None
        index = HNSWIndex.build(keys, labels, vectors, params) if patched is None else patched[0]
        row: dict[str, Any] = {"round": r, "nodes": len(keys), "deleted": n_del, "edited": n_edit, "added": n_add,
                               "seconds": round(time.perf_counter() - started, 2), "full_build": rebuilt,
                               "marked_deleted": dict(index.deleted)}  # fmt: skip
        if r % check_every == 0 or r == rounds:
            queries = np.stack([vec_of[k_] for k_ in held[:queries_n]])
            fresh = HNSWIndex.build(keys, labels, vectors, params)
            for label in [None, *names]:
                name = label or "global"
                truth = _exact(keys, labels, vectors, queries, k, label)
                got, ref = _top(index, queries, k, label), _top(fresh, queries, k, label)
                row[name] = {"recall_vs_fresh": round(_recall(got, ref), 4),
                             "recall_vs_exact": round(_recall(got, truth), 4),
                             "fresh_recall_vs_exact": round(_recall(ref, truth), 4)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    checked = [row for row in rows if "global" in row]
    worst = min(row[name]["recall_vs_fresh"] for row in checked for name in ["global", *names])
    return {"index": str(index_dir), "start_nodes": len(all_keys) - int(len(all_keys) * HELD_OUT), "k": k, "queries": queries_n,
            "share": share, "params": params.model_dump(), "initial_build_s": round(build_s, 1),
            "worst_recall_vs_fresh": worst, "rounds": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--index", type=Path, required=True, help="an index directory (its hnsw/ is read, not written)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--delete", type=float, default=0.005)
    parser.add_argument("--edit", type=float, default=0.01)
    parser.add_argument("--add", type=float, default=0.01)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--check-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.index / "hnsw").is_dir():
        print(f"update_churn: {args.index} has no hnsw/ directory: pass a built index", file=sys.stderr)
        return 2
    result = run(args.index, args.rounds, {"delete": args.delete, "edit": args.edit, "add": args.add}, args.k,
                 args.queries, args.check_every, args.seed)  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"worst recall@{args.k} against a fresh build: {result['worst_recall_vs_fresh']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
