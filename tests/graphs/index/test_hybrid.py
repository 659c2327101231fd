"""Fusion of BM25 and dense hit lists, table-driven from hand-computed cases in tests/data/hybrid_cases.json."""

from __future__ import annotations

import json
from typing import Any

import pytest

from graphs.errors import ConfigError
from graphs.index.hybrid import fuse, minmax_normalise
from tests.paths import DATA

CASES: list[dict[str, Any]] = json.loads((DATA / "hybrid_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_hand_computed_cases(case: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {"weight": case["weight"], "method": case["method"]}
    if "k" in case:
        kwargs["k"] = case["k"]
    if "rrf_k" in case:
        kwargs["rrf_k"] = case["rrf_k"]
    bm25 = [(k, float(s)) for k, s in case["bm25"]]
    dense = [(k, float(s)) for k, s in case["dense"]]
    got = fuse(bm25, dense, **kwargs)
    assert [k for k, _ in got] == [k for k, _ in case["expected"]]
    for (_, score), (_, want) in zip(got, case["expected"], strict=True):
        assert score == pytest.approx(want, abs=1e-12)


def test_weight_half_rrf_orders_like_classic_rrf() -> None:
    bm25 = [("a", 9.0), ("b", 8.0), ("c", 7.0), ("e", 1.0)]
    dense = [("c", 0.9), ("e", 0.8), ("a", 0.7), ("f", 0.1)]
    classic = {key: 0.0 for key in "abcef"}
    for hits in (bm25, dense):
        for rank, (key, _) in enumerate(hits, start=1):
            classic[key] += 1 / (60 + rank)
    expected = sorted(classic, key=lambda key: (-classic[key], key))
    assert [k for k, _ in fuse(bm25, dense, method="rrf")] == expected


def test_minmax_normalise() -> None:
    assert minmax_normalise({}) == {}
    assert minmax_normalise({"a": 3.0}) == {"a": 1.0}
    assert minmax_normalise({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"weight": 1.5}, "weight must be in"),
        ({"weight": -0.1}, "weight must be in"),
        ({"method": "borda"}, "unknown fusion method 'borda'"),
        ({"k": -1}, "k must be"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fuse([("a", 1.0)], [("a", 0.5)], **kwargs)


def test_bad_hits_are_refused() -> None:
    with pytest.raises(ConfigError, match="NaN"):
        fuse([("a", float("nan"))], [])
    with pytest.raises(ConfigError, match="expected a \\(key, score\\) pair"):
        fuse([("a", 1.0, 2.0)], [])  # type: ignore[list-item]
