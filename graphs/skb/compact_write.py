"""Writing an SKB as the compact arrays (``skb/compact/``) that ``graphs.skb.compact`` memory-maps, and
the format both sides agree on: file names, the format number, and the dense-node relation groups.

Why apart from the reader: the build writes once; every process that serves the index only reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from graphs.errors import ConfigError
from graphs.manifest import atomic_write_bytes, atomic_write_json, fsync_dir
from graphs.skb.digest import schema_digest
from graphs.skb.model import SKB, Edge, GraphSchema, Node

COMPACT_DIR = "compact"
META_FILE = "meta.json"
FORMAT = 1

_ARRAYS = (
    "node_label", "node_props.off", "edge_src", "edge_dst", "edge_rel", "edge_props.off",
    "out_ptr", "out_idx", "in_ptr", "in_idx",
)
_BLOBS = ("node_props.bin", "edge_props.bin")
_SIDES = ("out", "in")
_DENSE_PARTS = ("node", "ptr", "idx", "rel")

#: A node with more edges than this on one side also keeps that side's edges grouped by relation.
#: Why: a planner or a tool asks for one relation of a node (its broader terms, how many documents it is
#: about) and a hub of a power-law graph has hundreds of thousands of edges of other relations, or of the
#: same one with a label the schema already implies; filtering all of them cost milliseconds per call at
#: 1M nodes, several calls per question. Below this size the scan costs microseconds, so small nodes keep
#: one copy of their edges. A graph store does the same for dense nodes (relationship groups).
DENSE_EDGES = 1024


def _json_dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _dumper() -> Any:
    """orjson's dumps when installed (it is optional, third-party), else the stdlib's: the same JSON text."""
    try:
        import orjson

        return orjson.dumps
    except ImportError:
        return _json_dumps


def _save_npy(path: Path, array: np.ndarray) -> None:
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


class NodePart(NamedTuple):
    """One contiguous range of nodes as compact arrays: label ids, props blob and its offsets (from 0)."""

    label: np.ndarray
    blob: bytes
    off: np.ndarray


class EdgePart(NamedTuple):
    """One contiguous range of edges as compact arrays: end node ids, relation ids, props blob and offsets."""

    src: np.ndarray
    dst: np.ndarray
    rel: np.ndarray
    blob: bytes
    off: np.ndarray


def compact_nodes(nodes: Iterable[Node], count: int, label_id: Mapping[str, int]) -> NodePart:
    """``count`` nodes (in order) as a :class:`NodePart` (an update makes its new nodes' part so)."""
    items = nodes if isinstance(nodes, Sequence) else list(nodes)
    label = np.fromiter((label_id[node.label] for node in items), dtype=np.int32, count=count)
    blob, off = _props_blob((node.props for node in items), _dumper())
    return NodePart(label, blob, off)


def compact_edges(edges: Iterable[Edge], count: int, index: Mapping[str, int], rel_id: Mapping[str, int]) -> EdgePart:
    """``count`` edges (in order) as an :class:`EdgePart` (node ids by ``index``: key -> position)."""
    items = edges if isinstance(edges, Sequence) else list(edges)
    try:
        src = np.fromiter((index[e.src] for e in items), dtype=np.int32, count=count)
        dst = np.fromiter((index[e.dst] for e in items), dtype=np.int32, count=count)
    except KeyError as exc:
        raise ConfigError(f"an edge refers to unknown node {exc.args[0]!r}; validate the SKB before writing") from exc
    rel = np.fromiter((rel_id[e.rel] for e in items), dtype=np.int32, count=count)
    blob, off = _props_blob((e.props for e in items), _dumper())
    return EdgePart(src, dst, rel, blob, off)


def compact_arrays(directory: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Label names, each node's label id, relation names and each edge's relation, source and destination ids, as
    ``write_compact`` wrote them into ``directory`` (memory-mapped): what ``SKB.arrays_fixed`` takes."""
    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))

    def load(name: str) -> np.ndarray:
        return np.load(directory / f"{name}.npy", mmap_mode="r")

    return (list(meta["labels"]), load("node_label"), list(meta["rels"]), load("edge_rel"), load("edge_src"),
            load("edge_dst"))


def compact_names(skb: SKB) -> tuple[list[str], list[str]]:
    """The label and relation names, sorted: the ids the arrays use are positions in these lists."""
    labels = sorted({node.label for node in skb.nodes.values()} | set(skb.node_types))
    rels = sorted({edge.rel for edge in skb.edges})
    return labels, rels


def compact_parts(skb: SKB, labels: Sequence[str], rels: Sequence[str]) -> tuple[NodePart, EdgePart]:
    """The whole SKB's node and edge arrays in one pass (ids: positions in ``labels`` and ``rels``, as
    :func:`compact_names` gives them)."""
    index = {key: i for i, key in enumerate(skb.nodes)}
    node_part = compact_nodes(skb.nodes.values(), len(skb.nodes), {label: i for i, label in enumerate(labels)})
    return node_part, compact_edges(skb.edges, len(skb.edges), index, {rel: i for i, rel in enumerate(rels)})


def write_compact(
    skb: SKB, directory: Path, schema: GraphSchema | None = None, *, dense_edges: int = DENSE_EDGES,
    parts: tuple[NodePart, EdgePart] | None = None,
) -> list[Path]:
    """Write ``skb`` as arrays into ``directory`` (``<index>/skb/compact``); returns the files written.

    ``schema``: ``skb.schema()`` when the caller has it already (it scans every node and edge).
    ``dense_edges``: see :data:`DENSE_EDGES` (tests lower it to exercise the grouped path on small graphs).
    ``parts``: the node and edge arrays when computed elsewhere (the ids by :func:`compact_names`), e.g. an update's
    (the parent's arrays patched with the changed records')."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    keys = list(skb.nodes)
    labels, rels = compact_names(skb)
    n, m = len(keys), len(skb.edges)
    if n >= 2**31 or m >= 2**31:
        raise ConfigError(f"the SKB has {n} nodes and {m} edges; the compact format holds fewer than 2^31 of each")
    dumps = _dumper()
    if parts is None:
        node_part, edge_part = compact_parts(skb, labels, rels)
    else:
        node_part, edge_part = parts
        if len(node_part.label) != n or len(edge_part.src) != m:
            raise ValueError(f"compact parts of {len(node_part.label)} nodes and {len(edge_part.src)} edges "
                             f"for an SKB of {n} and {m}")
    node_label, node_blob, node_off = node_part
    edge_src, edge_dst, edge_rel, edge_blob, edge_off = edge_part
    out_ptr, out_idx = _csr(edge_src, n)
    in_ptr, in_idx = _csr(edge_dst, n)

    arrays = {
        "node_label": node_label, "node_props.off": node_off, "edge_src": edge_src, "edge_dst": edge_dst,
        "edge_rel": edge_rel, "edge_props.off": edge_off, "out_ptr": out_ptr, "out_idx": out_idx,
        "in_ptr": in_ptr, "in_idx": in_idx,
    }
    for side, (ptr, idx) in zip(_SIDES, ((out_ptr, out_idx), (in_ptr, in_idx)), strict=True):
        for part, array in zip(_DENSE_PARTS, dense_groups(ptr, idx, edge_rel, dense_edges), strict=True):
            arrays[f"{side}_dense_{part}"] = array
    written: list[Path] = []
    for name, array in arrays.items():
        _save_npy(directory / f"{name}.npy", array)
        written.append(directory / f"{name}.npy")
    for name, blob in (("node_props.bin", node_blob), ("edge_props.bin", edge_blob)):
        atomic_write_bytes(directory / name, blob)
        written.append(directory / name)
    atomic_write_bytes(directory / "node_keys.json", dumps(keys))
    written.append(directory / "node_keys.json")
    from graphs.skb.profile import Profile, is_default

    profile = getattr(skb, "profile", None)
    meta = {
        "format": FORMAT,
        "name": skb.name,
        "node_types": [t.model_dump(mode="json") for t in skb.node_types.values()],
        "profile": profile.model_dump(mode="json") if isinstance(profile, Profile) and not is_default(profile) else None,
        "nodes": n,
        "edges": m,
        "labels": labels,
        "rels": rels,
        "schema": (schema if schema is not None else skb.schema()).model_dump(mode="json"),
        "schema_digest": schema_digest(),
    }
    atomic_write_json(directory / META_FILE, meta, indent=None)
    written.append(directory / META_FILE)
    fsync_dir(directory)
    return written


def _props_blob(props: Iterator[dict[str, Any]], dumps: Any) -> tuple[bytes, np.ndarray]:
    """Props as concatenated JSON objects plus offsets (n + 1); empty props take no bytes.

    Why appended one by one to a growing buffer: orjson returns each object in a block of a few kilobytes,
    so holding a list of a million of them before joining cost gigabytes (1.4 GB transient for 300k nodes)."""
    blob = bytearray()
    ends: list[int] = [0]
    for value in props:
        if value:
            blob += dumps(value)
        ends.append(len(blob))
    return bytes(blob), np.asarray(ends, dtype=np.int64)


def _csr(ends: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Edge ids grouped by node (stable: edge order kept within a node) and the row pointers."""
    order = np.argsort(ends, kind="stable").astype(np.int32)
    counts = np.bincount(ends, minlength=n) if len(ends) else np.zeros(n, dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, order


def segments(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a ragged layout (``ptr``: n + 1 offsets) laid end to end: their row pointers (from 0) and the
    position in the source of every entry, row by row."""
    starts = np.asarray(ptr)[rows].astype(np.int64)
    lengths = np.asarray(ptr)[np.asarray(rows) + 1].astype(np.int64) - starts
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out, np.repeat(starts - out[:-1], lengths) + np.arange(int(out[-1]), dtype=np.int64)


def dense_groups(
    ptr: np.ndarray, idx: np.ndarray, edge_rel: np.ndarray, dense_edges: int = DENSE_EDGES
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One side's dense nodes (more than ``dense_edges`` edges there, ascending ids), their row pointers into
    the next two arrays, their edge ids grouped by relation (edge order kept within a relation: a stable sort)
    and the relation id of each (ascending within a node, for a binary search)."""
    degree = np.diff(np.asarray(ptr))
    dense = np.flatnonzero(degree > dense_edges).astype(np.int32)
    lengths = degree[dense].astype(np.int64)
    gptr, positions = segments(ptr, dense)  # every dense node's segment of ``idx``, concatenated
    edges = np.asarray(idx)[positions]
    rels = np.asarray(edge_rel)[edges]
    order = np.lexsort((rels, np.repeat(np.arange(len(dense), dtype=np.int64), lengths)))  # stable
    return dense, gptr, edges[order].astype(np.int32), rels[order].astype(np.int32)
