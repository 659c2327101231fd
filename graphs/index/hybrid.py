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

Dice-Sorensen overlap fusion (``dice_fuse``, method ``dice`` of ``IndexBundle.search``) ranks
graph triples and text passages by one transparent measure: the Dice-Sorensen coefficient
``2|Q & E| / (|Q| + |E|)`` between the question's content words Q and an evidence item's
content words E. Why: BM25 and cosine scores of passages cannot be compared with anything a
triple yields, but word overlap can -- so a node supported by a passage (its own text) and a
node supported by triples (edges from the best passages' nodes) compete on one scale, without
training. Conventions (pinned by tests/data/dice_cases.json):
- content words: lowercase letter/digit runs, minus a short list of English function words;
- passage overlap P(n) = Dice(Q, words(text of n));
- triple overlap T(n) = Dice(Q, union of the words of every triple that credits n) -- a node
  reached by several matching triples covers more of the question than one reached once;
- fused(n) = weight * dense(n) + (1 - weight) * max(P(n), T(n)); dense(n) is the cosine of n
  to the question (0 when unknown), ``weight`` the dense share as in ``fuse``;
- ties break by key (ascending).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, islice
from typing import TYPE_CHECKING, Literal

import numpy as np

from graphs.errors import ConfigError

if TYPE_CHECKING:
    from graphs.index.bm25 import BM25Index
    from graphs.index.hnsw import HNSWIndex
    from graphs.skb.model import SKB

__all__ = ["RRF_K", "content_words", "dice", "dice_fuse", "dice_search", "fuse", "minmax_normalise"]

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


# -- Dice-Sorensen overlap fusion ----------------------------------------------------------------
_WORD = re.compile(r"[^\W_]+")
#: English function words: they overlap between any question and any text and say nothing about
#: relevance. Generic by construction (no domain words).
_FUNCTION_WORDS = (
    "a about after all also an and any are as at be been being by can could did do does for from "
    "had has have having he her his how i if in into is it its may me might most my no not of on or "
    "our she should so some such than that the their them then there these they this those to under "
    "was we were what when where which who whom whose why will with would you your"
)
STOPWORDS = frozenset(_FUNCTION_WORDS.split(" "))


def content_words(text: str) -> frozenset[str]:
    """The lowercase words of ``text`` that carry content (function words dropped)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOPWORDS)


def dice(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """Dice-Sorensen coefficient of two word sets; 0.0 when both are empty."""
    total = len(a) + len(b)
    return 2.0 * len(a & b) / total if total else 0.0


#: Evidence text, or its content words already computed (names shared by many triples are
#: tokenised once by the caller).
Evidence = str | frozenset[str]


def _words(evidence: Evidence) -> frozenset[str]:
    return evidence if isinstance(evidence, frozenset) else content_words(evidence)


def dice_fuse(
    question: str,
    passages: Mapping[str, Evidence],
    triples: Iterable[tuple[str, Evidence]],
    dense: Mapping[str, float] | None = None,
    weight: float = 0.5,
    k: int | None = None,
) -> list[tuple[str, float]]:
    """Rank the nodes of ``passages`` (key -> text) and of ``triples`` ((credited key, triple text))
    by Dice overlap with ``question``, blended with ``dense`` (key -> cosine) at ``weight``.

    A text may be given as its content words (a frozenset). Returns (key, fused score), best first.
    """
    if not 0.0 <= float(weight) <= 1.0:
        raise ConfigError(f"dice fusion weight must be in [0, 1] (the dense share), got {weight}")
    if k is not None and k < 0:
        raise ConfigError(f"k must be >= 0, got {k}")
    query = content_words(question)
    overlap: dict[str, float] = {}
    for key, text in passages.items():
        overlap[key] = dice(query, _words(text))
    credited: dict[str, set[str]] = {}
    for i, item in enumerate(triples):
        try:
            key, text = item
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"triple #{i} is {item!r}; expected a (credited key, text) pair") from exc
        credited.setdefault(str(key), set()).update(_words(text))
    for key, bag in credited.items():
        overlap[key] = max(overlap.get(key, 0.0), dice(query, bag))
    cosine = dense or {}
    fused = {key: weight * float(cosine.get(key, 0.0)) + (1.0 - weight) * value for key, value in overlap.items()}
    ranked = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked if k is None else ranked[:k]


#: Dice fusion: the best hybrid hits whose one-hop triples become evidence (graph side), and the
#: most edges read per such node (hubs have thousands; stored order, the rest ignored).
DICE_SEED_NODES = 10
DICE_TRIPLES_PER_SEED = 1000


def dice_search(
    skb: SKB,
    bm25: BM25Index,
    hnsw: HNSWIndex,
    query: np.ndarray,
    text: str,
    k: int,
    label: str | None,
    weight: float,
    text_words: dict[str, frozenset[str]],
) -> list[tuple[str, float]]:
    """Dice fusion over one build's parts: passages are the BM25 and dense hits (of ``label``); triples
    are the edges of the best ``DICE_SEED_NODES`` hybrid hits of any type, verbalised ``src name, rel
    words, dst name`` and credited to the neighbour; dense is every candidate's cosine to ``text``
    (``query`` is its embedding).

    ``text_words`` caches the content words of node texts across searches of the same SKB (building
    node texts was 3/4 of a Dice search); the caller owns it and starts it over for a new build."""
    pool = max(k * 5, 100)
    lexical_any = bm25.search(text, pool)
    dense_any = hnsw.search(query, pool)
    if label is None:
        lexical, dense_hits = lexical_any, dense_any
    else:
        lexical, dense_hits = bm25.search(text, pool, label=label), hnsw.search(query, pool, label=label)
    passages: dict[str, frozenset[str]] = {}
    for key, _ in [*lexical, *dense_hits]:
        if key in passages or key not in skb.nodes:
            continue
        got = text_words.get(key)
        if got is None:
            got = text_words[key] = content_words(skb.node_text(key))
        passages[key] = got
    seeds = [key for key, _ in fuse(lexical_any, dense_any, weight=weight)[:DICE_SEED_NODES]]
    names: dict[str, frozenset[str]] = {}

    def words(key: str) -> frozenset[str]:
        got = names.get(key)
        if got is None:
            got = names[key] = content_words(skb.nodes[key].name)
        return got

    triples: list[tuple[str, frozenset[str]]] = []
    for seed in seeds:
        if seed not in skb.nodes:
            continue
        edges = chain(((e, e.dst) for e in skb.out_edges(seed)), ((e, e.src) for e in skb.in_edges(seed)))
        for edge, other in islice(edges, DICE_TRIPLES_PER_SEED):
            node = skb.nodes.get(other)
            if node is None or other == seed or (label is not None and node.label != label):
                continue
            rel = names.get("\0" + edge.rel)
            if rel is None:
                rel = names["\0" + edge.rel] = content_words(edge.rel.replace("_", " "))
            triples.append((other, words(edge.src) | rel | words(edge.dst)))
    dense: dict[str, float] = {key: float(sim) for key, sim in [*dense_any, *dense_hits]}
    missing = sorted(key for key in set(passages) | {key for key, _ in triples} if key not in dense)
    known = [key for key in missing if key in hnsw]
    if known:
        sims = hnsw.vectors(known) @ np.asarray(query, dtype=np.float32)
        dense.update({key: float(sim) for key, sim in zip(known, sims, strict=True)})
    return dice_fuse(text, passages, triples, dense, weight=weight, k=k)
