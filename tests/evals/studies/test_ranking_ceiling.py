"""evals.studies.ranking_ceiling: features hand-computed on the tiny Term/Item ontology; the cross-validated ranker
learns a feature that decides the answer and keeps questions of one group in one fold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.scoring.stored import model_for
from evals.studies.ranking_ceiling import (
    FEATURES,
    Instance,
    candidate_features,
    conditional_ic,
    cross_validate,
    fold_of,
)
from tests.small_graphs import tiny_skb

LN2, LN4, LN43 = math.log(2), math.log(4), math.log(4 / 3)


def test_candidate_features_match_the_hand_computation() -> None:
    # IC: A ln 4/3, B ln 2, A1 ln 2, A2 ln 4, B1 ln 2; items I1 {A1}, I2 {A2}, I3 {B1}, I4 {A1, B1 (freq 0.2)}
    model = model_for(tiny_skb(), "Item", "Term")
    assert model is not None
    cic = conditional_ic(model)
    expected_cic = {"R": 0.0, "A": LN43, "B": LN2, "A1": math.log(1.5), "A2": math.log(3), "B1": 0.0}
    for term, value in expected_cic.items():
        assert cic[model.term_index[term]] == pytest.approx(value, abs=1e-5), term
    has_term = model.propagated.tocsr().copy()
    has_term.data[:] = 1.0
    order, feats = candidate_features(model, model.term_ids(["A2", "B1"]), 4, cic, has_term)
    assert feats.shape == (4, len(FEATURES))
    current = model.score(["A2", "B1"])
    assert list(order) == list(np.argsort(-current, kind="stable"))  # candidates in the current scoring's order
    row = {model.targets[i]: f for i, f in zip(order, feats)}
    query_ic = LN4 + LN2
    expected = {  # best-match sum, weighted sum, log size, explained, unmatched, shared closure cIC, -, share
        "I1": (LN43, LN43, math.log(2), 0, 1, LN43, None, LN43 / query_ic),
        "I2": (LN4, LN4, math.log(2), 1, 1, LN4, None, LN4 / query_ic),
        "I3": (LN2, LN2, math.log(2), 1, 1, LN2, None, LN2 / query_ic),
        "I4": (LN43 + LN2, LN43 + 0.2 * LN2, math.log(3), 1, 0, LN43 + LN2, None, (LN43 + LN2) / query_ic),
    }
    for item, values in expected.items():
        for col, value in enumerate(values):
            if value is not None:
                assert row[item][col] == pytest.approx(value, abs=1e-5), (item, FEATURES[col])


def _instance(group: str, gold_at: int, rng: np.random.Generator) -> Instance:
    feats = rng.normal(size=(6, len(FEATURES)))
    feats[:, 3] = 0.0
    feats[gold_at, 3] = 3.0  # "terms fully explained" decides the answer
    gold = np.zeros(6, dtype=bool)
    gold[gold_at] = True
    return Instance("names", "item", group, feats, gold)


def test_cross_validation_learns_the_deciding_feature_and_beats_the_current_order() -> None:
    rng = np.random.default_rng(0)
    instances = [_instance(f"case{i}", 1 + i % 5, rng) for i in range(60)]  # the current order never has it first
    result = cross_validate(instances, folds=5, train_style=None)
    assert result["names/all"]["n"] == 60
    assert result["names/all"]["current_hit@1"] == 0.0
    assert result["names/all"]["learned_hit@1"] >= 0.95
    weights = result["weights item (standardised features)"]
    assert max(weights, key=lambda name: weights[name]) == "terms fully explained"


def test_folds_keep_a_group_together() -> None:
    assert len({fold_of("PMID_1_Patient_2", 5) for _ in range(3)}) == 1
    assert {fold_of(f"g{i}", 5) for i in range(50)} == set(range(5))
    with pytest.raises(SystemExit):
        cross_validate([], folds=5, train_style=None)
