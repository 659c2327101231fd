"""The compact SKB's node and edge arrays of a new generation taken from the parent's instead of made again.

Why: making them encodes every node's and edge's properties as JSON, a Python call per record (seconds on
half a million edges), though a change set leaves nearly all records as they were. ``apply_changes`` shares
the parent's unchanged ``Node`` and ``Edge`` objects with the changed graph, so a record that is the same
object as the parent's has the parent's bytes: its props are copied from the parent's blob, its node ids
and label or relation ids mapped to the new graph's, and only the changed records are encoded. The arrays
equal those ``write_compact`` makes from the changed graph (a test compares them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphs.skb.compact_write import EdgePart, NodePart, compact_edges, compact_names, compact_nodes, segments
from graphs.skb.model import SKB

__all__ = ["patch_compact_parts"]


def _take_blob(blob: np.ndarray, off: np.ndarray, rows: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The byte ranges of ``rows`` (``off``: n + 1 offsets into ``blob``) laid end to end, and their offsets."""
    out_off, pick = segments(off, rows)
    return blob[pick].tobytes(), out_off


def _remap(old_names: Sequence[str], new_names: Sequence[str]) -> np.ndarray:
    """Old id -> new id of the same name (-1 where the name is gone)."""
    new_id = {name: i for i, name in enumerate(new_names)}
    return np.asarray([new_id.get(name, -1) for name in old_names], dtype=np.int32)


def _source_rows(records: Sequence[Any], parent_records: Sequence[Any]) -> np.ndarray:
    """Each record's row in the parent where it is the parent's own object, else -1."""
    row_of = {id(record): i for i, record in enumerate(parent_records)}
    return np.fromiter((row_of.get(id(r), -1) for r in records), dtype=np.int64, count=len(records))


def _given_or_matched(source: np.ndarray | None, records: Sequence[Any], parent_records: Sequence[Any]) -> np.ndarray:
    """``source`` where it covers ``records``, else each record's parent row found by identity."""
    if source is not None and len(source) == len(records):
        return np.asarray(source, dtype=np.int64)
    return _source_rows(records, parent_records)


def _spliced(parent_blob: np.ndarray, parent_off: np.ndarray, source: np.ndarray,
             fresh_blob: bytes, fresh_off: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Blob and offsets of rows taken from the parent (``source`` >= 0) or, in order, from the fresh part."""
    fresh = np.flatnonzero(source < 0)
    blob = np.concatenate([parent_blob, np.frombuffer(fresh_blob, dtype=np.uint8)])
    off = np.concatenate([parent_off[:-1], fresh_off + int(parent_off[-1])])
    rows = source.copy()
    rows[fresh] = len(parent_off) - 1 + np.arange(len(fresh), dtype=np.int64)
    return _take_blob(blob, off, rows)


def patch_compact_parts(parent_dir: Path, parent: SKB, skb: SKB, node_source: np.ndarray | None = None,
                        edge_source: np.ndarray | None = None) -> tuple[NodePart, EdgePart] | None:
    """The node and edge parts of ``skb`` (the parent graph ``parent`` with a change set applied) from the
    parent's compact arrays at ``parent_dir`` (``<index>/skb/compact``); None where they do not match
    ``parent`` (another graph, or an index without them): the caller makes them. ``node_source`` and
    ``edge_source``: each record's position in the parent's order, -1 for a new record (as ``ApplyReport``
    holds them); without them the records are matched to the parent's by identity."""
    parent_dir = Path(parent_dir)
    try:
        meta = json.loads((parent_dir / "meta.json").read_text(encoding="utf-8"))
        parent_keys = json.loads((parent_dir / "node_keys.json").read_bytes())
        arrays = {name: np.load(parent_dir / f"{name}.npy", mmap_mode="r")
                  for name in ("node_label", "node_props.off", "edge_src", "edge_dst", "edge_rel", "edge_props.off")}
        node_blob = np.fromfile(parent_dir / "node_props.bin", dtype=np.uint8)
        edge_blob = np.fromfile(parent_dir / "edge_props.bin", dtype=np.uint8)
    except (OSError, ValueError):
        return None
    if parent_keys != list(parent.nodes) or meta.get("edges") != len(parent.edges):
        return None
    labels, rels = compact_names(skb)
    label_id = {label: i for i, label in enumerate(labels)}
    rel_id = {rel: i for i, rel in enumerate(rels)}
    keys = list(skb.nodes)
    index: Mapping[str, int] = {key: i for i, key in enumerate(keys)}

    nodes = list(skb.nodes.values())
    node_src = _given_or_matched(node_source, nodes, list(parent.nodes.values()))
    fresh_nodes = compact_nodes([nodes[i] for i in np.flatnonzero(node_src < 0)], int((node_src < 0).sum()), label_id)
    label = np.empty(len(nodes), dtype=np.int32)
    reused = node_src >= 0
    label[reused] = _remap(meta["labels"], labels)[np.asarray(arrays["node_label"])[node_src[reused]]]
    label[~reused] = fresh_nodes.label
    node_part = NodePart(label, *_spliced(node_blob, np.asarray(arrays["node_props.off"]), node_src,
                                          fresh_nodes.blob, fresh_nodes.off))

    edge_src_rows = _given_or_matched(edge_source, skb.edges, parent.edges)
    fresh_idx = np.flatnonzero(edge_src_rows < 0)
    fresh_edges = compact_edges([skb.edges[i] for i in fresh_idx], len(fresh_idx), index, rel_id)
    node_map = np.fromiter((index.get(key, -1) for key in parent_keys), dtype=np.int32, count=len(parent_keys))
    kept = edge_src_rows >= 0
    rows = edge_src_rows[kept]
    src = np.empty(len(skb.edges), dtype=np.int32)
    dst = np.empty(len(skb.edges), dtype=np.int32)
    rel = np.empty(len(skb.edges), dtype=np.int32)
    src[kept] = node_map[np.asarray(arrays["edge_src"])[rows]]
    dst[kept] = node_map[np.asarray(arrays["edge_dst"])[rows]]
    rel[kept] = _remap(meta["rels"], rels)[np.asarray(arrays["edge_rel"])[rows]]
    src[~kept], dst[~kept], rel[~kept] = fresh_edges.src, fresh_edges.dst, fresh_edges.rel
    if (src < 0).any() or (dst < 0).any():  # a kept edge to a node the graph lost: not a change set's result
        return None
    edge_part = EdgePart(src, dst, rel, *_spliced(edge_blob, np.asarray(arrays["edge_props.off"]), edge_src_rows,
                                                  fresh_edges.blob, fresh_edges.off))
    return node_part, edge_part
