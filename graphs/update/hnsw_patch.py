"""The HNSW graphs of a new generation patched from the parent's instead of built again.

Why: building the graphs is the largest part of a build once every vector comes from the cache (minutes on
tens of thousands of nodes); a change set touches a few hundred. The parent's graphs are read into memory (its
files are never written), and each graph -- the global one and one per label -- gets its changes: the slot of a
deleted node, or of a node whose vector or label changed, is marked deleted, and every new or changed vector is
inserted into a new slot. Why new slots rather than hnswlib's in-place update: an update re-links the element's
neighbourhood, measured here at ~200 ms an element (M 32, ef_construction 200, 384 dimensions) against ~3-8 ms
for an insert. The rows of the new index are the changed graph's node order, as a build's; ``HNSWIndex.slot_rows``
maps the graph ids (slots) to rows.

Marked-deleted slots are never returned by a search but stay in the graph; once they pass ``REBUILD_SHARE`` of a
label graph's live elements that graph is built anew, and once they pass it in the global graph the caller builds
the whole index (which starts the slots afresh). An index built without the global graph is patched without one.
A sharded index, or one whose parameters or dimension changed, is built in full by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphs.index.ann import new_graph
from graphs.index.hnsw import HNSWIndex, label_file
from graphs.manifest import HNSWParams

#: A graph whose marked-deleted slots exceed this share of its live elements is rebuilt from its vectors.
REBUILD_SHARE = 0.1
_SEED = 100


@dataclass
class PatchReport:
    """What patching did, per graph (``None`` for the global one): elements written, deleted, graphs rebuilt."""

    written: dict[str | None, int] = field(default_factory=dict)
    deleted: dict[str | None, int] = field(default_factory=dict)
    rebuilt: list[str | None] = field(default_factory=list)


def patch_hnsw(
    parent: HNSWIndex, keys: Sequence[str], labels: Sequence[str], vectors: np.ndarray, params: HNSWParams,
    *, threads: int = 1,
) -> tuple[HNSWIndex, PatchReport] | None:
    """The index of ``keys`` (with ``labels`` and ``vectors`` in that order) patched from ``parent``; None where it
    cannot be (sharded, other parameters or dimension) or where the global graph's deleted slots would pass
    ``REBUILD_SHARE``: the caller builds it."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if (parent.sharded or len(parent) == 0 or parent.dim != vectors.shape[1]
            or (parent.params.M, parent.params.ef_construction) != (params.M, params.ef_construction)):
        return None
    old_keys, old_labels = list(parent.keys), list(parent.labels)
    old_row = {k: i for i, k in enumerate(old_keys)}
    slot_rows = parent.slot_rows if parent.slot_rows is not None else np.arange(len(old_keys), dtype=np.int64)
    row_slot = np.full(len(old_keys), -1, dtype=np.int64)
    live = np.flatnonzero(slot_rows >= 0)
    row_slot[slot_rows[live]] = live
    old_vectors = parent.vectors(old_keys)
    next_slot = len(slot_rows)
    slot_of = np.empty(len(keys), dtype=np.int64)
    fresh: list[int] = []  # rows whose vector goes into a new slot: added, or changed (an update re-links far more)
    retired: list[tuple[int, str]] = []  # (slot, label it had)
    olds = np.asarray([old_row.get(key, -1) for key in keys], dtype=np.int64)
    kept = np.flatnonzero(olds >= 0)
    same = np.zeros(len(keys), dtype=bool)  # the same vector (up to float noise; a changed text moves it far)
    same[kept] = np.abs(np.asarray(old_vectors[olds[kept]], dtype=np.float32) - vectors[kept]).max(axis=1) <= 1e-6
    for row, key in enumerate(keys):
        old = old_row.get(key)
        if old is not None and old_labels[old] == labels[row] and same[row]:
            slot_of[row] = row_slot[old]
            continue
        slot_of[row] = next_slot
        next_slot += 1
        fresh.append(row)
        if old is not None:
            retired.append((int(row_slot[old]), old_labels[old]))
    wanted = set(keys)
    retired += [(int(row_slot[i]), old_labels[i]) for i, key in enumerate(old_keys) if key not in wanted]
    new_slot_rows = np.full(next_slot, -1, dtype=np.int64)
    new_slot_rows[slot_of] = np.arange(len(keys), dtype=np.int64)
    whole = parent.has_global_graph  # the new generation has the global graph where its parent had it
    global_gone = parent.deleted.get("global.bin", 0) + len(retired)
    if whole and global_gone > REBUILD_SHARE * max(len(keys), 1):
        return None
    report = PatchReport()
    label_arr = np.asarray(labels, dtype=object)
    fresh_arr = np.asarray(fresh, dtype=np.int64)
    graphs: dict[str | None, Any] = {}
    deleted: dict[str, int] = {}
    for label in [*([None] if whole else []), *sorted(set(labels))]:
        rows = np.arange(len(keys)) if label is None else np.flatnonzero(label_arr == label)
        adds = fresh_arr if label is None else fresh_arr[label_arr[fresh_arr] == label] if len(fresh_arr) else fresh_arr
        gone = [slot for slot, lab in retired if label is None or lab == label]
        graph, left = _patch_one(parent, label, rows, adds, gone, slot_of, vectors, params, threads, report)
        graphs[label] = graph
        deleted["global.bin" if label is None else label_file(label)] = left
    params = params.model_copy(update={"global_graph": whole})
    index = HNSWIndex(list(keys), list(labels), int(vectors.shape[1]), params, graphs.pop(None, None),
                      {lab: g for lab, g in graphs.items() if lab is not None}, vectors=vectors)
    index.slot_rows = new_slot_rows
    index.deleted = {name: n for name, n in deleted.items() if n}
    return index, report


def _patch_one(
    parent: HNSWIndex, label: str | None, rows: np.ndarray, adds: np.ndarray, gone: list[int], slot_of: np.ndarray,
    vectors: np.ndarray, params: HNSWParams, threads: int, report: PatchReport,
) -> tuple[Any, int]:
    """One graph's changes: ``rows`` it holds after, ``adds`` the rows it gains a slot for, ``gone`` the slots it
    loses. Returns (graph, marked-deleted slots left in it); built anew past the share or for a new label."""
    dim = vectors.shape[1]
    if label is None or label in parent.label_names():
        graph = parent.graph(label)
        left = graph.get_current_count() + len(adds) - len(rows)
        if left <= REBUILD_SHARE * max(len(rows), 1) or label is None:
            if graph.get_current_count() + len(adds) > graph.get_max_elements():
                graph.resize_index(graph.get_current_count() + len(adds))
            for slot in gone:
                graph.mark_deleted(slot)
            if len(adds):
                graph.add_items(vectors[adds], slot_of[adds], num_threads=threads)
            report.written[label] = len(adds)
            report.deleted[label] = len(gone)
            # counted after: a mapped graph (``graphs.index.ann``) reuses a deleted slot and counts none
            return graph, graph.get_current_count() - len(rows)
    graph = new_graph(dim, len(rows), params, _SEED)
    graph.add_items(vectors[rows], slot_of[rows], num_threads=threads)
    report.rebuilt.append(label)
    return graph, 0
