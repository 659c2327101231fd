"""Fusing lexical (BM25) and dense (cosine) hit lists into one ranking.

Why normalise: BM25 scores are unbounded and query-dependent while cosine
similarities live in [-1, 1]; adding them raw lets whichever scale is larger win.
Min-max maps each list onto [0, 1] for this query; reciprocal-rank fusion (RRF)
ignores scores altogether and is the robust choice when one list is noisy.

Conventions (what the tests pin down):
- ``weight`` is the weight of the dense list; ``1 - weight`` goes to BM25.
- minmax: ``(s - min) / (max - min)`` per list; a list with one hit, or whose
  scores are all equal, normalises to 1.0. A key missing from a list counts 0.
- rrf: ``weight / (rrf_k + rank_dense) + (1 - weight) / (rrf_k + rank_bm25)``,
  ranks 1-based after sorting each list by score (desc, stable); a missing key
  contributes 0 from that list. With weight 0.5 this is half of classic RRF,
  so the order is the same.
- A key repeated inside one list keeps its best score.
- Ties in the fused score break by key (ascending) so results are deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from graphs.errors import ConfigError

__all__ = ["RRF_K", "fuse", "minmax_normalise"]

RRF_K = 60
Hits = Sequence[tuple[str, float]]


def _best_scores(hits: Hits, name: str) -> dict[str, float]:
    best: dict[str, float] = {}
    for i, hit in enumerate(hits):
        try:
            key, score = hit
            value = float(score)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name} hit #{i} is {hit!r}; expected a (key, score) pair") from exc
        if math.isnan(value):
            raise ConfigError(f"{name} hit #{i} for {key!r} has a NaN score")
        if key not in best or value > best[key]:
            best[key] = value
    return best


def minmax_normalise(scores: dict[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    if span <= 0 or not math.isfinite(span):
        return {key: 1.0 for key in scores}
    return {key: (value - low) / span for key, value in scores.items()}


def _ranks(scores: dict[str, float]) -> dict[str, int]:
    ordered = sorted(scores.items(), key=lambda kv: -kv[1])  # stable: input order breaks ties
    return {key: rank for rank, (key, _) in enumerate(ordered, start=1)}


def fuse(
    bm25: Hits,
    dense: Hits,
    weight: float = 0.5,
    method: Literal["minmax", "rrf"] = "minmax",
    k: int | None = None,
    *,
    rrf_k: int = RRF_K,
) -> list[tuple[str, float]]:
    """One ranking from two; ``weight`` is the dense share. Returns (key, fused score), best first."""
    if not 0.0 <= float(weight) <= 1.0:
        raise ConfigError(f"hybrid weight must be in [0, 1] (the dense share), got {weight}")
    if k is not None and k < 0:
        raise ConfigError(f"k must be >= 0, got {k}")
    if rrf_k < 0:
        raise ConfigError(f"rrf_k must be >= 0, got {rrf_k}")
    lexical = _best_scores(bm25, "bm25")
    semantic = _best_scores(dense, "dense")
    fused: dict[str, float] = {}
    if method == "minmax":
        norm_l, norm_d = minmax_normalise(lexical), minmax_normalise(semantic)
        for key in norm_l.keys() | norm_d.keys():
            fused[key] = weight * norm_d.get(key, 0.0) + (1.0 - weight) * norm_l.get(key, 0.0)
    elif method == "rrf":
        rank_l, rank_d = _ranks(lexical), _ranks(semantic)
        for key in rank_l.keys() | rank_d.keys():
            score = 0.0
            if key in rank_d:
                score += weight / (rrf_k + rank_d[key])
            if key in rank_l:
                score += (1.0 - weight) / (rrf_k + rank_l[key])
            fused[key] = score
    else:
        raise ConfigError(f"unknown fusion method {method!r} -- use 'minmax' or 'rrf'")
    ranked = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked if k is None else ranked[:k]
