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
the whole index (which starts the slots afresh). A sharded index, or one whose parameters or dimension changed,
is built in full by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from graphs.index.hnsw import HNSWIndex, label_file
from graphs.index.hnsw_shards import new_graph
from graphs.manifest import HNSWParams

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.engine.local import EmbedderSpec
    from graphs.index.bm25 import BM25Index
    from graphs.index.phrases import PhraseIndex
    from graphs.skb.compact_write import EdgePart, NodePart
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
    global_gone = parent.deleted.get("global.bin", 0) + len(retired)
    if global_gone > REBUILD_SHARE * max(len(keys), 1):
        return None
    report = PatchReport()
    label_arr = np.asarray(labels, dtype=object)
    fresh_arr = np.asarray(fresh, dtype=np.int64)
    graphs: dict[str | None, Any] = {}
    deleted: dict[str, int] = {}
    for label in [None, *sorted(set(labels))]:
        rows = np.arange(len(keys)) if label is None else np.flatnonzero(label_arr == label)
        adds = fresh_arr if label is None else fresh_arr[label_arr[fresh_arr] == label] if len(fresh_arr) else fresh_arr
        gone = [slot for slot, lab in retired if label is None or lab == label]
        graph, left = _patch_one(parent, label, rows, adds, gone, slot_of, vectors, params, threads, report)
        graphs[label] = graph
        deleted["global.bin" if label is None else label_file(label)] = left
    index = HNSWIndex(list(keys), list(labels), int(vectors.shape[1]), params, graphs.pop(None),
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
            return graph, left
    graph = new_graph(dim, len(rows), params, _SEED)
    graph.add_items(vectors[rows], slot_of[rows], num_threads=threads)
    report.rebuilt.append(label)
    return graph, 0


class NodeTexts(Sequence[str]):
    """The node texts of ``keys`` in ``skb``, each made when read (``SKB.node_text``)."""

    def __init__(self, skb: SKB, keys: Sequence[str]) -> None:
        self.skb = skb
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self.skb.node_text(key) for key in self.keys[i]]
        return self.skb.node_text(self.keys[i])


class PatchEngine:
    """The in-process build engine (``graphs.engine.LocalEngine``) whose HNSW stage patches the parent
    generation's graphs (``patch_hnsw``); everything else, and an index it cannot patch, as a build does."""

    name = "local"

    def __init__(self, parent: Path, changed: Collection[str], shards: int = 1, parent_skb: SKB | None = None,
                 changed_edges: Collection[tuple[str, str, str]] = (),
                 stale_texts: Collection[str] | None = None, edge_source: np.ndarray | None = None) -> None:
        """``parent``: the parent generation's directory; ``changed``: the keys of nodes changed or deleted;
        ``parent_skb`` and ``changed_edges`` (src, rel, dst upserted or deleted): for patching the parent's graph
        store (without the parent's graph it is loaded); ``stale_texts``: the nodes whose text may differ from
        the parent's (``changes.stale_texts``): every other node's vector and BM25 terms are the parent's, and
        its text is never made (None: every text is made and embedded through the cache); ``edge_source``:
        each edge's position in the parent's list (``ApplyReport.edge_source``)."""
        from graphs.engine import LocalEngine

        self.local = LocalEngine(shards=shards)
        self.parent_dir = parent
        self.parent_skb = parent_skb
        self.changed_edges = changed_edges
        self.store_patched = False
        self.parent_hnsw = parent / "hnsw"
        self.parent_phrases = parent / "phrases"
        self.changed = changed
        self.stale_texts = stale_texts
        self.edge_source = edge_source
        self.report: PatchReport | None = None
        self.phrases_patched = False
        self.reused_vectors = 0
        self.bm25_patched = False
        self.compact_patched = False
        self.lines_reused = False
        self._parent_index: HNSWIndex | None = None

    def _parent(self) -> HNSWIndex | None:
        """The parent's HNSW index, read once for the embedding and HNSW stages; None where it cannot be patched
        (sharded, or absent)."""
        if self._parent_index is None and self.local.shards == 1 and (self.parent_hnsw / "ids.json").is_file():
            self._parent_index = HNSWIndex.load(self.parent_hnsw)
        return self._parent_index

    def node_texts(self, skb: SKB, keys: Sequence[str]) -> Sequence[str]:
        """The texts stage of ``graphs.build``: made on demand, so a stage that reuses the parent's work for the
        nodes outside ``stale_texts`` never makes theirs."""
        return NodeTexts(skb, keys)

    def embed(self, embedder: Embedder, spec: EmbedderSpec, texts: Sequence[str], *, chunk: int,
              progress: Callable[[int, int], None] | None) -> np.ndarray:
        """The embedding stage: the parent's vector for every node outside ``stale_texts`` and every stale node
        whose text is the parent's (the same text gave it), the embedder (through its cache) for the rest."""
        from graphs.embedding.embedder import embed_all

        parent = self._parent() if self.stale_texts is not None and isinstance(texts, NodeTexts) else None
        if parent is None or parent.dim != embedder.dim or parent.sharded:
            return self.local.embed(embedder, spec, texts, chunk=chunk, progress=progress)
        assert isinstance(texts, NodeTexts) and self.stale_texts is not None
        known = set(parent.keys)
        stale = self.stale_texts
        before = self.parent_skb

        def same_text(i: int, key: str) -> bool:  # a stale node whose text came out as the parent's
            return before is not None and key in before.nodes and before.node_text(key) == texts[i]

        reuse = [i for i, key in enumerate(texts.keys) if key in known and (key not in stale or same_text(i, key))]
        kept = set(reuse)
        todo = [i for i in range(len(texts)) if i not in kept]
        vectors = np.empty((len(texts), embedder.dim), dtype=np.float32)
        if reuse:
            vectors[reuse] = parent.vectors([texts.keys[i] for i in reuse])
        if todo:
            vectors[todo] = embed_all(embedder, [texts[i] for i in todo], chunk=chunk, progress=progress)
        self.reused_vectors = len(reuse)
        return vectors

    def bm25(self, keys: list[str], labels: list[str], texts: Sequence[str]) -> BM25Index:
        """The BM25 stage: the parent's term counts for every node outside ``stale_texts``
        (``BM25Index.patched``), else built."""
        from graphs.index.bm25 import BM25Index

        if self.stale_texts is not None:
            patched = BM25Index.patched(self.parent_dir / "bm25", keys, labels, texts, self.stale_texts)
            if patched is not None:
                self.bm25_patched = True
                return patched
        return self.local.bm25(keys, labels, texts)

    def phrase_index(self, skb: SKB, embedder: Embedder, *, batch: int = 512,
                     progress: Callable[[int, int], None] | None = None) -> PhraseIndex | None:
        """The phrase stage of ``graphs.build``: the parent's phrase index patched, else built."""
        from graphs.index.phrases import build_phrase_index
        from graphs.update.phrase_patch import patch_phrases

        patched = patch_phrases(self.parent_phrases, skb, self.changed, embedder, batch=batch, progress=progress,
                                parent_skb=self.parent_skb)
        self.phrases_patched = patched is not None
        return patched if patched is not None else build_phrase_index(skb, embedder, batch=batch, progress=progress)

    def graph_store(self, skb: SKB, data_dir: Path, *, progress: Callable[[int, int], None] | None = None) -> bool:
        """The store stage of ``graphs.build``: the parent's FalkorDB dump patched (``patch_store``); False: load it."""
        from graphs.manifest import GRAPH_FILE
        from graphs.update.store_patch import patch_store

        if self.parent_skb is None:
            return False
        self.store_patched = patch_store(self.parent_dir / GRAPH_FILE, data_dir, self.parent_skb, skb, self.changed,
                                         self.changed_edges, progress=progress)
        return self.store_patched

    def graph_lines(self, skb: SKB) -> tuple[list[bytes], list[bytes]] | None:
        """The graph files' node and edge lines, the parent's for every record the change set left alone
        (``graphs.update.jsonl_patch``); None: ``write_jsonl`` encodes them all."""
        from graphs.update.jsonl_patch import spliced_lines

        if self.parent_skb is None:
            return None
        lines = spliced_lines(self.parent_dir / "skb", self.parent_skb, skb, self.edge_source)
        self.lines_reused = lines is not None
        return lines

    def compact_parts(self, skb: SKB) -> tuple[NodePart, EdgePart] | None:
        """The compact SKB's arrays taken from the parent's for every record the change set left as it was
        (``graphs.update.compact_patch``); None: ``write_compact`` makes them all."""
        from graphs.skb.compact import COMPACT_DIR
        from graphs.update.compact_patch import patch_compact_parts

        if self.parent_skb is None:
            return None
        parts = patch_compact_parts(self.parent_dir / "skb" / COMPACT_DIR, self.parent_skb, skb, self.edge_source)
        self.compact_patched = parts is not None
        return parts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)

    def hnsw(self, keys: list[str], labels: list[str], vectors: np.ndarray, params: HNSWParams,
             out: Path) -> tuple[HNSWIndex, dict[str, str]]:
        parent = self._parent()
        if parent is not None:
            self._parent_index = None  # patched in place: no later stage reads it
            patched = patch_hnsw(parent, keys, labels, vectors, params, threads=2)
            if patched is not None:
                index, self.report = patched
                return index, index.save(out)
        return self.local.hnsw(keys, labels, vectors, params, out)
