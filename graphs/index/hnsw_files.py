"""The files of an HNSW index: their names, the memory-mapped vectors, a graph file opened and checked, and the id
table of a sharded index.

Why apart from ``graphs.index.hnsw``: the index's searching and its files change for different reasons, and the
Ray engine writes a sharded index's id table from its workers' shard files without an ``HNSWIndex`` in hand.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphs.errors import IndexCorruptError
from graphs.index.ann import ANNGraph, load_graph
from graphs.index.hnsw_shards import shard_dir
from graphs.manifest import HNSWParams, atomic_write_bytes, atomic_write_json, fsync_dir, sha256_file

IDS_FILE = "ids.json"
GLOBAL_FILE = "global.bin"
#: Every stored vector (float32, rows in id order) for memory-mapped reads: ``vector``/``vectors``
#: and exact scans then need no HNSW graph in memory. Absent in indexes built before it existed.
VECTORS_FILE = "vectors.npy"
FORMAT = 1
_SAFE_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def label_file(label: str) -> str:
    """The file name of a label's graph (inside a shard's directory for a sharded index)."""
    if _SAFE_LABEL.match(label) and label != "global" and label != "ids":
        return f"{label}.bin"
    digest = hashlib.sha256(label.encode("utf-8")).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", label)[:40]
    return f"label-{safe}-{digest}.bin"


def map_vectors(dir: Path, n: int, dim: int) -> np.ndarray | None:
    """``vectors.npy`` memory-mapped read-only, or None when the index predates it."""
    path = dir / VECTORS_FILE
    if not path.is_file():
        return None
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(f"{path} cannot be read ({exc}) -- rebuild the index with `skb index`") from exc
    if arr.shape != (n, dim) or arr.dtype != np.float32:
        raise IndexCorruptError(
            f"{path} holds {arr.dtype} vectors of shape {arr.shape} but the id table says ({n}, {dim}) "
            "-- rebuild the index with `skb index`"
        )
    return arr


def open_graph(path: Path, dim: int, expected: int, *, mapped: bool = False) -> ANNGraph:
    """One saved graph, read into memory or mapped (``mapped``: ``graphs.index.ann``), checked to hold
    ``expected`` elements."""
    if not path.is_file():
        raise IndexCorruptError(f"HNSW file {path} is missing -- rebuild the index with `skb index`")
    index = load_graph(path, dim, mapped=mapped)
    if index.get_current_count() != expected:
        raise IndexCorruptError(
            f"HNSW file {path} holds {index.get_current_count()} vectors but the id table says {expected} "
            "-- rebuild with `skb index`"
        )
    return index


def write_sharded_meta(
    dir: Path,
    keys: Sequence[str],
    labels: Sequence[str],
    vectors: np.ndarray,
    params: HNSWParams,
    ranges: Sequence[tuple[int, int]],
    layout: Sequence[dict[str, str]],
) -> dict[str, str]:
    """``vectors.npy`` and ``ids.json`` of a sharded index whose shard graphs are written (by
    `HNSWIndex.save` or by parallel tasks); ``layout`` holds per shard {label: file}. Returns {file: sha256}."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    atomic_write_bytes(dir / VECTORS_FILE, buf.getvalue())
    meta = {
        "format": FORMAT,
        "space": "cosine",
        "dim": int(vectors.shape[1]),
        "params": params.model_dump(),
        "global": GLOBAL_FILE,
        "label_files": {label: label_file(label) for label in sorted(set(labels))},
        "shards": [
            {"start": a, "end": b, "global": f"{shard_dir(i)}/{GLOBAL_FILE}", "label_files": dict(layout[i])}
            for i, (a, b) in enumerate(ranges)
        ],
        "keys": list(keys),
        "labels": list(labels),
    }
    atomic_write_json(dir / IDS_FILE, meta, indent=None)
    fsync_dir(dir)
    return {VECTORS_FILE: sha256_file(dir / VECTORS_FILE), IDS_FILE: sha256_file(dir / IDS_FILE)}
