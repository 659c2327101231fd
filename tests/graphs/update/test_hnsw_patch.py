"""HNSW graphs patched from the parent generation's: deleted rows never come back, recall stays that of a fresh
graph through rounds of churn, the saved index loads with its deleted slots, and a graph past the deleted-slot
share is rebuilt."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphs.index.hnsw import HNSWIndex, HNSWParams
from graphs.update.hnsw_patch import REBUILD_SHARE, patch_hnsw
from tests.graphs.hnsw_support import churn, exact_top, rows, unit

PARAMS = HNSWParams(M=16, ef_construction=100, ef=64)


def test_patched_graphs_forget_deleted_rows_and_keep_recall_through_churn(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    keys, labels, vectors = rows(rng, 600, ("Odd", "Even"))
    index = HNSWIndex.build(keys, labels, vectors, PARAMS)
    gone: set[str] = set()
    built = 0
    for round_ in range(8):  # 1 % edited, 1 % deleted, 1 % added per round
        keys, labels, vectors, dead = churn(rng, keys, labels, vectors, 6 * round_, ("Odd", "Even"))
        gone |= set(dead)
        patched = patch_hnsw(index, keys, labels, vectors, PARAMS)
        if patched is None:  # the global graph's deleted slots passed the share: the caller builds it
            index, built = HNSWIndex.build(keys, labels, vectors, PARAMS), built + 1
        else:
            index, report = patched
            assert report.written[None] == 12  # the added and the edited rows, not the whole graph
            assert index.graph(None).get_current_count() == len(keys) + index.deleted.get("global.bin", 0)
        index.save(tmp_path / f"g{round_}")
        index = HNSWIndex.load(tmp_path / f"g{round_}")  # the slot counts in the id table pass the load check
        assert list(index.keys) == keys  # rows in the graph's order, as a build has them
    assert built == 1  # 12 slots retired a round: past 10 % of 600 in the sixth round
    by_key = {k: index.vector(k) for k in keys}
    assert all(np.array_equal(by_key[k], vectors[i]) for i, k in enumerate(keys))
    queries = unit(rng, 40)
    hits = found = 0
    for q in queries:
        for label in (None, "Odd"):
            got = [k for k, _ in index.search(q, 10, label=label)]
            assert not gone & set(got)
            members = [i for i, lab in enumerate(labels) if label is None or lab == label]
            want = exact_top([keys[i] for i in members], vectors[members], q, 10)
            hits += len(set(got) & set(want))
            found += len(want)
    assert hits / found >= 0.98


def test_a_graph_past_the_deleted_share_is_built_again() -> None:
    rng = np.random.default_rng(3)
    keys = [f"k{i}" for i in range(200)]
    labels = ["A"] * 100 + ["B"] * 100
    vectors = unit(rng, 200)
    index = HNSWIndex.build(keys, labels, vectors, PARAMS)
    drop = int(100 * REBUILD_SHARE) + 5  # from label B only, none added: B's graph passes the share
    keep = list(range(200 - drop))
    patched = patch_hnsw(index, [keys[i] for i in keep], [labels[i] for i in keep], vectors[keep], PARAMS)
    assert patched is not None
    new, report = patched
    assert "B" in report.rebuilt and "A" not in report.rebuilt
    assert "B.bin" not in new.deleted and new.graph("B").get_current_count() == 100 - drop
