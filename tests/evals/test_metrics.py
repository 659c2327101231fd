"""Metric functions against hand-computed cases, bootstrap and paired-bootstrap sanity."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from evals.metrics import (
    HEADLINE_METRICS,
    aggregate,
    bootstrap_ci,
    hit_at_k,
    mean_curve,
    paired_bootstrap,
    percentiles,
    question_metrics,
    recall_at_k,
    recall_curve,
    reciprocal_rank,
)
from tests.paths import DATA

CASES: list[dict[str, Any]] = json.loads((DATA / "metric_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_headline_metrics_match_hand_computed(case: dict[str, Any]) -> None:
    got = question_metrics(case["ranked"], case["answers"])
    assert set(got) == set(HEADLINE_METRICS)
    for name, expected in case["expected"].items():
        assert got[name] == pytest.approx(expected), name


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_single_metric_functions_agree_with_cases(case: dict[str, Any]) -> None:
    ranked, answers, expected = case["ranked"], case["answers"], case["expected"]
    assert hit_at_k(ranked, answers, 1) == expected["hit@1"]
    assert hit_at_k(ranked, answers, 5) == expected["hit@5"]
    assert hit_at_k(ranked, answers, 20) == expected["hit@20"]
    assert recall_at_k(ranked, answers, 20) == pytest.approx(expected["recall@20"])
    assert reciprocal_rank(ranked, answers) == pytest.approx(expected["mrr"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_recall_curve_matches_hand_computed_points(case: dict[str, Any]) -> None:
    curve = recall_curve(case["ranked"], case["answers"])
    assert len(curve) == 100
    assert all(a <= b for a, b in itertools.pairwise(curve)), "recall@k must not decrease with k"
    for k, expected in case["recall_at"].items():
        assert curve[int(k) - 1] == pytest.approx(expected), f"R@{k}"
        assert recall_at_k(case["ranked"], case["answers"], int(k)) == pytest.approx(expected)


def test_empty_answers_and_bad_k_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least one answer"):
        question_metrics(["a"], [])
    with pytest.raises(ValueError, match="k must be >= 1"):
        hit_at_k(["a"], ["a"], 0)


def test_bootstrap_ci_contains_mean_and_is_deterministic() -> None:
    rng = np.random.default_rng(7)
    values = list(rng.integers(0, 2, size=200).astype(float))
    first = bootstrap_ci(values, seed=3)
    again = bootstrap_ci(values, seed=3)
    other = bootstrap_ci(values, seed=4)
    assert first == again
    assert first.ci_low <= first.mean <= first.ci_high
    assert first.mean == pytest.approx(float(np.mean(values)))
    assert first.ci_low < first.mean < first.ci_high, "200 coin flips must give a non-degenerate interval"
    # Normal approximation: half-width ~ 1.96 * sqrt(p(1-p)/n) ~= 0.069 here.
    assert 0.04 < (first.ci_high - first.ci_low) / 2 < 0.1
    assert other != first
    assert first.n == 200


def test_bootstrap_ci_degenerate_inputs() -> None:
    constant = bootstrap_ci([1.0] * 30)
    assert (constant.mean, constant.ci_low, constant.ci_high) == (1.0, 1.0, 1.0)
    empty = bootstrap_ci([])
    assert empty.n == 0 and np.isnan(empty.mean)


def test_aggregate_uses_every_metric() -> None:
    rows = [question_metrics(["a"], ["a"]), question_metrics(["b"], ["a"])]
    agg = aggregate(rows)
    assert agg["hit@1"].mean == 0.5
    assert agg["mrr"].mean == 0.5


def test_paired_bootstrap_detects_known_difference() -> None:
    a = [1.0 if i % 2 == 0 else 0.0 for i in range(100)]
    b = [1.0] * 100
    diff = paired_bootstrap(a, b, seed=1)
    assert diff.mean_diff == pytest.approx(0.5)
    assert diff.ci_low <= 0.5 <= diff.ci_high
    assert diff.ci_low > 0.3
    assert diff.p_value < 0.01
    assert paired_bootstrap(a, b, seed=1) == diff


def test_paired_bootstrap_no_difference_is_not_significant() -> None:
    rng = np.random.default_rng(0)
    a = list(rng.random(80))
    diff = paired_bootstrap(a, a)
    assert diff.mean_diff == 0.0
    assert diff.p_value == 1.0
    noisy = paired_bootstrap(a, list(rng.permutation(a)))
    assert noisy.ci_low < 0 < noisy.ci_high
    assert noisy.p_value > 0.05


def test_paired_bootstrap_rejects_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_percentiles_and_mean_curve() -> None:
    assert percentiles([1.0, 2.0, 3.0, 4.0, 100.0]) == {"p50": 3.0, "p95": pytest.approx(80.8)}
    assert mean_curve([[0.0, 1.0], [1.0, 1.0]]) == [0.5, 1.0]
