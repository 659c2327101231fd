"""Approximate nearest-neighbour search over node embeddings (cosine HNSW graphs of hnswlib or USearch:
``graphs.index.ann``).

Why one index per label as well as a global one: filtering a global HNSW graph to
a rare label (hnswlib's ``filter=``) walks most of the graph and loses recall when
the label is a small fraction of the nodes; a per-label graph answers "diseases
like this" as well as a global one answers "anything like this". Every index uses
the same integer ids (positions in ``keys``), so one id table serves them all.

Why an unrestricted search asks the label graphs too: on a graph of many short, alike texts (names of people
and films) a question's greedy walk through the one global graph can stop in the wrong cluster and miss its
nearest node outright (MetaQA: 11 % of questions at ef 128, ``evals/reports/hnsw-global``). Each label's graph
is smaller and more uniform, and the merge of their top k is exact over the union. A search without a label that
asks for it (``per_label=True``: the semantic-search tool, linking a mention by its embedding) is the merge of one
search per label while the index has at most ``MERGE_LABELS_UP_TO`` labels. It costs about one search per label
(2.6-2.8x the global walk for one query at 3 and 8 labels), so hybrid ranking, which fuses a pool of dense
candidates with BM25, keeps the one walk.

Which graphs an index holds and with which parameters: ``graphs.index.hnsw_params``.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias, cast

import numpy as np

from graphs.errors import ConfigError, IndexCorruptError
from graphs.heap import one_copy, table
from graphs.index.ann import ANNGraph, new_graph
from graphs.index.hnsw_files import (
    FORMAT,
    GLOBAL_FILE,
    IDS_FILE,
    VECTORS_FILE,
    label_file,
    map_vectors,
    open_graph,
    write_sharded_meta,
)
from graphs.index.hnsw_params import MERGE_LABELS_UP_TO, resolved_params
from graphs.index.hnsw_shards import (
    build_shard,
    checked_rows,
    graph_vectors,
    merge_topk,
    save_graph,
    save_shard,
    shard_graphs,
    shard_ranges,
)
from graphs.index.meta import read_index_meta
from graphs.manifest import HNSWParams, atomic_write_bytes, atomic_write_json, fsync_dir, sha256_file

__all__ = ["GLOBAL_FILE", "HNSWIndex", "HNSWParams", "label_file", "write_sharded_meta"]

#: Below this many vectors an exact scan is cheaper and exact; hnswlib can also fail to
#: return k results from tiny graphs.
_EXACT_BELOW = 64
def _num_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


Opener = Callable[[], ANNGraph]
"""Opens one saved HNSW graph on first use (``HNSWIndex.load`` opens none up front)."""
Source: TypeAlias = ANNGraph | Opener
ShardSources: TypeAlias = tuple[list[Source], dict[str, list[Source | None]]]
"""A sharded index's graphs: the global graph of each shard, and per label each shard's graph (None where
the shard holds no node of the label)."""


class HNSWIndex:
    """Per-label cosine HNSW graphs, and a global one where it pays (``wants_global_graph``), sharing one id table.

    A loaded index opens each graph file the first time a search needs it: a process that only
    searches genes never reads the global or the phenotype graph (hundreds of MB on large SKBs).
    """

    def __init__(
        self,
        keys: list[str],
        labels: list[str],
        dim: int,
        params: HNSWParams,
        global_index: ANNGraph | Opener | None,
        label_indexes: Mapping[str, ANNGraph | Opener],
        *,
        vectors: np.ndarray | None = None,
        shards: tuple[list[tuple[int, int]], ShardSources] | None = None,
    ) -> None:
        """``shards``: the row ranges and graphs of a sharded index (``graphs.index.hnsw_shards``); then
        ``global_index`` and ``label_indexes`` only name what exists, and ``vectors`` is required. ``global_index``
        None: an unsharded index without the global graph (every search without a label merges the label graphs);
        then ``vectors`` is required too."""
        self.keys = table(keys)  # graphs.heap: untracked by the garbage collector
        self.labels = table(labels)
        self.dim = dim
        self.params = params
        self._global_src = global_index
        self._label_src = label_indexes
        self._opened: dict[tuple[str | None, int], ANNGraph] = {}
        self.shard_ranges, (self._shard_global, self._shard_label) = shards or ([(0, len(keys))], ([], {}))
        if (len(self.shard_ranges) > 1 or global_index is None) and vectors is None and keys:
            raise ConfigError("a sharded HNSW index, or one without its global graph, needs its vectors "
                              "(vectors.npy) -- rebuild the index")
        self._open_lock = threading.Lock()
        self._vectors = vectors
        self._pos: Mapping[str, int] = {key: i for i, key in enumerate(keys)}
        #: Slots marked deleted per graph file (``graphs.update`` patches a graph in place): a saved graph then holds
        #: this many elements beyond its live ones, which the id table records so that loading can check the count.
        self.deleted: dict[str, int] = {}
        #: A patched index's graph ids are slots, not rows: ``slot_rows[id]`` is the row (-1: a deleted slot).
        #: None: ids are rows (every built index).
        self.slot_rows: np.ndarray | None = None
        self._label_ids: dict[str, np.ndarray] = {}
        label_arr = np.asarray(labels, dtype=object)
        for label in label_indexes:
            self._label_ids[label] = np.flatnonzero(label_arr == label).astype(np.int64)
        self.set_ef(params.ef)

    @property
    def sharded(self) -> bool:
        return len(self.shard_ranges) > 1

    @property
    def has_global_graph(self) -> bool:
        """Whether the index holds the global graph (see ``wants_global_graph``)."""
        return self._global_src is not None

    def _graph(self, label: str | None, shard: int = 0) -> ANNGraph:
        """The global (``None``) or a label's graph (of one shard), opened on first use with the current ef."""
        index = self._opened.get((label, shard))
        if index is not None:
            return index
        with self._open_lock:
            index = self._opened.get((label, shard))
            if index is None:
                if self.sharded:
                    src = self._shard_global[shard] if label is None else self._shard_label[label][shard]
                    assert src is not None
                else:
                    src = self._global_src if label is None else self._label_src[label]
                    if src is None:
                        raise ConfigError("this HNSW index was built without its global graph: search it without "
                                          "a label (the label graphs merged) or by label")
                graph = cast("Opener", src)() if _is_opener(src) else cast("ANNGraph", src)
                graph.set_ef(self.params.ef)
                self._opened[(label, shard)] = index = graph
        return index

    # -- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        keys: list[str],
        labels: list[str],
        vectors: np.ndarray,
        params: HNSWParams | None = None,
        *,
        num_threads: int | None = None,
        seed: int = 100,
        shards: int = 1,
    ) -> HNSWIndex:
        """``shards`` > 1 builds the graphs in that many row ranges (``graphs.index.hnsw_shards``), one after
        the other here; ``graphs.engine`` builds them in parallel tasks (each shard with its global graph).
        One shard builds the global graph where ``params.global_graph`` asks for it (None: ``wants_global_graph``)."""
        params = params or HNSWParams()
        vectors = checked_rows(keys, labels, vectors)
        n, dim = vectors.shape
        threads = num_threads or _num_threads()
        if shards > 1 and n > 1:
            ranges = shard_ranges(n, shards)
            built = [build_shard(vectors, labels, a, b, params, seed, threads) for a, b in ranges]
            return cls.from_shards(keys, labels, vectors, params, ranges, built)
        params = resolved_params(params, n, len(set(labels)))
        if params.global_graph:
            global_index, by_label = build_shard(vectors, labels, 0, n, params, seed, threads)  # one shard: all rows
            return cls(list(keys), list(labels), dim, params, global_index, dict(by_label))
        graphs = dict(shard_graphs(vectors, labels, 0, n, params, seed, threads, global_graph=False))
        stored = np.empty((n, dim), dtype=np.float32)  # as the graphs hold them (normalised)
        label_arr = np.asarray(labels, dtype=object)
        for label, graph in graphs.items():
            rows = np.flatnonzero(label_arr == label)
            stored[rows] = graph_vectors(graph, rows)
        return cls(list(keys), list(labels), dim, params, None,
                   {label: graph for label, graph in graphs.items() if label is not None}, vectors=stored)

    @classmethod
    def from_shards(
        cls,
        keys: list[str],
        labels: list[str],
        vectors: np.ndarray,
        params: HNSWParams,
        ranges: list[tuple[int, int]],
        built: Sequence[tuple[Source, Mapping[str, Source]]],
    ) -> HNSWIndex:
        """A sharded index from each range's (global graph, {label: graph})."""
        names = sorted(set(labels))
        per_label: dict[str, list[Source | None]] = {lab: [g.get(lab) for _, g in built] for lab in names}
        sources: ShardSources = ([g for g, _ in built], per_label)
        first = built[0][0]
        return cls(list(keys), list(labels), int(vectors.shape[1]), params, first, dict.fromkeys(names, first),
                   vectors=vectors, shards=(list(ranges), sources))

    @classmethod
    def empty(cls, dim: int, params: HNSWParams | None = None) -> HNSWIndex:
        """An index holding no vector: every search answers ``[]``.

        Why: an index built in stages (``IndexConfig.stage = "core"``) is served before its vectors
        exist; its consumers (dense search, entity linking's embedding fallback, SAGE ranking) then
        rank by what exists instead of each checking for a missing part."""
        params = params or HNSWParams()
        return cls([], [], dim, params, new_graph(dim, 1, params, 100), {})

    # -- queries --------------------------------------------------------------------
    def share_keys(self, keys: tuple[str, ...], positions: Mapping[str, int]) -> bool:
        """Hold ``keys`` and their ``positions`` instead of this index's own copies when they list the same keys in
        the same order (the SKB opened beside it); True when they do. Why: the SKB, this index and BM25 each read
        the graph's keys from their own files, and the SKB, this index, the embedding matrix and SAGE each made a
        key -> row dictionary: three tables and four dictionaries of the same keys in every answering process
        (13 MB on a graph of 37,000 nodes)."""
        if keys is not self.keys and keys != self.keys:
            return False
        self.keys, self._pos = keys, positions
        return True

    def key_positions(self) -> Mapping[str, int]:
        """Each key's row: this index's own dictionary (the SKB's, once shared). Read it, never change it."""
        return self._pos

    def __len__(self) -> int:
        return len(self.keys)

    def label_names(self) -> list[str]:
        return sorted(self._label_src)

    def set_ef(self, ef: int) -> None:
        """Raise for recall, lower for speed; takes effect on the next query."""
        if ef < 1:
            raise ConfigError(f"HNSW ef must be >= 1, got {ef}")
        self.params = self.params.model_copy(update={"ef": ef})
        with self._open_lock:
            for index in self._opened.values():
                index.set_ef(ef)

    def graph(self, label: str | None) -> ANNGraph:
        """The global (``None``) or one label's graph of an unsharded index, opened if it was not."""
        return self._graph(label)

    def _index_for(self, label: str | None) -> tuple[ANNGraph | None, int]:
        if label is None:
            return self._graph(None), len(self.keys)
        if label not in self._label_src:
            return None, 0
        return self._graph(label), len(self._label_ids[label])

    def _check_query(self, vectors: np.ndarray) -> np.ndarray:
        arr = np.asarray(vectors, dtype=np.float32)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ConfigError(
                f"query vector has shape {tuple(np.shape(vectors))} but this index holds {self.dim}-dimensional "
                "vectors -- embed the query with the model the index was built with"
            )
        return np.ascontiguousarray(arr)

    def search(self, vector: np.ndarray, k: int, label: str | None = None, *,
               per_label: bool = False) -> list[tuple[str, float]]:
        """Top-k (key, cosine similarity) pairs, best first; an unknown label yields []. ``per_label``: without a
        label, merge one search per label graph (see the module docstring)."""
        return self.search_batch(self._check_query(vector), k, label, per_label=per_label)[0]

    def search_batch(self, vectors: np.ndarray, k: int, label: str | None = None, *,
                     per_label: bool = False) -> list[list[tuple[str, float]]]:
        queries = self._check_query(vectors)
        size = len(self.keys) if label is None else len(self._label_ids.get(label, ()))
        k = min(int(k), size)
        if k <= 0 or (label is not None and label not in self._label_src):
            return [[] for _ in range(len(queries))]
        if size < _EXACT_BELOW:
            return self._exact(queries, k, label)
        if label is None and ((per_label and self._merges_labels()) or not self.has_global_graph):
            return self._merged_labels(queries, k)
        if self.sharded:
            return self._search_shards(queries, k, label)
        return self._pairs(*self._graph_top(queries, k, label))

    def _pairs(self, rows: np.ndarray, sims: np.ndarray) -> list[list[tuple[str, float]]]:
        """Each query's (key, similarity) hits from its rows and similarities, in their order."""
        return [[(self.keys[int(i)], float(sim)) for i, sim in zip(row_ids, row_sims, strict=True)]
                for row_ids, row_sims in zip(rows, sims, strict=True)]

    def _graph_top(self, queries: np.ndarray, k: int, label: str | None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, float32 cosine similarities) of each query's top ``k`` in the global (None) or a label's graph of
        an unsharded index."""
        # hnswlib searches with max(ef, k), so ef is never mutated per query (safe across threads).
        try:
            ids, dists = self._graph(label).knn_query(queries, k=k, num_threads=1 if len(queries) == 1 else _num_threads())
        except RuntimeError:
            # hnswlib refuses when the graph cannot produce k results (tiny/odd graphs); exact is always right.
            return self._exact_top(queries, k, label)
        if self.slot_rows is not None:
            ids = self.slot_rows[ids]
        return ids, 1.0 - dists

    def _merges_labels(self) -> bool:
        """Whether a ``per_label`` search can be the merge of the label graphs' (see the module docstring): more
        than one label, at most MERGE_LABELS_UP_TO, and every row in a label that has its graph."""
        names = self._label_src.keys()
        return (1 < len(names) <= MERGE_LABELS_UP_TO
                and sum(len(self._label_ids.get(name, ())) for name in names) == len(self.keys))

    def _merged_labels(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Each label's top k, merged by similarity (ties by key, so the merge is deterministic).

        Why arrays until the end: the labels' answers are several times k hits, and making a (key, similarity) pair
        of each and sorting them all cost a quarter of a merged search (300k nodes, 4 labels, 100 hits: 0.5 of
        2.0 ms); only the hits that can make the top k (those at or above its k-th similarity) become pairs."""
        if self.sharded:
            per_label = [self.search_batch(queries, k, label) for label in self._label_src]
            return [sorted(itertools.chain.from_iterable(hits[i] for hits in per_label),
                           key=lambda h: (-h[1], h[0]))[:k] for i in range(len(queries))]
        parts = [self._label_top(queries, k, label) for label in self._label_src if len(self._label_ids[label])]
        if not parts:
            return [[] for _ in range(len(queries))]
        rows = np.concatenate([part[0] for part in parts], axis=1)
        sims = np.concatenate([part[1] for part in parts], axis=1)
        keys = self.keys
        out: list[list[tuple[str, float]]] = []
        for row_ids, row_sims in zip(rows, sims, strict=True):
            n = len(row_sims)
            pick = range(n) if n <= k else np.flatnonzero(row_sims >= np.partition(row_sims, n - k)[n - k]).tolist()
            hits = [(keys[int(row_ids[j])], float(row_sims[j])) for j in pick]
            out.append(sorted(hits, key=lambda h: (-h[1], h[0]))[:k])
        return out

    def _label_top(self, queries: np.ndarray, k: int, label: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, similarities) of each query's top ``k`` in one label of an unsharded index: the hits
        ``search_batch(queries, k, label)`` returns, as arrays."""
        size = len(self._label_ids[label])
        k = min(k, size)
        return self._exact_top(queries, k, label) if size < _EXACT_BELOW else self._graph_top(queries, k, label)

    def _search_shards(self, queries: np.ndarray, k: int, label: str | None) -> list[list[tuple[str, float]]]:
        """Every shard's top-k (exact where a shard holds few of the rows), merged by distance, ties by id."""
        members = self._label_ids[label] if label is not None else None
        threads = 1 if len(queries) == 1 else _num_threads()
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for shard, (start, end) in enumerate(self.shard_ranges):
            if members is None:
                rows = np.arange(start, end, dtype=np.int64)
            else:
                lo, hi = np.searchsorted(members, [start, end])
                rows = members[lo:hi]
            if rows.size == 0:
                continue
            ks = min(k, int(rows.size))
            if rows.size < _EXACT_BELOW:
                ids, dists = self._exact_rows(queries, ks, rows)
            else:
                try:
                    ids, dists = self._graph(label, shard).knn_query(queries, k=ks, num_threads=threads)
                except RuntimeError:  # hnswlib could not return ks neighbours
                    ids, dists = self._exact_rows(queries, ks, rows)
            parts.append((ids, dists))
        merged = merge_topk(parts, k)
        return [[(self.keys[int(i)], float(1.0 - d)) for i, d in zip(ri, rd, strict=True)] for ri, rd in merged]

    def _exact_rows(self, queries: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, cosine distances) of the exact top-k among ``rows``."""
        assert self._vectors is not None
        mat = np.asarray(self._vectors[rows], dtype=np.float32)
        q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        sims = q @ mat.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return rows[top], 1.0 - np.take_along_axis(sims, top, axis=1)

    def _exact(self, queries: np.ndarray, k: int, label: str | None) -> list[list[tuple[str, float]]]:
        return self._pairs(*self._exact_top(queries, k, label))

    def _exact_top(self, queries: np.ndarray, k: int, label: str | None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosine similarities) of each query's exact top ``k`` among ``label``'s rows (all: None)."""
        ids = self._label_ids[label] if label is not None else np.arange(len(self.keys), dtype=np.int64)
        if self._vectors is not None:
            mat = np.asarray(self._vectors[ids], dtype=np.float32)
        else:
            index, _ = self._index_for(label)
            assert index is not None
            mat = np.asarray(index.get_items(ids, return_type="numpy"), dtype=np.float32)
        q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        sims = q @ mat.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return ids[top], np.take_along_axis(sims, top, axis=1)

    def knn_by_key(self, key: str, k: int, label: str | None = None) -> list[tuple[str, float]]:
        """Neighbours of a stored node, excluding the node itself."""
        hits = self.search(self.vector(key), k + 1, label)
        return [(other, sim) for other, sim in hits if other != key][:k]

    def vector(self, key: str) -> np.ndarray:
        """The stored (unit-length) vector of a node."""
        pos = self._pos.get(key)
        if pos is None:
            raise KeyError(f"node {key!r} is not in the HNSW index")
        if self._vectors is not None:
            return np.array(self._vectors[pos], dtype=np.float32)
        return np.asarray(self._graph(None).get_items([pos], return_type="numpy"), dtype=np.float32)[0]

    def vectors(self, keys: Sequence[str]) -> np.ndarray:
        positions = []
        for key in keys:
            pos = self._pos.get(key)
            if pos is None:
                raise KeyError(f"node {key!r} is not in the HNSW index")
            positions.append(pos)
        if not positions:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._vectors is not None:
            if len(positions) == len(self.keys) and positions == list(range(len(self.keys))):
                return self._vectors  # every vector in id order: the read-only map itself, no copy
            return np.asarray(self._vectors[positions], dtype=np.float32)
        return graph_vectors(self._graph(None), positions)

    def __contains__(self, key: object) -> bool:
        return key in self._pos

    # -- persistence ----------------------------------------------------------------
    def save(self, dir: Path) -> dict[str, str]:
        """Write every index file atomically; returns {path relative to ``dir``: sha256}."""
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        label_files = {label: label_file(label) for label in self._label_src}
        if self.sharded:
            layout: list[dict[str, str]] = []
            for shard in range(len(self.shard_ranges)):
                graphs = {lab: self._graph(lab, shard) for lab, srcs in self._shard_label.items() if srcs[shard]}
                names, written = save_shard(dir, shard, (self._graph(None, shard), graphs), label_files)
                layout.append(names)
                files.update(written)
            return files | self.write_sharded_meta(dir, layout)
        whole = [(GLOBAL_FILE, self._graph(None))] if self.has_global_graph else []
        for name, index in whole + [(label_files[label], self._graph(label)) for label in sorted(self._label_src)]:
            files[name] = save_graph(index, dir / name)
        return files | self.write_table(dir)

    def write_table(self, dir: Path) -> dict[str, str]:
        """``vectors.npy`` and the id table of an unsharded index whose graph files are written; {file: sha256}."""
        files: dict[str, str] = {}
        label_files = {label: label_file(label) for label in self._label_src}
        if self.keys:
            import io

            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(self.vectors(self.keys), dtype=np.float32), allow_pickle=False)
            atomic_write_bytes(dir / VECTORS_FILE, buf.getvalue())
            files[VECTORS_FILE] = sha256_file(dir / VECTORS_FILE)
        meta = {
            "format": FORMAT,
            "space": "cosine",
            "dim": self.dim,
            "params": self.params.model_dump(),
            "global": GLOBAL_FILE if self.has_global_graph else None,
            "label_files": label_files,
            "keys": self.keys,
            "labels": self.labels,
            **({"deleted": dict(self.deleted)} if any(self.deleted.values()) else {}),
            **({"slot_rows": self.slot_rows.tolist()} if self.slot_rows is not None else {}),
        }
        atomic_write_json(dir / IDS_FILE, meta, indent=None)
        files[IDS_FILE] = sha256_file(dir / IDS_FILE)
        fsync_dir(dir)
        return files

    def write_sharded_meta(self, dir: Path, layout: list[dict[str, str]]) -> dict[str, str]:
        """``vectors.npy`` and the id table of a sharded index whose shard files exist (``layout``: per shard,
        {label: file}); returns their {file: sha256}."""
        return write_sharded_meta(Path(dir), self.keys, self.labels, self.vectors(self.keys), self.params,
                                  self.shard_ranges, layout)

    @classmethod
    def load(cls, dir: Path, *, ef: int | None = None, checksums: dict[str, str] | None = None) -> HNSWIndex:
        """Open a saved index; pass ``checksums`` (from the manifest) to verify files first."""
        dir = Path(dir)
        meta_path = dir / IDS_FILE

        deleted: dict[str, int] = {}
        slots: list[np.ndarray] = []

        def parse(
            meta: dict[str, Any],
        ) -> tuple[int, HNSWParams, list[str], list[str], dict[str, str], str | None, Any]:
            deleted.update({str(k): int(v) for k, v in (meta.get("deleted") or {}).items()})
            if meta.get("slot_rows") is not None:
                slots.append(np.asarray(meta["slot_rows"], dtype=np.int64))
            return (
                int(meta["dim"]),
                HNSWParams.model_validate(meta["params"]),
                [str(k) for k in meta["keys"]],
                list(one_copy(str(lab) for lab in meta["labels"])),
                {str(k): str(v) for k, v in meta["label_files"].items()},
                None if meta["global"] is None else str(meta["global"]),
                meta.get("shards"),
            )

        dim, params, keys, labels, label_files, global_name, shards = read_index_meta(
            dir, IDS_FILE, "HNSW index", checksums, parse
        )
        if len(keys) != len(labels):
            raise IndexCorruptError(f"{meta_path} has {len(keys)} keys but {len(labels)} labels -- rebuild it")
        counts: dict[str, int] = {}
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
        if ef is not None:
            params = params.model_copy(update={"ef": ef})
        if shards is not None:
            return cls._load_shards(dir, keys, labels, dim, params, shards)
        for name in [*([global_name] if global_name is not None else []), *label_files.values()]:
            if not (dir / name).is_file():
                raise IndexCorruptError(f"HNSW file {dir / name} is missing -- rebuild the index with `skb index`")
        vectors = map_vectors(dir, len(keys), dim)
        if global_name is None and (vectors is None or set(label_files) != set(labels)):
            raise IndexCorruptError(f"{meta_path} names no global graph, but its index lacks vectors.npy or a label "
                                    "graph -- rebuild the index with `skb index`")
        global_index = (None if global_name is None
                        else cls._opener(dir / global_name, dim, len(keys) + deleted.get(global_name, 0), params.mapped))
        by_label = {label: cls._opener(dir / name, dim, counts.get(label, 0) + deleted.get(name, 0), params.mapped)
                    for label, name in label_files.items()}
        loaded = cls(keys, labels, dim, params, global_index, by_label, vectors=vectors)
        loaded.deleted = deleted
        if slots:
            rows = slots[0]
            if int((rows >= 0).sum()) != len(keys) or (len(rows) and int(rows.max()) >= len(keys)):
                raise IndexCorruptError(f"{meta_path} maps its graph slots to rows outside its {len(keys)} keys -- "
                                        "rebuild the index with `skb index`")
            loaded.slot_rows = rows
        return loaded

    @classmethod
    def _load_shards(
        cls, dir: Path, keys: list[str], labels: list[str], dim: int, params: HNSWParams, shards: Any
    ) -> HNSWIndex:
        """A sharded index from its id table's ``shards`` entries (row ranges and graph files)."""
        try:
            ranges = [(int(e["start"]), int(e["end"])) for e in shards]
            layout = [{str(k): str(v) for k, v in e["label_files"].items()} for e in shards]
            globals_ = [str(e["global"]) for e in shards]
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise IndexCorruptError(f"{dir / IDS_FILE} has a malformed shard layout ({exc}) -- rebuild it") from exc
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != len(keys) or any(
            a[1] != b[0] for a, b in itertools.pairwise(ranges)
        ):
            raise IndexCorruptError(f"{dir / IDS_FILE}: shard ranges {ranges} do not cover the {len(keys)} rows "
                                    "once each -- rebuild the index with `skb index`")
        label_arr = np.asarray(labels, dtype=object)
        names = sorted(set(labels))
        per_label: dict[str, list[Source | None]] = {lab: [] for lab in names}
        glob: list[Source] = []
        for (start, end), files, gname in zip(ranges, layout, globals_, strict=True):
            for name in [gname, *files.values()]:
                if not (dir / name).is_file():
                    raise IndexCorruptError(f"HNSW file {dir / name} is missing -- rebuild the index with `skb index`")
            glob.append(cls._opener(dir / gname, dim, end - start, params.mapped))
            part = label_arr[start:end]
            for lab in names:
                rel = files.get(lab)
                per_label[lab].append(None if rel is None
                                      else cls._opener(dir / rel, dim, int((part == lab).sum()), params.mapped))
        vectors = map_vectors(dir, len(keys), dim)
        if vectors is None:
            raise IndexCorruptError(f"{dir / VECTORS_FILE} is missing -- rebuild the index with `skb index`")
        return cls(keys, labels, dim, params, glob[0], dict.fromkeys(names, glob[0]), vectors=vectors,
                   shards=(ranges, (glob, per_label)))

    @classmethod
    def _opener(cls, path: Path, dim: int, expected: int, mapped: bool = False) -> Opener:
        return lambda: open_graph(path, dim, expected, mapped=mapped)


def _is_opener(src: object) -> bool:
    """A graph's opener (a function), not a graph: neither library's graph is callable."""
    return callable(src)
