"""Scoring only the candidates: ``AnnotationModel.score_of`` gives, bit for bit, the scores and the minimum
the full per-target arrays give (the planner's ranking must not move), on a generated graph with a
taxonomy and hub terms, with frequency weights, weighted alternatives and the fallback paths; past its walk's
bound the minimum is a bound and the ranking the same. The models built from the SKB's arrays equal ones
built edge by edge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.planning.ranking import rank_targets
from agent.scoring import annotation_model
from agent.scoring.stored import model_for
from evals.studies.scale.generate import generate
from graphs.loaders.jsonl import load_jsonl
from graphs.skb.model import SKB, Edge, Node
from graphs.skb.profile import Profile, ScoringSpec


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[SKB, Any]:
    path = tmp_path_factory.mktemp("gen")
    generate(3000, path, seed=3)
    skb = load_jsonl(path)
    model = model_for(skb, "Document", "Concept")
    assert model is not None
    return skb, model


def _check(model: Any, query: list[str], cands: list[str], groups: Any = None, **kw: Any) -> None:
    full = model.score_groups(groups, **kw) if groups is not None else model.score(query, **kw)
    scores, floor = model.score_of(query, cands, groups, **kw)
    idx = np.array([model.target_index.get(c, -1) for c in cands])
    assert floor == float(full.min())
    assert np.array_equal(scores[idx >= 0], full[idx[idx >= 0]])  # the same float32 values
    assert np.isnan(scores[idx < 0]).all()


def test_candidate_scores_and_floor_equal_the_full_arrays(generated: tuple[SKB, Any]) -> None:
    _, model = generated
    rng = np.random.default_rng(0)
    hub = model.terms[int(np.argmax(np.diff(model.propagated.indptr)))]  # the term reaching most targets
    for trial in range(40):
        query = [model.terms[i] for i in rng.choice(len(model.terms), size=int(rng.integers(1, 5)), replace=False)]
        if trial % 2:
            query.append(hub)
        cands = [model.targets[i] for i in rng.choice(len(model.targets), size=200, replace=False)] + ["absent"]
        _check(model, query, cands)
        groups = [[(query[0], 1.0)], [(query[-1], 0.6), (model.terms[trial], 0.3)]]
        _check(model, query, cands, groups)
        _check(model, query, cands, frequency_mix=0.5, size_penalty=0.25)
        _check(model, query, cands, groups, partial_credit_power=3.0)  # damped credit through broad terms


def test_best_matches_of_any_targets_equal_the_full_matrices(generated: tuple[SKB, Any]) -> None:
    """Either way of reading some targets' annotations (their rows, or the reached terms' columns for a run of
    the size order, or a head of targets followed by such a run) gives the full matrices' columns bit for bit."""
    _, model = generated
    rng = np.random.default_rng(5)
    order = model._size_order
    hub = int(np.argmax(np.diff(model.propagated.indptr)))
    some = rng.choice(len(model.targets), size=150, replace=False)
    target_sets = [some, order[:300], order[40:41], np.concatenate((some, order[:100])), order[17:900],
                   np.concatenate((order[5:9], order[:64])), order[:0], order[::-1][:50]]
    for trial in range(12):
        query = [int(t) for t in rng.choice(len(model.terms), size=int(rng.integers(1, 6)), replace=False)]
        if trial % 2:
            query.append(hub)
        power = 1.0 if trial % 3 else 2.5
        plain, weighted = model._best_matches(query, power)
        for targets in target_sets:
            got_plain, got_weighted = model._best_matches_of(query, targets, power)
            assert np.array_equal(got_plain, plain[:, targets]) and got_plain.dtype == np.float32
            assert np.array_equal(got_weighted, weighted[:, targets]) and got_weighted.dtype == np.float32
        # a later call given the result for a prefix computes only the rest, with the same values
        done = model._best_matches_of(query, some, power)
        rest = np.concatenate((some, order[:200]))
        got_plain, got_weighted = model._best_matches_of(query, rest, power, done)
        assert np.array_equal(got_plain, plain[:, rest]) and np.array_equal(got_weighted, weighted[:, rest])


def test_a_query_reaching_every_heavily_annotated_target_still_finds_the_exact_floor(
    generated: tuple[SKB, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, model = generated
    monkeypatch.setattr(annotation_model, "MAX_FLOOR_PROBE", len(model.targets))
    # every term with an IC above zero: the most annotated targets are all reached, so the walk must go on
    everything = [t for i, t in enumerate(model.terms) if model.ic[i] > 0]
    _check(model, everything, model.targets[:50])


def test_past_the_walk_bound_the_floor_is_a_bound_and_the_ranking_is_the_same(
    generated: tuple[SKB, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    skb, model = generated
    everything = [t for i, t in enumerate(model.terms) if model.ic[i] > 0]
    cands = model.targets[:300]
    linked = [{"key": k, "label": "Concept"} for k in everything]
    exact_scores, exact_floor = model.score_of(everything, cands)
    exact_rank = [k for k, _ in rank_targets(skb, "Document", linked, [], cands)]
    monkeypatch.setattr(annotation_model, "MAX_FLOOR_PROBE", 64)  # the walk needs more than 64 targets here
    scores, floor = model.score_of(everything, cands)
    assert floor < exact_floor  # a bound, below the exact minimum
    assert floor <= float(model.score(everything).min())
    assert np.array_equal(scores, exact_scores)  # the candidates' own scores do not move
    assert [k for k, _ in rank_targets(skb, "Document", linked, [], cands)] == exact_rank


def test_fallbacks_without_a_size_penalty_or_with_a_symmetric_term(generated: tuple[SKB, Any]) -> None:
    _, model = generated
    query = model.terms[:3]
    _check(model, query, model.targets[:100], size_penalty=0.0)
    model.symmetric = 0.5
    try:
        _check(model, query, model.targets[:100])
    finally:
        model.symmetric = 0.0


def test_frequency_weights_are_kept() -> None:
    skb = SKB("weights")
    skb.profile = Profile(scoring=ScoringSpec(edge_weight_property="share"))
    for key in ["root", "a", "b", "a1", "b1"]:
        skb.add_node(Node(key, "Tag", {"name": f"tag {key}"}))
    for key in ["x1", "x2", "x3", "x4", "x5"]:
        skb.add_node(Node(key, "Box", {"name": f"box {key}"}))
    for child, parent in [("a", "root"), ("b", "root"), ("a1", "a"), ("b1", "b")]:
        skb.add_edge(Edge(child, "NARROWER_THAN", parent))
    for box, tag, share in [("x1", "a1", 1.0), ("x2", "a1", 0.3), ("x2", "b1", 0.9), ("x3", "b1", 0.5),
                            ("x4", "a", 1.0), ("x4", "b", 0.2), ("x5", "a1", 0.7)]:
        skb.add_edge(Edge(box, "TAGGED", tag, {"share": share}))
    model = model_for(skb, "Box", "Tag")
    assert model is not None
    for query in (["a1"], ["b1", "a"], ["a1", "b1"], ["root"]):
        _check(model, query, ["x1", "x2", "x3", "x4", "x5"], frequency_mix=1.0)
    # the ranking the planner makes from them is the full arrays' ranking
    linked = [{"key": "a1", "label": "Tag"}, {"key": "b1", "label": "Tag"}]
    ranked = rank_targets(skb, "Box", linked, [], ["x1", "x2", "x3", "x4", "x5"])
    full = model.score(["a1", "b1"])
    floor = float(full.min())
    expected = sorted(["x1", "x2", "x3", "x4", "x5"], key=lambda k: -(full[model.target_index[k]] - floor))
    assert [k for k, _ in ranked] == expected
    assert ranked[0][1] == pytest.approx(float(full[model.target_index[expected[0]]] - floor), abs=1e-3)


def test_unknown_terms_give_zero_scores(tmp_path: Path, generated: tuple[SKB, Any]) -> None:
    _, model = generated
    scores, floor = model.score_of(["no-such-term"], model.targets[:5])
    assert floor == 0.0 and not scores.any()


def _reference_model(skb: SKB, target: str, term: str) -> tuple[list[str], list[str], np.ndarray, list[list[int]]]:
    """Terms, targets, the dense annotation matrix and each term's broader terms, from the Node and Edge
    objects one by one (what ``build_model`` computes from the SKB's arrays)."""
    from agent.scoring.ontology import edge_weight, find_annotation, schema_for
    from agent.scoring.stored import find_hierarchy

    annotation = find_annotation(schema_for(skb), target, term)
    assert annotation is not None
    hierarchy = find_hierarchy(skb, term)
    prop = skb.profile.scoring.edge_weight_property if skb.profile else None
    terms = [n.key for n in skb.nodes.values() if n.label == term]
    targets = [n.key for n in skb.nodes.values() if n.label == target]
    ti, ci = {k: i for i, k in enumerate(targets)}, {k: i for i, k in enumerate(terms)}
    direct = np.zeros((len(targets), len(terms)), dtype=np.float32)
    parents: list[list[int]] = [[] for _ in terms]
    for edge in skb.edges:
        if hierarchy is not None and edge.rel == hierarchy.rel:
            child, parent = (edge.src, edge.dst) if hierarchy.narrow_to_broad == "out" else (edge.dst, edge.src)
            if child in ci and parent in ci and child != parent:
                parents[ci[child]].append(ci[parent])
        if edge.rel == annotation.rel:
            t, c = (edge.src, edge.dst) if annotation.direction == "out" else (edge.dst, edge.src)
            if t in ti and c in ci:
                direct[ti[t], ci[c]] += edge_weight(edge.props, 0.0, prop)
    return terms, targets, direct, parents


@pytest.mark.parametrize("compact", [False, True])
def test_the_model_from_the_skb_arrays_equals_one_built_edge_by_edge(
    generated: tuple[SKB, Any], tmp_path: Path, compact: bool
) -> None:
    from agent.scoring.ontology import build_model, find_annotation, schema_for
    from agent.scoring.stored import find_hierarchy
    from graphs.skb.compact import open_compact, write_compact

    skb, _ = generated
    if compact:
        write_compact(skb, tmp_path / "skb" / "compact")
        skb = open_compact(tmp_path / "skb")
    models = {}
    for target, term in (("Document", "Concept"), ("Document", "Person")):
        annotation = find_annotation(schema_for(skb), target, term)
        assert annotation is not None
        models[target, term] = build_model(skb, annotation, find_hierarchy(skb, term))
    if compact:
        assert len(skb.nodes._cache) == 0  # type: ignore[attr-defined]  # no Node object was built
    for (target, term), model in models.items():
        terms, targets, direct, parents = _reference_model(skb, target, term)
        assert list(model.terms) == terms and list(model.targets) == targets
        assert np.array_equal(model.direct.toarray(), direct)
        for i, broader in enumerate(parents):
            assert set(broader) <= set(model.ancestors.indices[model.ancestors.indptr[i] : model.ancestors.indptr[i + 1]])
