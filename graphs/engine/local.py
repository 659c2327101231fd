"""The build engine contract, and the in-process engine: the stages run in the build process, as they
always have (a one-shard HNSW index unless asked for more)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.index.bm25 import BM25Index
    from graphs.index.hnsw import HNSWIndex
    from graphs.manifest import HNSWParams
    from graphs.skb.compact_write import EdgePart, NodePart
    from graphs.skb.model import SKB

Progress = Callable[[int, int], None]
KnnPairs = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class EmbedderSpec:
    """How to open the build's embedder in another process: its spec, cache and base directory (both on
    storage every worker reaches)."""

    spec: str
    cache_dir: Path | None = None
    base_dir: Path | None = None

    def open(self) -> Embedder:
        from graphs.embedding.embedder import get_embedder

        return get_embedder(self.spec, cache_dir=self.cache_dir, base_dir=self.base_dir)


class BuildEngine(Protocol):
    """What ``graphs.build.build_index`` asks of an engine; each method is one stage."""

    name: str
    beside_embedding: bool
    """Whether the build writes the graph files and the fast-start files on a thread while this engine embeds. Why it is the
    engine's choice: it pays where the engine embeds few texts in this process, as an update does (the encoder's
    native code leaves the interpreter to the other thread: an update of 100 HPO nodes 10.7 -> 9.7 s); a full
    build that embeds every text would hold both stages' memory at once (1M nodes: 1.2 GB more), and an engine
    with workers of its own would have the two stages compete for them."""

    def embed(self, embedder: Embedder, spec: EmbedderSpec, texts: Sequence[str], *, chunk: int,
              progress: Progress | None) -> np.ndarray:
        """Unit vectors of ``texts`` in their order (``spec`` opens the same embedder elsewhere)."""
        ...

    def batch_embedder(self, embedder: Embedder, spec: EmbedderSpec, chunk: int) -> tuple[Embedder, int]:
        """The embedder (and chunk size) the phrase and similarity stages embed their texts with."""
        ...

    def hnsw(self, keys: list[str], labels: list[str], vectors: np.ndarray, params: HNSWParams,
             out: Path) -> tuple[HNSWIndex, dict[str, str]]:
        """The HNSW index, written to ``out``: (index, {file relative to ``out``: sha256})."""
        ...

    def bm25(self, keys: list[str], labels: list[str], texts: Sequence[str]) -> BM25Index: ...

    def compact_parts(self, skb: SKB) -> tuple[NodePart, EdgePart] | None:
        """The compact SKB's node and edge arrays where the engine has them already (an update's: the parent's,
        patched); None: ``write_compact`` computes them in one pass in this process."""
        ...

    def knn_pairs(self) -> KnnPairs | None:
        """The similarity stage's kNN over one (label, field)'s vectors; None: the one-process kNN."""
        ...

    def prepare_similarity(self, skb: SKB, embedder: Embedder) -> None:
        """Called before the similarity stage where ``knn_pairs`` is not None (e.g. to embed its texts at once)."""
        ...

    def close(self) -> None: ...


class LocalEngine:
    """The stages in this process: the build exactly as without an engine (``shards`` > 1 builds the HNSW
    graphs in that many row ranges, one after the other)."""

    name = "local"
    beside_embedding = False  # every text embedded: the stages' peaks would add up

    def __init__(self, shards: int = 1) -> None:
        self.shards = max(1, int(shards))

    def embed(self, embedder: Embedder, spec: EmbedderSpec, texts: Sequence[str], *, chunk: int,
              progress: Progress | None) -> np.ndarray:
        from graphs.embedding.embedder import embed_all

        return embed_all(embedder, texts, chunk=chunk, progress=progress)

    def batch_embedder(self, embedder: Embedder, spec: EmbedderSpec, chunk: int) -> tuple[Embedder, int]:
        return embedder, chunk

    def hnsw(self, keys: list[str], labels: list[str], vectors: np.ndarray, params: HNSWParams,
             out: Path) -> tuple[HNSWIndex, dict[str, str]]:
        from graphs.index.hnsw import HNSWIndex
        from graphs.index.hnsw_build import build_saved

        if self.shards == 1:  # one graph in memory at a time
            return build_saved(keys, labels, vectors, params, out)
        index = HNSWIndex.build(keys, labels, vectors, params, shards=self.shards)
        return index, index.save(out)

    def bm25(self, keys: list[str], labels: list[str], texts: Sequence[str]) -> BM25Index:
        from graphs.index.bm25 import BM25Index

        return BM25Index.build(keys, labels, texts)

    def compact_parts(self, skb: SKB) -> tuple[NodePart, EdgePart] | None:
        return None

    def knn_pairs(self) -> KnnPairs | None:
        return None

    def prepare_similarity(self, skb: SKB, embedder: Embedder) -> None:
        return None

    def close(self) -> None:
        return None
