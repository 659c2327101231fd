"""How far a target's annotations can carry the ranking: a learned ranker over annotation features, cross-validated.

Why: the annotation scoring (``agent.scoring.ontology``) combines best-match information content,
annotation frequency and an annotation-set size prior with hand-set weights. When a quality target is
missed, the question is whether better weights or more features of the same evidence would reach it,
or whether the evidence itself runs out. This fits a listwise linear ranker (softmax over the top
candidates of the current scoring) on generic features of each (question, target) pair, with k-fold
cross-validation grouped by a column (questions of one patient case never straddle train and test), and
reports its held-out Hit@1 beside the current scoring's on the same candidates.

Features (all from the SKB's annotation model, nothing domain-specific): summed best-match IC,
frequency-weighted best-match IC, log annotation count, query terms fully explained (the target has the
term or a narrower one), query terms unmatched, shared-closure conditional IC (Phrank-style), mean
target->query match, share of the query's IC explained.

    python -m evals.studies.ranking_ceiling --index-dir DIR --bench a.csv [--bench b.csv] [--folds 5] [--top 50]

Each question's linked terms of the source label are its query; a described clause counts by its best
candidate. Targets are ranked by their own annotations (no evidence through intermediates), so compare
the two columns of one row, not this table with the agent's numbers for two-hop targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.scoring.ontology import AnnotationModel
from agent.scoring.stored import model_for
from evals.bench import Question, load_bench
from graphs.bundle import IndexBundle
from graphs.errors import SKBError

FEATURES = (
    "best-match IC", "frequency-weighted IC", "log annotations", "terms fully explained", "terms unmatched",
    "shared-closure conditional IC", "target->query mean", "share of query IC explained",
)


@dataclass
class Instance:
    """One question's candidates in the current scoring's order: features (n x len(FEATURES)), gold flags."""

    style: str
    target_type: str
    group: str
    features: np.ndarray
    gold: np.ndarray


def conditional_ic(model: AnnotationModel) -> np.ndarray:
    """IC of each term beyond its most informative broader term (what the term adds to its ancestors)."""
    coo = model.ancestors.tocoo()
    proper = coo.row != coo.col
    parent_max = np.zeros(len(model.terms), dtype=np.float64)
    np.maximum.at(parent_max, coo.row[proper], model.ic[coo.col[proper]].astype(np.float64))
    return np.maximum(model.ic.astype(np.float64) - parent_max, 0.0)


def candidate_features(model: AnnotationModel, query: Sequence[int], top: int, cic: np.ndarray,
                       has_term: sparse.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(top target indices by the current scoring, their feature rows)."""
    plain, weighted = model._best_matches(query)
    current = model.score([model.terms[t] for t in query])
    order = np.argsort(-current, kind="stable")[:top]
    ic_q = model.ic[np.asarray(query)].astype(np.float64)[:, None]
    closure = np.zeros(len(model.terms), dtype=np.float64)
    for term in query:
        closure[model.ancestors_of(term)] = 1.0
    p, w = plain[:, order].astype(np.float64), weighted[:, order].astype(np.float64)
    feats = np.stack([
        p.sum(0), w.sum(0), model.log_sizes[order].astype(np.float64),
        ((p >= ic_q - 1e-5) & (p > 0)).sum(0), (p <= 1e-6).sum(0),
        np.asarray(has_term[order] @ (closure * cic)).ravel(),
        model.target_to_query(list(query))[order].astype(np.float64),
        p.sum(0) / max(float(ic_q.sum()), 1e-6),
    ], axis=1)
    return order, feats


def fold_of(group: str, folds: int) -> int:
    return int(hashlib.sha256(group.encode()).hexdigest(), 16) % folds


def fit_listwise(train: Sequence[Instance], mean: np.ndarray, std: np.ndarray, *, l2: float = 0.01,
                 steps: int = 300, rate: float = 0.1) -> np.ndarray:
    """Linear weights maximising the softmax likelihood of the gold candidates (plain gradient descent)."""
    weights = np.zeros(len(mean))
    usable = [(((inst.features - mean) / std), inst.gold / inst.gold.sum()) for inst in train if inst.gold.any()]
    if not usable:
        return weights
    for _ in range(steps):
        grad = np.zeros_like(weights)
        for x, target in usable:
            s = x @ weights
            prob = np.exp(s - s.max())
            prob /= prob.sum()
            grad += x.T @ (prob - target)
        weights -= rate * (grad / len(usable) + l2 * weights)
    return weights


def collect(bundle: IndexBundle, questions: Sequence[Question], cfg: AgentConfig, *, top: int,
            group_column: str) -> list[Instance]:
    """Link every question and compute its candidates' features (questions without a model are skipped)."""
    skb = bundle.skb
    labels = sorted(skb.node_types) or sorted({n.label for n in skb.nodes.values()})
    linker = EntityLinker(bundle)
    extras: dict[tuple[str, str], tuple[np.ndarray, sparse.csr_matrix]] = {}
    out: list[Instance] = []
    for q in questions:
        target = next((lab for lab in labels if lab.lower() == (q.target_type or "").strip().lower()), None)
        if target is None:
            raise SystemExit(f"question {q.id}: target_type {q.target_type!r} is not a label of this index")
        linked = linker.link(q.query, cfg.max_entities, clauses=cfg.clause_settings(),
                             confidence_power=cfg.link_confidence_power)
        best: dict[object, tuple[float, str, str]] = {}
        for ent in linked:
            slot: object = ("group", ent.group) if ent.group is not None else ("key", ent.key)
            if ent.label != target and (slot not in best or ent.weight > best[slot][0]):
                best[slot] = (ent.weight, ent.key, ent.label)
        by_label: dict[str, list[str]] = defaultdict(list)
        for _, key, label in best.values():
            by_label[label].append(key)
        if not by_label:
            continue
        source = max(sorted(by_label), key=lambda lab: len(by_label[lab]))
        model = model_for(skb, target, source)
        if model is None or not model.term_ids(by_label[source]):
            continue
        if (target, source) not in extras:
            has_term = model.propagated.tocsr().copy()
            has_term.data[:] = 1.0
            extras[(target, source)] = (conditional_ic(model), has_term)
        cic, has_term = extras[(target, source)]
        query = list(dict.fromkeys(model.term_ids(by_label[source])))
        order, feats = candidate_features(model, query, top, cic, has_term)
        answers = set(q.answer_ids)
        gold = np.array([model.targets[i] in answers for i in order])
        group = q.group(group_column) or q.id
        out.append(Instance(q.style or "all", q.target_type or target, group, feats, gold))
    return out


def cross_validate(instances: Sequence[Instance], folds: int, train_style: str | None) -> dict[str, dict[str, float]]:
    """Held-out Hit@1 of the learned ranker and of the current scoring, by style and target type."""
    if not instances:
        raise SystemExit("no question could be scored (no linked term with an annotation model)")
    stacked = np.concatenate([inst.features for inst in instances])
    mean, std = stacked.mean(0), stacked.std(0) + 1e-9
    cells: dict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    types = sorted({inst.target_type for inst in instances})
    for fold in range(folds):
        weights = {  # one ranker per target type: their evidence differs (e.g. a gene aggregates diseases)
            ttype: fit_listwise([i for i in instances if i.target_type == ttype and fold_of(i.group, folds) != fold
                                 and train_style in (None, i.style)], mean, std)
            for ttype in types
        }
        for inst in instances:
            if fold_of(inst.group, folds) != fold:
                continue
            learned = ((inst.features - mean) / std) @ weights[inst.target_type]
            pair = (bool(inst.gold[int(np.argmax(learned))]), bool(inst.gold[0]))  # candidates come in current order
            cells[(inst.style, inst.target_type)].append(pair)
            cells[(inst.style, "all")].append(pair)
    out: dict[str, dict[str, float]] = {}
    for (style, ttype), pairs in sorted(cells.items()):
        arr = np.array(pairs, dtype=float)
        out[f"{style}/{ttype}"] = {"n": len(pairs), "learned_hit@1": round(float(arr[:, 0].mean()), 4),
                                   "current_hit@1": round(float(arr[:, 1].mean()), 4)}
    for ttype in types:
        full = fit_listwise([i for i in instances if i.target_type == ttype and train_style in (None, i.style)], mean, std)
        out[f"weights {ttype} (standardised features)"] = {name: round(float(w), 3) for name, w in zip(FEATURES, full)}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--index-dir", required=True, type=Path)
    parser.add_argument("--bench", action="append", required=True, type=Path)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--top", type=int, default=50, help="candidates per question (the current scoring's top)")
    parser.add_argument("--group-column", default="case_id", help="questions sharing it stay in one fold")
    parser.add_argument("--train-style", default=None, help="fit on this style only (default: every style)")
    args = parser.parse_args(argv)
    if args.folds < 2:
        raise SystemExit("--folds must be at least 2")
    try:
        questions = [q for path in args.bench for q in load_bench(path).questions]
        with IndexBundle.open(args.index_dir, store="none") as bundle:
            instances = collect(bundle, questions, AgentConfig(), top=args.top, group_column=args.group_column)
    except SKBError as exc:
        raise SystemExit(str(exc)) from exc
    print(json.dumps(cross_validate(instances, args.folds, args.train_style), indent=1))


if __name__ == "__main__":
    main()
