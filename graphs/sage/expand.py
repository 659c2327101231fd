"""Query-time SAGE expansion: add the k' best one-hop neighbours of the retrieved seeds.

Why: the answer is often one hop from what retrieval found (the disease next to the one
retrieved via shared similarity edges, the paper citing a retrieved one). Neighbours come from
the graph's explicit edges and, when the index has them, its offline similarity edges; they are
ranked against the *question* (BM25 + dense, fused as in hybrid search), not against the seeds,
so a hub's thousand neighbours do not flood the context.

``same_label_only`` (default on) keeps neighbours of the seeds' own labels: for "which disease
..." the seeds are diseases, and their phenotype or gene neighbours are context noise that
would displace answer candidates from a k-sized list. Turn it off when the context is meant
for a reader (an LLM answering from mixed evidence) rather than for ranked retrieval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphs.index.hybrid import fuse

#: Neighbours kept per seed before ranking (hubs are sampled in edge order beyond this).
DEFAULT_NEIGHBOR_CAP = 200

def neighbors(
    bundle: Any,
    seeds: Sequence[str],
    *,
    use_similarity_edges: bool = True,
    neighbor_cap: int = DEFAULT_NEIGHBOR_CAP,
    labels: set[str] | None = None,
) -> list[str]:
    """One-hop neighbours of the seeds (explicit edges, then similarity edges), seeds excluded."""
    skb = bundle.skb
    seed_set = set(seeds)
    out: dict[str, None] = {}
    for seed in seeds:
        if seed not in skb.nodes:
            continue
        found = 0
        candidates: list[str] = []
        if use_similarity_edges and hasattr(bundle, "similarity_neighbors"):
            candidates.extend(k for k, _ in bundle.similarity_neighbors(seed))
        candidates.extend(e.dst for e in skb.out_edges(seed))
        candidates.extend(e.src for e in skb.in_edges(seed))
        for key in candidates:
            if found >= neighbor_cap:
                break
            if key in seed_set or key in out:
                continue
            node = skb.nodes.get(key)
            if node is None or (labels is not None and node.label not in labels):
                continue
            out[key] = None
            found += 1
    return list(out)


def expand(
    bundle: Any,
    question: str,
    seeds: list[tuple[str, float]],
    k_prime: int,
    weight: float = 0.5,
    use_similarity_edges: bool = True,
    *,
    same_label_only: bool = True,
    neighbor_cap: int = DEFAULT_NEIGHBOR_CAP,
) -> list[tuple[str, float]]:
    """The ``k_prime`` best neighbours of the seeds, ranked by BM25 + dense similarity to the question.

    ``weight`` is the dense share (as in ``graphs.index.hybrid.fuse``). Returns (key, fused score),
    best first; never returns a seed.
    """
    if k_prime <= 0 or not seeds:
        return []
    skb = bundle.skb
    seed_keys = [k for k, _ in seeds if k in skb.nodes]
    labels = {skb.nodes[k].label for k in seed_keys} if same_label_only else None
    pool = neighbors(
        bundle, seed_keys, use_similarity_edges=use_similarity_edges, neighbor_cap=neighbor_cap, labels=labels
    )
    if not pool:
        return []

    dense: list[tuple[str, float]] = []
    hnsw = getattr(bundle, "hnsw", None)
    if hnsw is not None and weight > 0:
        qvec = np.asarray(bundle.embedder.embed_query(question), dtype=np.float32)
        present = [k for k in pool if k in hnsw]
        if present:
            mat = np.asarray(hnsw.vectors(present), dtype=np.float32)
            sims = mat @ qvec
            dense = [(k, float(s)) for k, s in zip(present, sims)]

    lexical: list[tuple[str, float]] = []
    bm25 = getattr(bundle, "bm25", None)
    if bm25 is not None and weight < 1:
        scores = bm25.scores(question)
        pos = bm25.key_positions()  # the SKB's key -> row dictionary where BM25 shares its keys
        lexical = [(k, float(scores[pos[k]])) for k in pool if k in pos and scores[pos[k]] > 0]

    if not dense and not lexical:
        return [(k, 0.0) for k in pool[:k_prime]]
    fused = fuse(lexical, dense, weight=weight)
    return fused[:k_prime]
