"""The offline planner's ranking of target candidates: how well each shares the question's features
(information content over the ontology, through finer-annotated intermediates, per described clause).

Why apart from the planner: the planner decides which tool calls to make from the conversation; this
is the arithmetic that orders what the calls found, with the statistics of the in-memory SKB.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agent.scoring.ontology import AnnotationModel
from agent.scoring.stored import link_matrix, model_for
from graphs.skb.model import SKB
from graphs.skb.profile import profile_for

# -- scoring -----------------------------------------------------------------------------------


Features = list[list[tuple[str, float]]]
"""Query features: per mention, its ``(term key, weight)`` candidates (one, weight 1, for a named term)."""


def feature_groups(linked: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> Features:
    """The features of ``keys``: entities of one described clause (same ``group``) form one feature."""
    wanted = set(keys)
    groups: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for ent in linked:
        key = str(ent.get("key"))
        if key not in wanted:
            continue
        group = ent.get("group")
        gid = ("clause", str(group)) if group is not None else ("key", key)
        groups.setdefault(gid, []).append((key, float(ent.get("weight", 1.0) or 0.0)))
    for key in keys:  # keys without an entity record (callers passing bare keys)
        if ("key", key) not in groups and not any(key == k for g in groups.values() for k, _ in g):
            groups[("key", key)] = [(key, 1.0)]
    return list(groups.values())


#: The ``scoring`` overrides that ``AnnotationModel.score`` / ``score_groups`` take as keywords.
_MODEL_WEIGHTS = ("frequency_mix", "size_penalty", "partial_credit_power")


def _model_args(
    features: Features | None, scoring: Mapping[str, float] | None
) -> tuple[Features | None, dict[str, float]]:
    """The weighted alternatives to score by (None: plain best-match scoring of the named terms suffices, every
    feature being one term of weight 1) and the scoring overrides the model takes."""
    weighted = features if features and any(len(g) > 1 or g[0][1] != 1.0 for g in features) else None
    return weighted, {k: float(v) for k, v in (scoring or {}).items() if k in _MODEL_WEIGHTS}


def _score(
    model: AnnotationModel, keys: Sequence[str], features: Features | None, scoring: Mapping[str, float] | None = None
) -> np.ndarray:
    """Plain best-match scoring for named terms; weighted alternatives when a clause has several.

    ``scoring`` overrides the profile's ``frequency_mix`` / ``size_penalty`` / ``partial_credit_power``
    (AgentConfig knobs)."""
    groups, weights = _model_args(features, scoring)
    if groups is not None:
        return model.score_groups(groups, **weights)
    return model.score(keys, **weights)


def _score_of(
    model: AnnotationModel,
    keys: Sequence[str],
    features: Features | None,
    targets: Sequence[str],
    scoring: Mapping[str, float] | None = None,
) -> tuple[np.ndarray, float]:
    """``_score`` of ``targets`` only (NaN for a non-target) and the minimum over every target."""
    groups, weights = _model_args(features, scoring)
    return model.score_of(keys, targets, groups, **weights)


def _via_intermediate(
    skb: SKB,
    mid_model: AnnotationModel,
    query: Sequence[str],
    step_rel: str,
    target: str,
    targets: Sequence[str],
    features: Features | None = None,
    scoring: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Target score from the scores of the intermediate nodes it is linked to (e.g. gene <- its diseases).

    With ``intermediate_temperature`` T = 0 the best intermediate's score; with T > 0 a soft maximum,
    ``T * log(sum_i exp(s_i / T))``: a target linked to several well-matching intermediates (a gene
    behind an allelic series of diseases) is more likely than one behind a single lucky match, and
    the soft maximum never falls below the best score."""
    mid_scores = _score(mid_model, query, features, scoring)
    shifted = (mid_scores - float(mid_scores.min()) + 1e-6).astype(np.float32)
    links = link_matrix(skb, step_rel, target, mid_model)
    rows = [links.row_index.get(k, -1) for k in targets]
    present = [i for i, r in enumerate(rows) if r >= 0]
    out: dict[str, float] = {}
    if not present:
        return out
    sub = links.matrix[[rows[i] for i in present]].tocsr()
    temperature = float((scoring or {}).get("intermediate_temperature", profile_for(skb).scoring.intermediate_temperature))
    if temperature > 0:
        best = _soft_max_rows(sub, shifted, temperature)
    else:
        best = np.asarray(sub.multiply(shifted[np.newaxis, :]).tocsr().max(axis=1).todense()).ravel()
    for i, val in zip(present, best):
        if val > 0:
            out[targets[i]] = float(val)
    return out


def _soft_max_rows(sub: Any, values: np.ndarray, temperature: float) -> np.ndarray:
    """Per row of the 0/1 CSR matrix ``sub``: ``T * log(sum over its columns c of exp(values[c] / T))`` (0 if empty)."""
    vals = values[sub.indices].astype(np.float64)
    starts, lengths = sub.indptr[:-1], np.diff(sub.indptr)
    nonempty = lengths > 0
    best = np.zeros(len(lengths), dtype=np.float64)
    if not nonempty.any():
        return best
    peak = np.zeros(len(lengths), dtype=np.float64)
    peak[nonempty] = np.maximum.reduceat(vals, starts[nonempty])
    total = np.zeros(len(lengths), dtype=np.float64)
    total[nonempty] = np.add.reduceat(np.exp((vals - np.repeat(peak, lengths)) / temperature), starts[nonempty])
    best[nonempty] = peak[nonempty] + temperature * np.log(total[nonempty])
    return best


def _source_groups(linked: Sequence[Mapping[str, Any]], target: str) -> dict[str, list[str]]:
    """Linked keys per source label; a mention linked to several labels keeps the dominant label.

    Why: in "microtia, short neck and anal atresia" a disease that happens to be named "Microtia"
    is a reading of the same words, not a second constraint; the label most mentions resolve to
    is the question's vocabulary.
    """
    sources = [e for e in linked if e.get("label") != target]
    per_label: dict[str, int] = defaultdict(int)
    for ent in sources:
        per_label[str(ent.get("label"))] += 1
    by_mention: dict[str, set[str]] = defaultdict(set)
    for ent in sources:
        by_mention[str(ent.get("mention") or ent.get("key"))].add(str(ent.get("label")))
    groups: dict[str, list[str]] = defaultdict(list)
    for ent in sources:
        label = str(ent.get("label"))
        labels = by_mention[str(ent.get("mention") or ent.get("key"))]
        if len(labels) > 1 and label != max(sorted(labels), key=lambda lab: per_label[lab]):
            continue
        groups[label].append(str(ent.get("key")))
    return dict(groups)


def rank_targets(
    skb: SKB,
    target: str,
    linked: Sequence[Mapping[str, Any]],
    paths: Sequence[Sequence[Mapping[str, Any]]],
    candidates: Sequence[str],
    semantic: Mapping[str, float] | None = None,
    support: Mapping[str, float] | None = None,
    top: int | None = None,
    scoring: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Rank candidate target keys for the linked entities.

    Per source label with an annotation relation to the target: information-content scoring
    (``AnnotationModel.score``). When a two-hop path goes through an intermediate label whose
    nodes carry finer annotations than the targets (targets aggregate intermediates, as a gene
    aggregates its diseases' phenotypes), targets take the best score of their intermediates,
    with the direct score as tie-breaker. Candidates no model scores rank by graph support
    (sum of linked-entity scores of the triples reaching them) and then semantic similarity.
    """
    semantic = semantic or {}
    support = support or {}
    cands = [c for c in dict.fromkeys(candidates) if c in skb.nodes and skb.nodes[c].label == target]
    if not cands:
        return []
    by_label = _source_groups(linked, target)
    total = np.zeros(len(cands), dtype=np.float64)
    scored = np.zeros(len(cands), dtype=bool)
    for src_label, keys in by_label.items():
        model = model_for(skb, target, src_label)
        features = feature_groups(linked, keys)
        direct: np.ndarray | None = None
        if model is not None and model.term_ids(keys):
            # only the candidates are scored (and the exact minimum over every target): scoring every
            # target per question cost time in proportion to the graph
            cand_scores, floor = _score_of(model, keys, features, cands, scoring)
            direct = np.where(np.isnan(cand_scores), 0.0, cand_scores - floor)
        via: dict[str, float] | None = None
        for path in paths:
            if len(path) != 2 or path[-1].get("to_label") != target:
                continue
            mid = str(path[0].get("to_label"))
            mid_model = model_for(skb, mid, src_label)
            if mid_model is None or not mid_model.term_ids(keys):
                continue
            if model is not None and mid_model.mean_annotations() >= model.mean_annotations():
                continue  # the intermediate is not finer-grained than the target
            via = _via_intermediate(skb, mid_model, keys, str(path[1]["rel"]), target, cands, features, scoring)
            break
        if via:
            vals = np.array([via.get(c, 0.0) for c in cands])
            if direct is not None:
                direct_weight = (scoring or {}).get("direct_weight", profile_for(skb).scoring.direct_weight)
                vals = vals + float(direct_weight) * direct
            total += vals
            scored |= vals > 0
        elif direct is not None:
            total += direct
            scored |= direct > 0
    sup = np.array([float(support.get(c, 0.0)) for c in cands])
    sem = np.array([float(semantic.get(c, 0.0)) for c in cands])
    # lexicographic: model score, then support, then semantic similarity (all tie-breakers are < 1e-3 scale)
    final = total + 1e-4 * np.tanh(sup) + 1e-6 * sem
    if not scored.any():
        final = sup + 0.1 * sem
    order = np.argsort(-final, kind="stable")[:top]
    return [(cands[i], round(float(final[i]), 6)) for i in order]
