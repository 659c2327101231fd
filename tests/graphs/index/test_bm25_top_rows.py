"""BM25's top k (``top_rows``): exactly the first k of the full order (score descending, then row), ties at the
k-th score to the lower rows, whether the scores are few or so many that a sample's bound is read first."""

from __future__ import annotations

import numpy as np
import pytest

from graphs.index.bm25 import SAMPLE, top_rows


def _ranked(rows: np.ndarray, scores: np.ndarray, k: int | None = None) -> tuple[list[int], list[float]]:
    """The full order (score descending, then row), its first ``k`` where given."""
    order = np.lexsort((rows, -scores))[:k]
    return rows[order].tolist(), scores[order].tolist()


@pytest.mark.parametrize("n", [5, 300, 4 * SAMPLE + 1, 300_000])
@pytest.mark.parametrize("levels", [3, 50, 100_000])  # few distinct scores: ties straddle the k-th everywhere
def test_the_first_k_of_the_full_order(n: int, levels: int) -> None:
    rng = np.random.default_rng(n + levels)
    rows = np.sort(rng.choice(10 * n, size=n, replace=False))
    scores = (rng.integers(1, levels + 1, size=n) / 7).astype(np.float32)
    for k in (1, 20, 100, 4 * SAMPLE):
        got_rows, got_scores = top_rows(rows, scores, k)
        assert _ranked(got_rows, got_scores) == _ranked(rows, scores, k)


def test_rows_in_any_order_still_give_ties_to_the_lower_rows() -> None:
    rng = np.random.default_rng(1)
    rows = rng.permutation(200_000)
    scores = np.where(rng.random(200_000) < 0.5, 2.0, 1.0).astype(np.float32)  # 100k-way ties at the top
    got = _ranked(*top_rows(rows, scores, 20))
    assert got == _ranked(rows, scores, 20) and got[0] == sorted(rows[scores == 2.0].tolist())[:20]
