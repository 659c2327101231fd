"""The two graph libraries an index's approximate-nearest-neighbour graphs can be built with.

Why two: hnswlib (the default) reads each saved graph into one block of the process's own memory, where it searches
fastest. Every process that opens the index then holds its own copy: on HPO 270 MB of the 530 MB a serving replica
holds of its own, which no other replica can share. USearch (``HNSWParams.mapped``, the ``skb-agent[mapped]`` extra)
searches a saved graph where it lies, as a read-only memory map, so the processes on one machine share its pages
through the page cache; it costs about twice hnswlib's time a search at the same recall, and builds on one thread
(``docs/guides/serving.md``). Both are HNSW graphs over the same ids; the rest of the index does not see which one
it holds.

``MappedGraph`` offers the part of ``hnswlib.Index``'s interface the index uses, so the graph code is one code path.
A mapped graph is never written: a change (an update's patch) first reads it into memory, and the result is saved
as a new file of the next generation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import numpy as np

from graphs.errors import ConfigError, IndexCorruptError

if TYPE_CHECKING:
    from graphs.manifest import HNSWParams

Space: TypeAlias = Literal["cosine", "ip"]
"""Distances as hnswlib defines them: ``cosine`` 1 - cos(a, b); ``ip`` 1 - a.b (for unit vectors)."""


class ANNGraph(Protocol):
    """What the index calls on a graph (hnswlib's names): ids are integers the caller chooses."""

    @property
    def dim(self) -> int: ...

    def knn_query(self, data: Any, k: int = 1, num_threads: int = -1) -> tuple[np.ndarray, np.ndarray]: ...

    def add_items(self, data: Any, ids: Any = None, num_threads: int = -1) -> None: ...

    def mark_deleted(self, label: int) -> None: ...

    def resize_index(self, new_size: int) -> None: ...

    def get_current_count(self) -> int: ...

    def get_max_elements(self) -> int: ...

    def get_items(self, ids: Any, return_type: str = "numpy") -> Any: ...

    def set_ef(self, ef: int) -> None: ...

    def set_num_threads(self, num_threads: int) -> None: ...

    def save_index(self, path: str) -> None: ...


def _usearch() -> Any:
    try:
        from usearch.index import Index
    except ImportError as exc:  # a third-party extra, not our own module
        raise ConfigError("this index searches memory-mapped graphs (mapped = true), which needs USearch: "
                          "pip install 'skb-agent[mapped]', or rebuild the index without --mapped-graphs") from exc
    return Index


_METRIC = {"cosine": "cos", "ip": "ip"}


class MappedGraph:
    """An HNSW graph of USearch, searched from its memory-mapped file once saved and opened (``open``).

    Why vectors are normalised on insertion for ``cosine``: hnswlib stores a cosine graph's vectors normalised, and
    the index reads them back (``vectors.npy``, ``graph_vectors``) expecting unit length; USearch stores them as
    given. The distances are the same either way.

    Deleted ids: USearch reuses a removed element's slot for a later insertion, so a graph holds no dead slots to
    count and ``get_current_count`` is its live elements (hnswlib's counts marked-deleted ones too).

    Why insertions run on one thread whatever the caller asks: USearch 2.26 inserting on two threads left elements
    that no search reaches (a search for an element's own vector missed it for 27 of 6,000 elements in 20 graphs of
    300, and 10 of 15,000 in 3 graphs of 5,000; on one thread, and with hnswlib on two, none). Searches may use
    several."""

    def __init__(self, index: Any, space: Space, path: Path | None = None) -> None:
        self._index = index
        self._space = space
        self._path = path  # set while the graph is a read-only view of this file
        self._threads = 0  # USearch: 0 = every core, as hnswlib's -1

    @classmethod
    def new(cls, dim: int, space: Space, *, M: int, ef_construction: int, ef: int) -> MappedGraph:
        index = _usearch()(ndim=int(dim), metric=_METRIC[space], dtype="f32", connectivity=int(M),
                           expansion_add=int(ef_construction), expansion_search=int(ef))
        return cls(index, space)

    @classmethod
    def open(cls, path: Path, dim: int, space: Space) -> MappedGraph:
        """The saved graph at ``path`` as a read-only memory map (its pages are the file's, shared)."""
        Index = _usearch()
        try:
            meta = Index.metadata(str(path))
            index = Index.restore(str(path), view=True) if meta is not None else None
        except (RuntimeError, ValueError, OSError) as exc:
            raise IndexCorruptError(f"HNSW file {path} cannot be read ({exc}) -- rebuild with `skb index`") from exc
        if index is None or int(index.ndim) != int(dim):
            raise IndexCorruptError(f"HNSW file {path} is not a {dim}-dimensional USearch graph -- rebuild with "
                                    "`skb index`")
        return cls(index, space, path)

    @property
    def dim(self) -> int:
        return int(self._index.ndim)

    def _writable(self) -> Any:
        """The graph in this process's memory: a view is read in first (a mapped file is never written)."""
        if self._path is not None:
            ef = self._index.expansion_search
            self._index = _usearch().restore(str(self._path), view=False)
            self._index.expansion_search = ef
            self._path = None
        return self._index

    def knn_query(self, data: Any, k: int = 1, num_threads: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """(ids, distances) of shape (queries, k); RuntimeError where the graph cannot give ``k`` (as hnswlib)."""
        queries = np.atleast_2d(np.ascontiguousarray(data, dtype=np.float32))
        threads = self._threads if num_threads < 0 else num_threads
        found = self._index.search(queries, int(k), threads=threads)
        # one query gives one row of matches (no counts), several a batch with each row's count
        counts = getattr(found, "counts", None)
        fewest = len(found.keys) if counts is None else int(np.min(counts))
        if fewest < k:
            raise RuntimeError(f"the graph returned fewer than {k} neighbours")
        ids = np.asarray(found.keys, dtype=np.uint64).reshape(len(queries), -1)[:, :k]
        dists = np.asarray(found.distances, dtype=np.float32).reshape(len(queries), -1)[:, :k]
        return ids, dists

    def add_items(self, data: Any, ids: Any = None, num_threads: int = -1) -> None:
        rows = np.atleast_2d(np.ascontiguousarray(data, dtype=np.float32))
        if self._space == "cosine":
            rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)
        keys = np.arange(len(rows), dtype=np.uint64) if ids is None else np.asarray(ids, dtype=np.uint64)
        self._writable().add(keys, rows, threads=1)  # one thread: see the class docstring

    def mark_deleted(self, label: int) -> None:
        self._writable().remove(int(label))

    def resize_index(self, new_size: int) -> None:
        """Nothing to do: USearch grows its graph as elements are added."""

    def get_current_count(self) -> int:
        return len(self._index)

    def get_max_elements(self) -> int:
        return max(int(self._index.capacity), len(self._index))

    def get_items(self, ids: Any, return_type: str = "numpy") -> np.ndarray:
        keys = np.asarray(list(ids), dtype=np.uint64)
        if not len(keys):
            return np.zeros((0, self.dim), dtype=np.float32)
        got = self._index.get(keys)  # a tuple of vectors (None for a missing id)
        rows = list(got) if isinstance(got, tuple | list) or (isinstance(got, np.ndarray) and got.ndim == 2) else [got]
        if len(rows) != len(keys) or any(row is None for row in rows):
            raise RuntimeError("an id asked for is not in the graph")
        return np.vstack([np.asarray(row, dtype=np.float32).reshape(1, -1) for row in rows])

    def set_ef(self, ef: int) -> None:
        self._index.expansion_search = int(ef)

    def set_num_threads(self, num_threads: int) -> None:
        self._threads = max(0, int(num_threads))

    def save_index(self, path: str) -> None:
        self._writable().save(os.fspath(path))

    @property
    def mapped(self) -> bool:
        """Whether the graph is searched from its file (not read into memory)."""
        return self._path is not None


def new_graph(dim: int, size: int, params: HNSWParams, seed: int, space: Space = "cosine") -> ANNGraph:
    """An empty graph for ``size`` elements of the library ``params.mapped`` names."""
    if params.mapped:
        return MappedGraph.new(dim, space, M=params.M, ef_construction=params.ef_construction, ef=params.ef)
    import hnswlib

    index = hnswlib.Index(space=space, dim=dim)
    index.init_index(max_elements=max(size, 1), ef_construction=params.ef_construction, M=params.M, random_seed=seed)
    return index


def load_graph(path: Path, dim: int, *, mapped: bool, space: Space = "cosine", max_elements: int = 0) -> ANNGraph:
    """A saved graph: memory-mapped (USearch) where ``mapped``, else read into memory (hnswlib)."""
    if mapped:
        return MappedGraph.open(path, dim, space)
    import hnswlib

    index = hnswlib.Index(space=space, dim=dim)
    try:
        index.load_index(str(path), max_elements=max_elements)
    except RuntimeError as exc:
        raise IndexCorruptError(f"HNSW file {path} cannot be read ({exc}) -- rebuild with `skb index`") from exc
    return index
