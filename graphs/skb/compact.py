"""The SKB of an index as memory-mapped arrays: opened in milliseconds, nodes and edges built on access.

Why: parsing ``nodes.jsonl.gz``/``edges.jsonl.gz`` into ~600k Python objects took seconds and
hundreds of MB on every ``skb ask``, although one question touches a few thousand of them. The
build writes the same SKB a second time as flat numpy arrays (``skb/compact/``):

- ``node_label.npy`` (label id per node), ``node_keys.json`` (keys in node order),
  ``node_props.bin`` + ``node_props.off.npy`` (each node's props as one JSON object, by offset);
- ``edge_src.npy``/``edge_dst.npy`` (node ids), ``edge_rel.npy`` (relation id),
  ``edge_props.bin`` + ``edge_props.off.npy`` (props of edges that have any);
- ``out_ptr.npy``/``out_idx.npy`` and ``in_ptr.npy``/``in_idx.npy``: CSR adjacency (edge ids per
  node, in edge order), so ``out_edges``/``in_edges`` cost a slice, not a scan;
- ``{out,in}_dense_{node,ptr,idx,rel}.npy``: the edges of dense nodes (more than :data:`DENSE_EDGES` on
  one side) grouped by relation, so one relation of a hub costs a binary search and its own edges, not a
  scan of all of the hub's (an index written before them reads the CSR alone, with the same results);
- ``meta.json``: label and relation names, counts and the schema (``SKB.schema()``), stored with
  the digest of the code that computed it (a changed ``graphs/skb/model.py`` recomputes it).

:class:`CompactSKB` is a read-only :class:`~graphs.skb.model.SKB`: ``nodes`` is a mapping that builds
(and keeps) a :class:`~graphs.skb.model.Node` the first time a key is read, ``edges`` a sequence that
builds an :class:`~graphs.skb.model.Edge` per access. Node and edge order are those of the SKB that was
written, so every consumer sees the same graph as from the JSON lines. Arrays are opened with
``numpy.load(mmap_mode="r")``: pages are read from the file cache only when touched.

This module is the reader; the writer and the format's names live in ``graphs.skb.compact_write``, the
code digests in ``graphs.skb.digest`` (both re-exported here).
"""

from __future__ import annotations

import json
import mmap
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, NoReturn, cast, overload

import numpy as np

from graphs.errors import ConfigError, IndexCorruptError
from graphs.heap import table
from graphs.manifest import rebuild_hint
from graphs.skb.compact_write import (
    _ARRAYS,
    _DENSE_PARTS,
    _SIDES,
    COMPACT_DIR,
    DENSE_EDGES,
    FORMAT,
    META_FILE,
    compact_arrays,
    dense_groups,
    write_compact,
)
from graphs.skb.digest import code_digest, schema_digest
from graphs.skb.model import SKB, Edge, GraphSchema, Node, NodeType

__all__ = [
    "COMPACT_DIR",
    "DENSE_EDGES",
    "FORMAT",
    "META_FILE",
    "CompactSKB",
    "code_digest",
    "compact_arrays",
    "dense_groups",
    "open_compact",
    "schema_digest",
    "write_compact",
]


def _loader() -> Any:
    try:
        import orjson

        return orjson.loads
    except ImportError:  # orjson is optional (third-party)
        return json.loads


class _Dense(NamedTuple):
    """One side's dense-node relation groups, as :func:`dense_groups` wrote them, and each node's row."""

    row: dict[int, int]
    ptr: np.ndarray
    idx: np.ndarray
    rel: np.ndarray


class _Blob:
    """A read-only file of concatenated JSON objects, sliced through mmap (an empty file has no map)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: mmap.mmap | bytes
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self._loads = _loader()

    def get(self, start: int, end: int) -> dict[str, Any]:
        if start == end:
            return {}
        try:
            value = self._loads(self._data[start:end])
        except ValueError as exc:  # JSONDecodeError, orjson's and UnicodeDecodeError are ValueErrors
            raise IndexCorruptError(self._damaged(start, end, f"not valid JSON ({exc})")) from exc
        if not isinstance(value, dict):
            raise IndexCorruptError(self._damaged(start, end, "not a JSON object"))
        return value

    def _damaged(self, start: int, end: int, what: str) -> str:
        """The file, the bytes and the two commands: this damage is past the sampled check at open."""
        index_dir = self.path.parents[2]  # <index>/skb/compact/<blob>
        return (f"{self.path}: the record at bytes {start}-{end} is {what}: the file is damaged; check the index "
                f"with `skb verify --index-dir {index_dir}` and rebuild it with `skb index --force --index-dir "
                f"{index_dir}` (same --dataset and --data as before)")


def _released() -> NoReturn:
    raise ReferenceError("the SKB behind this view was released (its index was closed or replaced); open it again")


#: Most nodes ``CompactSKB.nodes`` keeps built (about 0.8 kB each on HPO). Why a bound: a server answers questions
#: over the graph for days, and the nodes its questions touch would otherwise all stay, up to the whole graph (a
#: million-node graph's worth in every replica). Past it the kept nodes are let go at once (a lookup stays one
#: dictionary read; a node built again is equal to the one let go).
NODE_CACHE_MAX = 32_768


class _NodeMap(Mapping[str, Node]):
    """``key -> Node``; a Node is built on first access and kept, up to ``NODE_CACHE_MAX`` nodes (equal, not
    necessarily the same object, after that many).

    The SKB is held weakly: a strong reference back made the SKB and its views a reference cycle, so
    a replaced build's SKB -- and the files it maps -- stayed until a garbage collection happened to run."""

    def __init__(self, skb: CompactSKB) -> None:
        self._ref = weakref.ref(skb)
        self._index = skb._index
        self._keys = skb._keys
        self._cache: dict[str, Node] = {}

    def __getitem__(self, key: str) -> Node:
        node = self._cache.get(key)
        if node is None:
            skb = self._ref()
            if skb is None:
                _released()
            if len(self._cache) >= NODE_CACHE_MAX:
                self._cache.clear()
            node = self._cache.setdefault(key, skb._node_at(self._index[key]))
        return node

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        node = self._cache.get(key)
        if node is not None:
            return node
        i = self._index.get(key)
        return default if i is None else self[key]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class _EdgeList(Sequence[Edge]):
    """The edges in their stored order; an Edge is built per access (edges are many and rarely all read).
    The SKB is held weakly, as by ``_NodeMap``."""

    def __init__(self, skb: CompactSKB) -> None:
        self._ref = weakref.ref(skb)

    @property
    def _skb(self) -> CompactSKB:
        skb = self._ref()
        if skb is None:
            _released()
        return skb

    def __len__(self) -> int:
        return len(self._skb._edge_src)

    @overload
    def __getitem__(self, i: int) -> Edge: ...

    @overload
    def __getitem__(self, i: slice) -> list[Edge]: ...

    def __getitem__(self, i: int | slice) -> Edge | list[Edge]:
        if isinstance(i, slice):
            return [self._skb._edge_at(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("edge index out of range")
        return self._skb._edge_at(i)

    def __iter__(self) -> Iterator[Edge]:
        skb = self._skb
        keys, rels = skb._keys, skb._rels
        off = skb._edge_off
        step = 65536
        for start in range(0, len(self), step):
            src = skb._edge_src[start : start + step].tolist()
            dst = skb._edge_dst[start : start + step].tolist()
            rel = skb._edge_rel[start : start + step].tolist()
            bounds = off[start : start + len(src) + 1].tolist()
            for j in range(len(src)):
                yield Edge(keys[src[j]], rels[rel[j]], keys[dst[j]], skb._edge_props.get(bounds[j], bounds[j + 1]))


class CompactSKB(SKB):
    """A read-only SKB over the arrays of ``<index>/skb/compact`` (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        from graphs.skb.profile import parse_profile

        directory = Path(directory)
        self.directory = directory
        compact = directory / COMPACT_DIR
        meta_path = compact / META_FILE
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, this code reads {FORMAT}")
            self._labels: list[str] = [str(x) for x in meta["labels"]]
            self._rels: list[str] = [str(x) for x in meta["rels"]]
            self._meta = meta
            # plain ndarray views of the read-only maps (the pages stay in the file cache): slicing a np.memmap
            # builds a memmap object per slice, ten times the cost, and a question slices them hundreds of times
            arrays = {
                name_: np.asarray(np.load(compact / f"{name_}.npy", mmap_mode="r", allow_pickle=False))
                for name_ in _ARRAYS
            }
            dense = {side: _open_dense(compact, side, int(meta["edges"])) for side in _SIDES}
            keys = _loader()((compact / "node_keys.json").read_bytes())
            self._node_props = _Blob(compact / "node_props.bin")
            self._edge_props = _Blob(compact / "edge_props.bin")
            name = str(meta["name"])
            node_types = [NodeType.model_validate(raw) for raw in meta["node_types"]]
            profile = None if meta.get("profile") is None else parse_profile(meta["profile"], f"{meta_path} (profile)")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            index_dir = directory.parent
            raise IndexCorruptError(
                f"the compact SKB in {compact} cannot be read ({exc}) -- {rebuild_hint(index_dir)}"
            ) from exc
        n, m = int(meta["nodes"]), int(meta["edges"])
        self._keys: tuple[str, ...] = table(keys)  # graphs.heap: untracked by the garbage collector
        self._node_label = arrays["node_label"]
        self._node_off = arrays["node_props.off"]
        self._edge_src = arrays["edge_src"]
        self._edge_dst = arrays["edge_dst"]
        self._edge_rel = arrays["edge_rel"]
        self._edge_off = arrays["edge_props.off"]
        self._out_ptr, self._out_idx = arrays["out_ptr"], arrays["out_idx"]
        self._in_ptr, self._in_idx = arrays["in_ptr"], arrays["in_idx"]
        self._dense: dict[str, _Dense | None] = dense
        shapes_ok = (
            len(keys) == n and self._node_label.shape == (n,) and self._node_off.shape == (n + 1,)
            and all(a.shape == (m,) for a in (self._edge_src, self._edge_dst, self._edge_rel, self._out_idx, self._in_idx))
            and self._edge_off.shape == (m + 1,) and self._out_ptr.shape == (n + 1,) and self._in_ptr.shape == (n + 1,)
        )
        if not shapes_ok:
            raise IndexCorruptError(
                f"the compact SKB in {compact} has arrays of inconsistent lengths for {n} nodes and {m} edges "
                f"-- {rebuild_hint(directory.parent)}"
            )
        self._index = {key: i for i, key in enumerate(keys)}
        self._lock = threading.Lock()
        self.name = name
        self.node_types = {t.label: t for t in node_types}
        for label in self._labels:
            self.node_types.setdefault(label, NodeType(label=label))
        self.profile = profile
        self._out = self._in = None
        self.nodes = cast("dict[str, Node]", _NodeMap(self))
        self.edges = cast("list[Edge]", _EdgeList(self))
        self._schema: GraphSchema | None = None
        self._key_rank: np.ndarray | None = None
        self._ends_by: dict[tuple[str, str, str], set[str]] | None = None

    # -- materialisation ---------------------------------------------------------------
    def _node_at(self, i: int) -> Node:
        label = self._labels[int(self._node_label[i])]
        props = self._node_props.get(int(self._node_off[i]), int(self._node_off[i + 1]))
        ntype = self.node_types.get(label)
        return Node(self._keys[i], label, props, name_field=ntype.name_field if ntype is not None else "name")

    def _edge_at(self, j: int) -> Edge:
        return Edge(
            self._keys[int(self._edge_src[j])],
            self._rels[int(self._edge_rel[j])],
            self._keys[int(self._edge_dst[j])],
            self._edge_props.get(int(self._edge_off[j]), int(self._edge_off[j + 1])),
        )

    # -- read-only SKB ----------------------------------------------------------------
    def add_node(self, node: Node, *, source: str = "<memory>", record: str | int | None = None) -> None:
        raise ConfigError("the SKB of an index is read-only; build a new index to change it")

    def add_edge(self, edge: Edge) -> None:
        raise ConfigError("the SKB of an index is read-only; build a new index to change it")

    def clear(self) -> None:
        raise ConfigError("the SKB of an index is read-only; build a new index to change it")

    def validate(self, source: str = "<memory>") -> None:
        """Edges were validated when the index was built; the arrays hold node ids, not keys."""

    def labels(self) -> list[str]:
        present = np.flatnonzero(np.bincount(self._node_label, minlength=len(self._labels)))
        return sorted(self._labels[int(i)] for i in present)

    def nodes_of(self, label: str) -> list[Node]:
        if label not in self._labels:
            return []
        lid = self._labels.index(label)
        return [self.nodes[self._keys[int(i)]] for i in np.flatnonzero(self._node_label == lid)]

    def iter_nodes(self) -> Iterator[Node]:
        """Every node once, in node order, the ones ``nodes`` keeps as kept and the others built and let go."""
        cache = cast("_NodeMap", self.nodes)._cache
        names = {label: self.node_types[label].name_field for label in self._labels}
        step = 65536
        for start in range(0, len(self._keys), step):
            labels = self._node_label[start : start + step].tolist()
            bounds = self._node_off[start : start + len(labels) + 1].tolist()
            for j, lid in enumerate(labels):
                key = self._keys[start + j]
                node = cache.get(key)
                if node is None:
                    label = self._labels[lid]
                    node = Node(key, label, self._node_props.get(bounds[j], bounds[j + 1]), name_field=names[label])
                yield node

    def out_edges(self, key: str) -> Iterator[Edge]:
        i = self._index.get(key)
        if i is None:
            return iter(())
        ids = self._out_idx[self._out_ptr[i] : self._out_ptr[i + 1]].tolist()
        return (self._edge_at(j) for j in ids)

    def in_edges(self, key: str) -> Iterator[Edge]:
        i = self._index.get(key)
        if i is None:
            return iter(())
        ids = self._in_idx[self._in_ptr[i] : self._in_ptr[i + 1]].tolist()
        return (self._edge_at(j) for j in ids)

    def degree(self, key: str) -> int:
        i = self._index.get(key)
        if i is None:
            return 0
        return int(self._out_ptr[i + 1] - self._out_ptr[i] + self._in_ptr[i + 1] - self._in_ptr[i])

    def relations_at(self, key: str) -> list[tuple[str, Literal["out", "in"]]]:
        i = self._index.get(key)
        if i is None:
            return []
        found: list[tuple[str, Literal["out", "in"]]] = []
        sides: tuple[tuple[np.ndarray, np.ndarray, Literal["out", "in"]], ...] = (
            (self._out_ptr, self._out_idx, "out"),
            (self._in_ptr, self._in_idx, "in"),
        )
        for ptr, idx, direction in sides:
            rel_ids = self._edge_rel[idx[ptr[i] : ptr[i + 1]]]
            if len(rel_ids):
                uniq, first = np.unique(rel_ids, return_index=True)
                found.extend((self._rels[int(r)], direction) for r in uniq[np.argsort(first)])
        return found

    def _side(self, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Row pointers, edge ids and the other end of each edge for one side (``out`` or ``in``)."""
        if side == "out":
            return self._out_ptr, self._out_idx, self._edge_dst
        return self._in_ptr, self._in_idx, self._edge_src

    def _rel_edges(self, i: int, side: str, rid: int) -> np.ndarray:
        """Edge ids of node ``i`` on ``side`` of relation id ``rid``, in edge order: a dense node's group (a
        binary search), else its row filtered."""
        dense = self._dense.get(side)
        row = None if dense is None else dense.row.get(i)
        if dense is not None and row is not None:
            lo, hi = int(dense.ptr[row]), int(dense.ptr[row + 1])
            rels = dense.rel[lo:hi]
            return dense.idx[lo + int(np.searchsorted(rels, rid, "left")) : lo + int(np.searchsorted(rels, rid, "right"))]
        ptr, idx, _ = self._side(side)
        edges = idx[ptr[i] : ptr[i + 1]]
        return edges[self._edge_rel[edges] == rid]

    def incident(self, i: int, side: Literal["out", "in"], rel_ids: Sequence[int] | None = None) -> np.ndarray:
        """Edge ids at node id ``i`` on ``side`` (``out``: it is the source), of the relation ids ``rel_ids``
        when given (grouped per relation, a dense node's through its groups), else all in edge order."""
        if rel_ids is None:
            ptr, idx, _ = self._side(side)
            return idx[ptr[i] : ptr[i + 1]]
        parts = [self._rel_edges(i, side, rid) for rid in rel_ids]
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def _ends_labelled(self, i: int, side: str, rid: int, lid: int) -> bool | None:
        """True when every ``rid`` edge on ``side`` of node ``i`` ends at a node of label id ``lid`` by the
        schema (its label and the relation admit no other), False when none can, None when it depends."""
        if self._ends_by is None:  # built once; a race builds the same dict twice
            ends: dict[tuple[str, str, str], set[str]] = {}
            for r in self.schema().relations:
                ends.setdefault((r.rel, "out", r.src_label), set()).add(r.dst_label)
                ends.setdefault((r.rel, "in", r.dst_label), set()).add(r.src_label)
            self._ends_by = ends
        found = self._ends_by.get((self._rels[rid], side, self._labels[int(self._node_label[i])]), set())
        label = self._labels[lid]
        if found == {label}:
            return True
        return False if label not in found else None

    def _ends(self, i: int, side: str, rid: int, lid: int | None) -> np.ndarray:
        """The other ends (node ids) of ``_rel_edges``, only those of label id ``lid`` when given."""
        _, _, other = self._side(side)
        implied = None if lid is None else self._ends_labelled(i, side, rid, lid)
        if implied is False:
            return np.zeros(0, dtype=other.dtype)
        ends = other[self._rel_edges(i, side, rid)]
        return ends if lid is None or implied else ends[self._node_label[ends] == lid]

    def edge_count(
        self,
        key: str,
        rels: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        label: str | None = None,
    ) -> int:
        i = self._index.get(key)
        if i is None:
            return 0
        if label is not None and label not in self._labels:
            return 0
        lid = None if label is None else self._labels.index(label)
        count = 0
        for side in _SIDES:
            if direction not in (side, "both"):
                continue
            loops = direction == "both" and side == "in"  # a self-loop is counted on the outgoing side
            if rels is None:
                ptr, idx, other = self._side(side)
                edges = idx[ptr[i] : ptr[i + 1]]
                if loops:
                    edges = edges[other[edges] != i]
                count += len(edges) if lid is None else int(np.count_nonzero(self._node_label[other[edges]] == lid))
                continue
            for rid in dict.fromkeys(self._rels.index(r) for r in rels if r in self._rels):
                if loops:
                    ends = self._ends(i, side, rid, lid)
                    count += int(np.count_nonzero(ends != i))
                elif lid is None or self._ends_labelled(i, side, rid, lid):  # no label, or the schema's only one
                    count += len(self._rel_edges(i, side, rid))
                else:
                    count += len(self._ends(i, side, rid, lid))
        return count

    def neighbor_ids(
        self, key: str, rel: str, direction: Literal["out", "in", "both"] = "both", label: str | None = None
    ) -> np.ndarray:
        i = self._index.get(key)
        if i is None or rel not in self._rels or (label is not None and label not in self._labels):
            return np.zeros(0, dtype=np.int64)
        rid = self._rels.index(rel)
        lid = None if label is None else self._labels.index(label)
        parts = [self._ends(i, side, rid, lid) for side in _SIDES if direction in (side, "both")]
        return np.concatenate(parts).astype(np.int64, copy=False)

    def neighbor_keys(
        self, key: str, rel: str, direction: Literal["out", "in", "both"] = "both", label: str | None = None
    ) -> list[str]:
        keys = self._keys
        return [keys[j] for j in self.neighbor_ids(key, rel, direction, label).tolist()]

    def stats(self) -> dict[str, Any]:
        node_counts = np.bincount(self._node_label, minlength=len(self._labels))
        edge_counts = np.bincount(self._edge_rel, minlength=len(self._rels))
        # first-occurrence order, as Counter over the objects gives it
        first_node = _first_seen(self._node_label)
        first_edge = _first_seen(self._edge_rel)
        return {
            "nodes": {self._labels[i]: int(node_counts[i]) for i in first_node},
            "edges": {self._rels[i]: int(edge_counts[i]) for i in first_edge},
        }

    def schema(self, max_samples: int = 3) -> GraphSchema:
        """The schema stored at build time when the same code computed it; otherwise computed."""
        if max_samples != 3:
            return super().schema(max_samples)
        with self._lock:
            if self._schema is None:
                if self._meta.get("schema_digest") == schema_digest() and isinstance(self._meta.get("schema"), dict):
                    self._schema = GraphSchema.model_validate(self._meta["schema"])
                else:
                    self._schema = super().schema(max_samples)
            return self._schema.model_copy(deep=True)

    # -- arrays for vectorised consumers --------------------------------------------------
    @property
    def arrays_are_fixed(self) -> bool:
        return True  # the arrays are the compact files'

    def label_ids(self) -> tuple[list[str], np.ndarray]:
        """Label names and the label id of every node (in node order)."""
        return self._labels, self._node_label

    def edge_arrays(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Relation names and the (rel id, src id, dst id) arrays of every edge (in edge order)."""
        return self._rels, self._edge_rel, self._edge_src, self._edge_dst

    def node_keys(self) -> Sequence[str]:
        return self._keys

    def key_ranks(self) -> np.ndarray:
        """Each node's rank in code-point order of the keys (Python's and the stores' string order), made once.

        Why: ordering rows by key then becomes one numpy sort of small integers instead of a Python sort of
        strings (the neighbour aggregates order thousands of rows per question). 4 bytes a node."""
        with self._lock:
            if self._key_rank is None:
                order = sorted(range(len(self._keys)), key=self._keys.__getitem__)
                rank = np.empty(len(self._keys), dtype=np.int32 if len(self._keys) < 2**31 else np.int64)
                rank[np.asarray(order, dtype=np.int64)] = np.arange(len(self._keys), dtype=rank.dtype)
                self._key_rank = rank
            return self._key_rank

    def key_positions(self) -> Mapping[str, int]:
        """Each node key's position in node order: the SKB's own dictionary, which the indexes opened beside it
        share (``graphs.bundle_load``). Read it, never change it."""
        return self._index

    def positions(self, keys: Sequence[str]) -> np.ndarray:
        """Node ids (positions in node order) of ``keys``; KeyError for a key not in the SKB."""
        return np.fromiter((self._index[k] for k in keys), dtype=np.int64, count=len(keys))


def _open_dense(compact: Path, side: str, edges: int) -> _Dense | None:
    """One side's relation groups of dense nodes, or None for an index written before them (the CSR alone
    serves it, with the same results). ValueError when they are there but inconsistent."""
    paths = [compact / f"{side}_dense_{part}.npy" for part in _DENSE_PARTS]
    if not all(path.exists() for path in paths):
        return None
    node, ptr, idx, rel = (np.asarray(np.load(path, mmap_mode="r", allow_pickle=False)) for path in paths)
    total = int(ptr[-1]) if len(ptr) else -1
    if len(ptr) != len(node) + 1 or idx.shape != (total,) or rel.shape != (total,) or total > edges:
        raise ValueError(f"the {side} dense-node groups have inconsistent lengths")
    return _Dense({int(i): j for j, i in enumerate(node.tolist())}, ptr, idx, rel)


def _first_seen(ids: np.ndarray) -> list[int]:
    if not len(ids):
        return []
    uniq, first = np.unique(np.asarray(ids), return_index=True)
    return [int(uniq[j]) for j in np.argsort(first, kind="stable")]


def open_compact(skb_dir: Path) -> CompactSKB:
    """Open ``<index>/skb`` through its compact arrays (written by ``write_compact`` into ``skb/compact``)."""
    return CompactSKB(Path(skb_dir))
