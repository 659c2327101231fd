"""Retrieval metrics with STaRK's definitions, bootstrap intervals and paired tests.

Pure functions over plain lists so that they can be checked against hand-computed
cases (tests/data/metric_cases.json) and reused by the report and the comparison
tools without touching an index.

Definitions (STaRK, Wu et al. 2024):
- Hit@k: 1 if any answer is among the first k returned keys, else 0.
- Recall@k: |answers among the first k| / |answers|.
- MRR: 1 / rank of the first answer anywhere in the returned ranking, 0 if none.

A ranking may repeat a key (e.g. a seed that SAGE also reaches); only its first
occurrence counts, otherwise one answer could be counted twice in Recall@k.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

HEADLINE_METRICS: tuple[str, ...] = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")
CURVE_MAX_K = 100
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0


def dedupe(ranked: Iterable[str]) -> list[str]:
    """Keep the first occurrence of every key, in order."""
    seen: set[str] = set()
    out: list[str] = []
    for key in ranked:
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def _answers(answers: Iterable[str]) -> set[str]:
    result = set(answers)
    if not result:
        raise ValueError("a question needs at least one answer key to be scored")
    return result


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def hit_at_k(ranked: Sequence[str], answers: Iterable[str], k: int) -> float:
    """1.0 if any answer is among the first k distinct keys."""
    _check_k(k)
    gold = _answers(answers)
    return 1.0 if any(key in gold for key in dedupe(ranked)[:k]) else 0.0


def recall_at_k(ranked: Sequence[str], answers: Iterable[str], k: int) -> float:
    """Share of the answers found among the first k distinct keys."""
    _check_k(k)
    gold = _answers(answers)
    return sum(1 for key in dedupe(ranked)[:k] if key in gold) / len(gold)


def reciprocal_rank(ranked: Sequence[str], answers: Iterable[str]) -> float:
    """1 / rank of the first answer (1-based, over distinct keys), 0.0 if none is returned."""
    gold = _answers(answers)
    for rank, key in enumerate(dedupe(ranked), start=1):
        if key in gold:
            return 1.0 / rank
    return 0.0


def recall_curve(ranked: Sequence[str], answers: Iterable[str], max_k: int = CURVE_MAX_K) -> list[float]:
    """Recall@k for k = 1..max_k in one pass (index i holds Recall@(i+1))."""
    _check_k(max_k)
    gold = _answers(answers)
    distinct = dedupe(ranked)
    curve: list[float] = []
    found = 0
    for i in range(max_k):
        if i < len(distinct) and distinct[i] in gold:
            found += 1
        curve.append(found / len(gold))
    return curve


def question_metrics(ranked: Sequence[str], answers: Iterable[str]) -> dict[str, float]:
    """The headline metrics of one question."""
    gold = _answers(answers)
    return {
        "hit@1": hit_at_k(ranked, gold, 1),
        "hit@5": hit_at_k(ranked, gold, 5),
        "hit@20": hit_at_k(ranked, gold, 20),
        "recall@20": recall_at_k(ranked, gold, 20),
        "mrr": reciprocal_rank(ranked, gold),
    }


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its percentile-bootstrap confidence interval."""

    mean: float
    ci_low: float
    ci_high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n}


def bootstrap_ci(
    values: Sequence[float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> Estimate:
    """Mean and percentile-bootstrap CI; seeded so that a report is reproducible byte for byte."""
    data = np.asarray(values, dtype=np.float64)
    n = int(data.size)
    if n == 0:
        nan = float("nan")
        return Estimate(nan, nan, nan, 0)
    mean = float(data.mean())
    if n == 1 or n_resamples < 1:
        return Estimate(mean, mean, mean, n)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    means = data[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    # Guard against float noise putting the bound a hair past the mean on degenerate data.
    return Estimate(mean, float(min(low, mean)), float(max(high, mean)), n)


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """Mean of (b - a) over paired questions, its bootstrap CI and a two-sided p-value."""

    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "mean_diff": self.mean_diff,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "n": self.n,
        }


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> PairedDifference:
    """Paired bootstrap of mean(b - a).

    The CI resamples the per-question differences; the p-value resamples the
    differences shifted to mean zero (the null of no difference) and counts how
    often a resampled mean is at least as extreme as the observed one, with the
    +1 correction so that it is never exactly 0.
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape:
        raise ValueError(f"paired samples differ in length: {xa.size} vs {xb.size}")
    n = int(xa.size)
    if n == 0:
        nan = float("nan")
        return PairedDifference(nan, nan, nan, nan, 0)
    diff = xb - xa
    observed = float(diff.mean())
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    boot = diff[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(boot, [tail, 100.0 - tail])
    null = (diff - observed)[idx].mean(axis=1)
    extreme = int(np.sum(np.abs(null) >= abs(observed) - 1e-12))
    p_value = (extreme + 1) / (n_resamples + 1)
    return PairedDifference(observed, float(min(low, observed)), float(max(high, observed)), float(p_value), n)


def percentiles(values: Sequence[float], qs: Sequence[float] = (50.0, 95.0)) -> dict[str, float]:
    """Latency percentiles keyed 'p50', 'p95', ...; NaN when there are no values."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return {f"p{q:g}": float("nan") for q in qs}
    return {f"p{q:g}": float(np.percentile(data, q)) for q in qs}


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Average of equal-length recall curves (k = 1..len)."""
    if not curves:
        return []
    return [float(x) for x in np.asarray(curves, dtype=np.float64).mean(axis=0)]


def aggregate(
    per_question: Sequence[Mapping[str, float]],
    metrics: Sequence[str] = HEADLINE_METRICS,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Estimate]:
    """Mean and CI for every metric over the given questions."""
    return {
        name: bootstrap_ci([row[name] for row in per_question], n_resamples=n_resamples, seed=seed)
        for name in metrics
    }
