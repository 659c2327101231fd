"""The build stages that grow with the graph, as plain functions over one partition or shard.

Each takes and returns plain data (lists, arrays, paths), so the in-process engine calls them directly and
the Ray engine ships them to tasks and actors unchanged; what the partitions produce is merged by the
caller in partition order, so both engines reach the same result.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphs.index.ann import new_graph
from graphs.index.bm25_terms import DocTerms
from graphs.index.hnsw_shards import build_shard, merge_topk, save_shard
from graphs.manifest import HNSWParams

__all__ = ["bm25_terms", "hnsw_shard", "knn_merge", "knn_shard", "merged_terms", "partitions"]


def partitions(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, near-equal ranges covering ``0..n`` (fewer when ``n`` is smaller)."""
    from graphs.index.hnsw_shards import shard_ranges

    return shard_ranges(n, parts)


def bm25_terms(texts: Sequence[str], stemmer: str | None,
               stopwords: str | list[str] | None) -> tuple[list[str], DocTerms]:
    """One partition's documents, tokenised exactly as ``BM25Index.build`` does, as term counts over the partition's
    own vocabulary (its words in the order they first appear). Why counts and not tokens: a token list per document
    comes back to the build process as one string object per token (1.9M documents: gigabytes); the counts are
    three arrays and a vocabulary."""
    import bm25s

    from graphs.index.bm25 import BM25Index

    stem = BM25Index.make_stemmer(stemmer)
    docs = bm25s.tokenize(list(texts), stopwords=stopwords, stemmer=stem, show_progress=False, return_ids=False)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(tok, len(vocab)) for tok in doc] for doc in docs]
    del docs
    return list(vocab), DocTerms.from_ids(ids)


def merged_terms(parts: Sequence[tuple[list[str], DocTerms]]) -> tuple[dict[str, int], DocTerms]:
    """The partitions' term counts over one vocabulary (words numbered in the order they first appear across the
    partitions, in partition order): BM25's statistics (document frequencies, average length) are then the whole
    corpus's, as in a one-process build."""
    vocab: dict[str, int] = {}
    merged: list[DocTerms] = []
    for words, docs in parts:
        remap = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), dtype=np.int32, count=len(words))
        terms = remap[docs.terms]
        doc_of = np.repeat(np.arange(len(docs), dtype=np.int64), np.diff(docs.ptr))
        order = np.lexsort((terms, doc_of))  # each document's ids sorted again under the shared numbering
        merged.append(DocTerms(docs.ptr, terms[order], docs.counts[order]))
    return vocab, DocTerms.concat(merged)


def hnsw_shard(
    root: Path,
    shard: int,
    vectors: np.ndarray,
    labels: Sequence[str],
    start: int,
    end: int,
    params: HNSWParams,
    label_files: dict[str, str],
    seed: int = 100,
    threads: int = 1,
) -> tuple[dict[str, str], dict[str, str]]:
    """Build and write one shard's graphs under ``root``: ({label: file}, {file: sha256})."""
    return save_shard(Path(root), shard, build_shard(vectors, labels, start, end, params, seed, threads), label_files)


def knn_shard(vectors: np.ndarray, start: int, end: int, k: int, seed: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Every row's ``k`` nearest rows among rows ``start..end`` (global ids, cosine distances), from a graph
    built like the one-process similarity kNN's (one insertion thread: reproducible)."""
    block = np.ascontiguousarray(vectors[start:end], dtype=np.float32)
    graph = new_graph(block.shape[1], len(block), HNSWParams(M=16, ef_construction=100), seed)
    graph.add_items(block, np.arange(start, end), num_threads=1)
    ks = min(k, end - start)
    graph.set_ef(max(2 * k, 64))
    ids, dists = graph.knn_query(np.ascontiguousarray(vectors, dtype=np.float32), k=ks, num_threads=1)
    return ids.astype(np.int64), dists


def knn_merge(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Directed (i, j) pairs, j among i's top-``k`` of the merged shard answers, i != j (the one-process
    ``_knn_pairs`` contract)."""
    merged = merge_topk(parts, k + 1)
    n = len(merged)
    nbrs = np.empty((n, k), dtype=np.int64)
    for i, (ids, _) in enumerate(merged):
        nbrs[i] = ids[ids != i][:k]
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    return src, nbrs.reshape(-1)
