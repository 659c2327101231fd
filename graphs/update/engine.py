"""The build engine of an update: the in-process stages, each reusing what the parent generation has.

Why an engine: an update builds the changed graph with ``graphs.build``'s stages, so the new generation is what a
build of the changed data gives; the engine's hooks let each stage start from the parent's files instead: the
HNSW graphs and phrase index patched (``hnsw_patch``, ``phrase_patch``), vectors and BM25 term counts kept for
every node whose text no change reaches (``changes.stale_texts``), the graph files' lines and the compact graph's
arrays kept for unchanged records (``jsonl_patch``, ``compact_patch``), and the FalkorDB graph patched
(``store_patch``). A stage that cannot reuse the parent's work runs as in a build.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from graphs.index.hnsw import HNSWIndex
from graphs.manifest import HNSWParams
from graphs.update.hnsw_patch import PatchReport, patch_hnsw

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.engine.local import EmbedderSpec
    from graphs.index.bm25 import BM25Index
    from graphs.index.phrases import PhraseIndex
    from graphs.skb.compact_write import EdgePart, NodePart
    from graphs.skb.model import SKB

__all__ = ["NodeTexts", "PatchEngine"]


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
    beside_embedding = True  # a few hundred texts embedded while the stored tables are written

    def __init__(self, parent: Path, changed: Collection[str], shards: int = 1, parent_skb: SKB | None = None,
                 changed_edges: Collection[tuple[str, str, str]] = (),
                 stale_texts: Collection[str] | None = None, node_source: np.ndarray | None = None,
                 edge_source: np.ndarray | None = None) -> None:
        """``parent``: the parent generation's directory; ``changed``: the keys of nodes changed or deleted;
        ``parent_skb`` and ``changed_edges`` (src, rel, dst upserted or deleted): for patching the parent's graph
        store (without the parent's graph it is loaded); ``stale_texts``: the nodes whose text may differ from
        the parent's (``changes.stale_texts``): every other node's vector and BM25 terms are the parent's, and
        its text is never made (None: every text is made and embedded through the cache); ``node_source`` and
        ``edge_source``: each record's position in the parent's order (``ApplyReport``)."""
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
        self.node_source = node_source
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
                     progress: Callable[[int, int], None] | None = None, mapped: bool = False) -> PhraseIndex | None:
        """The phrase stage of ``graphs.build``: the parent's phrase index patched, else built."""
        from graphs.index.phrases import build_phrase_index
        from graphs.update.phrase_patch import patch_phrases

        patched = patch_phrases(self.parent_phrases, skb, self.changed, embedder, batch=batch, progress=progress,
                                parent_skb=self.parent_skb)
        self.phrases_patched = patched is not None
        return patched if patched is not None else build_phrase_index(skb, embedder, batch=batch, progress=progress,
                                                                      mapped=mapped)

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
        lines = spliced_lines(self.parent_dir / "skb", self.parent_skb, skb, self.node_source, self.edge_source)
        self.lines_reused = lines is not None
        return lines

    def compact_parts(self, skb: SKB) -> tuple[NodePart, EdgePart] | None:
        """The compact SKB's arrays taken from the parent's for every record the change set left as it was
        (``graphs.update.compact_patch``); None: ``write_compact`` makes them all."""
        from graphs.skb.compact import COMPACT_DIR
        from graphs.update.compact_patch import patch_compact_parts

        if self.parent_skb is None:
            return None
        parts = patch_compact_parts(self.parent_dir / "skb" / COMPACT_DIR, self.parent_skb, skb,
                                    self.node_source, self.edge_source)
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
