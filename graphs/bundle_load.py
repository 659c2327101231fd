"""Loading and checking what one build wrote: the SKB (memory-mapped or parsed), the manifest's
agreement with the files and with the served graph, the manifest's identity, and SAGE's similarity edges.

Why apart from the bundle: these are pure steps over an index directory; the bundle owns when they run
(at open, and again when a rebuild swaps a new build in).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.skb.model import SKB

_log = logging.getLogger("graphs.bundle")  # the bundle's logger: where its notes were always logged

if TYPE_CHECKING:
    from graphs.index.bm25 import BM25Index
    from graphs.index.hnsw import HNSWIndex
    from graphs.manifest import Manifest
    from graphs.store.base import GraphStore


_NOTED: set[str] = set()


def _load_skb(index_dir: Path, manifest: Manifest) -> SKB:
    """The memory-mapped SKB when the build wrote it (and the manifest covers it), else the JSON lines.

    An index built before the compact arrays existed keeps working as it did (parsed, seconds on a
    large SKB); one note per process says how to get the fast start.
    """
    from graphs.skb.compact import COMPACT_DIR, META_FILE, open_compact

    listed = f"skb/{COMPACT_DIR}/{META_FILE}"
    if listed in manifest.listed():
        return open_compact(index_dir / "skb")
    from graphs.loaders.jsonl import load_jsonl

    if str(index_dir) not in _NOTED:
        _NOTED.add(str(index_dir))
        _log.warning(
            "note: the index at %s predates the fast-start artifacts; rebuild it for a fast start with "
            "`skb index --force --index-dir %s`", index_dir, index_dir,
        )
    return load_jsonl(index_dir / "skb")


def _share_keys(skb: SKB, hnsw: HNSWIndex, bm25: BM25Index) -> None:
    """The indexes hold the memory-mapped SKB's table of node keys (and so its positions) where they list the
    same keys in the same order, as a build writes them: one table a process instead of three."""
    from graphs.skb.compact import CompactSKB

    if isinstance(skb, CompactSKB):
        keys = skb.node_keys()
        assert isinstance(keys, tuple)
        positions = skb.key_positions()
        hnsw.share_keys(keys, positions)
        bm25.share_keys(keys, positions)


def _check_artifacts(index_dir: Path, manifest: Manifest, skb: SKB, hnsw: HNSWIndex, bm25: BM25Index) -> None:
    """The manifest describes the loaded parts: dimension, HNSW parameters and counts agree.

    Checksums prove the files are the ones the build wrote, but the manifest itself is not
    checksummed: an edited ``embedder.dim`` or ``counts`` would otherwise pass and mislead every
    consumer that trusts the manifest (the embedder check, ``skb stats``, the agent's schema)."""
    from graphs.errors import IndexCorruptError
    from graphs.manifest import rebuild_hint

    stats = skb.stats()
    edges = {rel: n for rel, n in manifest.counts.edges.items() if rel != "IS_SIMILAR"}
    by_label: dict[str, int] = defaultdict(int)
    for label in hnsw.labels:
        by_label[label] += 1
    problems = []
    if hnsw.dim != manifest.embedder.dim:
        problems.append(f"embedder.dim is {manifest.embedder.dim} but hnsw/ holds {hnsw.dim}-dimensional vectors")
    for name in ("M", "ef_construction"):
        recorded, found = getattr(manifest.hnsw, name), getattr(hnsw.params, name)
        if recorded != found:
            problems.append(f"hnsw.{name} is {recorded} but hnsw/ was built with {found}")
    if stats["nodes"] != manifest.counts.nodes:
        problems.append(f"counts.nodes is {manifest.counts.nodes} but skb/ holds {stats['nodes']}")
    if stats["edges"] != edges:
        problems.append(f"counts.edges is {edges} but skb/ holds {stats['edges']}")
    shards = [list(r) for r in hnsw.shard_ranges] if hnsw.sharded else None
    if manifest.extra.get("hnsw_shards") != shards:
        problems.append(f"hnsw_shards is {manifest.extra.get('hnsw_shards')} but hnsw/ holds shards {shards}")
    staged = "vectors" in (manifest.extra.get("missing") or []) and len(hnsw) == 0
    if (dict(by_label) != stats["nodes"] and not staged) or len(bm25) != len(skb.nodes):
        problems.append(
            f"skb/ holds {len(skb.nodes)} nodes, hnsw/ {len(hnsw)} vectors and bm25/ {len(bm25)} documents"
        )
    if problems:
        raise IndexCorruptError(
            f"the manifest of {index_dir} does not match the index files: {'; '.join(problems)}; the manifest "
            f"was edited or mixed with another build -- {rebuild_hint(index_dir)}"
        )


def _check_graph(store: GraphStore, manifest: Manifest, index_dir: Path) -> None:
    """The served graph holds the nodes the manifest records: an empty or foreign graph is an error
    naming the rebuild command, never a store that silently answers nothing. One count query."""
    from graphs.errors import IndexCorruptError
    from graphs.manifest import rebuild_hint

    expected = sum(manifest.counts.nodes.values())
    found = store.count_nodes()
    if found != expected:
        store.close()
        raise IndexCorruptError(
            f"the graph store of {index_dir} holds {found} nodes but the manifest records {expected}; the graph "
            f"data is missing or does not belong to this index -- {rebuild_hint(index_dir)}"
        )


@dataclass(frozen=True)
class _Parts:
    """What one build wrote, loaded: replaced as a whole when a rebuild is detected."""

    manifest: Manifest
    skb: SKB
    hnsw: HNSWIndex
    bm25: BM25Index
    stamp: tuple[int, ...] | None


def _manifest_stamp(index_dir: Path) -> tuple[int, ...] | None:
    """Identity of the manifest file (device, inode, mtime, size); a rebuild's swap changes it. None: no manifest."""
    try:
        st = os.stat(os.path.join(index_dir, "manifest.json"))
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _dir_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a directory: changes when a rebuild swaps a new index into place."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _load_similarity(sage_dir: Path, expected: int | None = None) -> dict[str, list[tuple[str, float]]]:
    """SAGE edges by node; their number must be ``expected`` (the manifest's ``counts.edges.IS_SIMILAR``)."""
    from graphs.errors import IndexCorruptError
    from graphs.manifest import rebuild_hint

    path = sage_dir / "edges.jsonl.gz"
    table: dict[str, list[tuple[str, float]]] = defaultdict(list)
    count = 0
    if path.exists():
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                rec: dict[str, Any] = json.loads(line)
                a, b, s = str(rec["src"]), str(rec["dst"]), float(rec.get("score", 0.0))
                table[a].append((b, s))
                table[b].append((a, s))
                count += 1
    if expected is not None and count != expected:
        index_dir = sage_dir.parent
        raise IndexCorruptError(
            f"the manifest of {index_dir} records counts.edges.IS_SIMILAR = {expected} but sage/ holds {count} "
            f"similarity edges -- {rebuild_hint(index_dir)}"
        )
    return dict(table)
