"""The HNSW graphs of a new generation patched from the parent's instead of built again.

Why: building the graphs is the largest part of a build once every vector comes from the cache (minutes on
tens of thousands of nodes); a change set touches a few hundred. The parent's graphs are read into memory (its
files are never written), and each graph -- the global one and one per label -- gets its changes: a vector that
changed is replaced in place (hnswlib re-links the element), a node that left the graph is marked deleted, a new
node is added. Ids stay row positions (``graphs.index.hnsw``): a deleted node's row is taken by an added node, or
by the last row when nothing is added, so the id table stays dense and only the rows that changed move.

Marked-deleted slots are never returned by a search but stay in the graph; once they pass ``REBUILD_SHARE`` of a
graph's live elements, that graph is built anew from the vectors (``hnswlib`` recall degrades as they grow).
A sharded index, or one whose parameters or dimension changed, is built in full by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphs.index.hnsw import HNSWIndex, label_file
from graphs.index.hnsw_shards import new_graph
from graphs.manifest import HNSWParams

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.index.phrases import PhraseIndex
    from graphs.skb.model import SKB

#: A graph whose marked-deleted slots exceed this share of its live elements is rebuilt from its vectors.
REBUILD_SHARE = 0.1
_SEED = 100


@dataclass
class PatchReport:
    """What patching did, per graph (``None`` for the global one): elements written, deleted, graphs rebuilt."""

    written: dict[str | None, int] = field(default_factory=dict)
    deleted: dict[str | None, int] = field(default_factory=dict)
    rebuilt: list[str | None] = field(default_factory=list)


def _final_order(old: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The new id table: surviving keys keep their rows, added keys take deleted rows first, then the last rows
    move into what is left, and the remaining added keys come last."""
    wanted = set(keys)
    old_set = set(old)
    added = [k for k in keys if k not in old_set]
    table: list[str | None] = [k if k in wanted else None for k in old]
    holes = [i for i, k in enumerate(table) if k is None]
    taken = min(len(holes), len(added))
    for i, key in zip(holes[:taken], added[:taken], strict=True):
        table[i] = key
    added, holes = added[taken:], holes[taken:]
    for hole in holes:  # ascending: the last live row moves into each hole below it
        while table and table[-1] is None:
            table.pop()
        if hole >= len(table):
            break
        table[hole] = table.pop()
    return [k for k in table if k is not None] + added


def patch_hnsw(
    parent: HNSWIndex, keys: Sequence[str], labels: Sequence[str], vectors: np.ndarray, params: HNSWParams,
    *, threads: int = 1,
) -> tuple[HNSWIndex, PatchReport] | None:
    """The index of ``keys`` (with ``labels`` and ``vectors`` in that order) patched from ``parent``; None where it
    cannot be (sharded, other parameters or dimension): the caller builds it."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if (parent.sharded or len(parent) == 0 or parent.dim != vectors.shape[1]
            or (parent.params.M, parent.params.ef_construction) != (params.M, params.ef_construction)):
        return None
    new_row = {k: i for i, k in enumerate(keys)}
    label_of = dict(zip(keys, labels, strict=True))
    old_keys, old_labels = list(parent.keys), list(parent.labels)
    old_vectors = parent.vectors(old_keys)
    final = _final_order(old_keys, keys)
    final_labels = [label_of[k] for k in final]
    final_vectors = vectors[[new_row[k] for k in final]]
    same = np.zeros(len(final), dtype=bool)  # row p holds the same key, label and vector as in the parent
    for p, key in enumerate(final):
        if p < len(old_keys) and old_keys[p] == key and old_labels[p] == final_labels[p]:
            same[p] = np.array_equal(old_vectors[p], final_vectors[p])
    report = PatchReport()
    graphs = {}
    deleted: dict[str, int] = {}
    for label in [None, *sorted(set(final_labels))]:
        rows = np.arange(len(final)) if label is None else np.flatnonzero(np.asarray(final_labels, dtype=object) == label)
        graph, gone = _patch_one(parent, label, rows, final_vectors, same, old_labels, params, threads, report)
        graphs[label] = graph
        deleted["global.bin" if label is None else label_file(label)] = gone
    index = HNSWIndex(final, final_labels, int(vectors.shape[1]), params, graphs.pop(None),
                      {lab: g for lab, g in graphs.items() if lab is not None}, vectors=final_vectors)
    index.deleted = {name: n for name, n in deleted.items() if n}
    return index, report


def _patch_one(
    parent: HNSWIndex, label: str | None, rows: np.ndarray, vectors: np.ndarray, same: np.ndarray,
    old_labels: Sequence[str], params: HNSWParams, threads: int, report: PatchReport,
) -> tuple[object, int]:
    """One graph's changes (rows: the final rows it holds); returns (graph, marked-deleted slots in it)."""
    dim = vectors.shape[1]
    if label is not None and label not in parent.label_names():
        graph = new_graph(dim, len(rows), params, _SEED)
        graph.add_items(vectors[rows], rows, num_threads=threads)
        report.rebuilt.append(label)
        return graph, 0
    graph = parent.graph(label)
    present = set(graph.get_ids_list())
    old_live = {p for p in range(len(old_labels)) if label is None or old_labels[p] == label}
    wanted = set(rows.tolist())
    write = np.asarray([p for p in rows.tolist() if not (same[p] and p in old_live)], dtype=np.int64)
    remove = sorted(old_live - wanted)
    slots = len(present | set(write.tolist()))
    gone = slots - len(wanted)
    if gone > REBUILD_SHARE * max(len(wanted), 1):
        graph = new_graph(dim, len(rows), params, _SEED)
        graph.add_items(vectors[rows], rows, num_threads=threads)
        report.rebuilt.append(label)
        return graph, 0
    if slots > graph.get_max_elements():
        graph.resize_index(slots)
    for p in remove:
        graph.mark_deleted(int(p))
    if len(write):
        graph.add_items(vectors[write], write, num_threads=threads)
    report.written[label] = len(write)
    report.deleted[label] = len(remove)
    return graph, gone


class PatchEngine:
    """The in-process build engine (``graphs.engine.LocalEngine``) whose HNSW stage patches the parent
    generation's graphs (``patch_hnsw``); everything else, and an index it cannot patch, as a build does."""

    name = "local"

    def __init__(self, parent: Path, changed: Collection[str], shards: int = 1) -> None:
        """``parent``: the parent generation's directory; ``changed``: the keys of nodes changed or deleted."""
        from graphs.engine import LocalEngine

        self.local = LocalEngine(shards=shards)
        self.parent_hnsw = parent / "hnsw"
        self.parent_phrases = parent / "phrases"
        self.changed = changed
        self.report: PatchReport | None = None
        self.phrases_patched = False

    def phrase_index(self, skb: SKB, embedder: Embedder, *, batch: int = 512,
                     progress: Callable[[int, int], None] | None = None) -> PhraseIndex | None:
        """The phrase stage of ``graphs.build``: the parent's phrase index patched, else built."""
        from graphs.index.phrases import build_phrase_index
        from graphs.update.phrase_patch import patch_phrases

        patched = patch_phrases(self.parent_phrases, skb, self.changed, embedder, batch=batch, progress=progress)
        self.phrases_patched = patched is not None
        return patched if patched is not None else build_phrase_index(skb, embedder, batch=batch, progress=progress)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)

    def hnsw(self, keys: list[str], labels: list[str], vectors: np.ndarray, params: HNSWParams,
             out: Path) -> tuple[HNSWIndex, dict[str, str]]:
        if self.local.shards == 1 and (self.parent_hnsw / "ids.json").is_file():
            patched = patch_hnsw(HNSWIndex.load(self.parent_hnsw), keys, labels, vectors, params, threads=2)
            if patched is not None:
                index, self.report = patched
                return index, index.save(out)
        return self.local.hnsw(keys, labels, vectors, params, out)
