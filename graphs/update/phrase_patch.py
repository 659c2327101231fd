"""The phrase index of a new generation patched from the parent's: the rows of changed and deleted nodes are marked
deleted (their key blanked in the entries, so no trace of a deleted node is left there), the changed nodes' phrases
are embedded (from the cache where their text was seen) and appended. Past ``REBUILD_SHARE`` of deleted rows the
index is built anew, as a build does."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from graphs.embedding.base import Embedder
from graphs.index.phrases import ENTRIES_FILE, GRAPH_FILE, PhraseIndex, node_phrases
from graphs.skb.model import SKB

#: Deleted rows past this share of the live ones: the phrase index is built anew (as ``hnsw_patch`` does its graphs).
REBUILD_SHARE = 0.1


def patch_phrases(
    parent_dir: Path, skb: SKB, changed: Collection[str], embedder: Embedder, *, batch: int = 512,
    progress: Callable[[int, int], None] | None = None, parent_skb: SKB | None = None,
) -> PhraseIndex | None:
    """The patched index, or None where the parent has none or its deleted rows would pass the share.

    ``parent_skb``: the parent's graph; a changed node whose phrases are the same there (its text changed with a
    neighbour's name, its own names and definitions did not) keeps its rows."""
    from graphs.embedding.embedder import embed_all

    if not (parent_dir / GRAPH_FILE).is_file() or not (parent_dir / ENTRIES_FILE).is_file():
        return None
    parent = PhraseIndex.load(parent_dir, embedder.dim)
    keys, kinds = list(parent.keys), list(parent.kinds)
    touched = set(changed)
    if parent_skb is not None:
        touched = {key for key in touched if node_phrases(parent_skb, key) != node_phrases(skb, key)}
    dead = [i for i, key in enumerate(keys) if key and (key in touched or key not in skb.nodes)]
    entries = [(key, kind, text) for key in sorted(touched & skb.nodes.keys(), key=str)
               for kind, text in node_phrases(skb, key)]
    blank = sum(1 for key in keys if not key) + len(dead)
    if blank > REBUILD_SHARE * max(len(keys) - blank + len(entries), 1):
        return None
    graph = parent.graph
    for row in dead:
        graph.mark_deleted(row)
        keys[row] = ""
    if entries:
        vectors = embed_all(embedder, [text for _, _, text in entries], chunk=batch, progress=progress)
        start = len(keys)
        graph.resize_index(start + len(entries))
        graph.add_items(np.ascontiguousarray(vectors, dtype=np.float32), np.arange(start, start + len(entries)))
        keys += [key for key, _, _ in entries]
        kinds += [kind for _, kind, _ in entries]
    return PhraseIndex(graph, keys, kinds, mapped=parent.mapped)
