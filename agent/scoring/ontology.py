"""Information-content scoring of targets against a set of query terms from a term hierarchy.

Why: a question that lists features ("which disease has A, B and C?") is answered best
by the target whose annotations explain the features most *specifically*. Counting
shared terms is not enough: a disease annotated with "focal seizure" explains "seizure",
and sharing "abnormality of the head" means almost nothing. The classic answer (Resnik
similarity, best-match aggregation, as in Phenomizer) needs only three things any SKB
with a hierarchy has:

- a *term* label with a self-relation (the hierarchy, e.g. ``IS_A``),
- a *target* label with an annotation relation to terms,
- degree statistics, giving each term's information content
  ``IC(t) = -log(fraction of annotated targets annotated with t or a descendant)``.

Nothing here names a label or a relation; callers discover them from the schema
(``find_hierarchy``, ``find_annotation``). Models are built once per (SKB, labels) and
cached, since building one scans every edge (about a second on HPO). Finding the hierarchy and the
annotation relation lives in ``agent.scoring.hierarchy``, the model and its scoring in
``agent.scoring.annotation_model``, the weight of an edge and the credit of a match in ``agent.scoring.credit``
(all re-exported here); this module builds a model from an SKB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from agent.scoring.annotation_model import MAX_FLOOR_PROBE, AnnotationModel
from agent.scoring.credit import DEFAULT_EDGE_WEIGHT, edge_weight, match_value
from agent.scoring.hierarchy import (
    MAX_MEAN_ANCESTORS,
    Annotation,
    Hierarchy,
    _build_ancestors,
    closure_within,
    detect_hierarchy,
    find_annotation,
    schema_for,
)
from graphs.skb.model import SKB
from graphs.skb.profile import profile_for

__all__ = [
    "DEFAULT_EDGE_WEIGHT",
    "MAX_FLOOR_PROBE",
    "MAX_MEAN_ANCESTORS",
    "Annotation",
    "AnnotationModel",
    "GraphArrays",
    "Hierarchy",
    "LinkMatrix",
    "build_model",
    "closure_within",
    "detect_hierarchy",
    "edge_weight",
    "find_annotation",
    "match_value",
    "schema_for",
]


@dataclass
class GraphArrays:
    """An SKB's node labels and edges as arrays, and its annotation edges' weights, computed once for every
    model built from it.

    Why: each model reads the same arrays (a Python pass over every node and edge) and, where the profile
    weights annotations by an edge property, the weight of every edge of its relation; an index stores several
    models over a few relations (one relation read from both ends gives two models)."""

    keys: Sequence[str]
    labels: list[str]
    node_label: np.ndarray
    rels: list[str]
    rel_ids: np.ndarray
    src_ids: np.ndarray
    dst_ids: np.ndarray
    _of_rel: dict[str, np.ndarray] = field(default_factory=dict)
    _weights: dict[tuple[str, str, float], np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, skb: SKB) -> GraphArrays:
        # from the SKB's arrays (node order, edge order): the same matrices as a pass over the Node and Edge
        # objects, without building a million of them at a million nodes (seconds, and kept alive)
        labels, node_label = skb.label_ids()
        rels, rel_ids, src_ids, dst_ids = skb.edge_arrays()
        return cls(skb.node_keys(), labels, np.asarray(node_label), rels, np.asarray(rel_ids), np.asarray(src_ids),
                   np.asarray(dst_ids))

    def edges_of(self, rel: str) -> np.ndarray:
        """The ids of ``rel``'s edges, in edge order."""
        if rel not in self._of_rel:
            self._of_rel[rel] = (np.flatnonzero(self.rel_ids == self.rels.index(rel)) if rel in self.rels
                                 else np.zeros(0, dtype=np.int64))
        return self._of_rel[rel]

    def weights(self, skb: SKB, rel: str, prop: str, floor: float) -> np.ndarray:
        """``edge_weight`` of each of ``rel``'s edges (in ``edges_of`` order), read from the edge records once."""
        key = (rel, prop, floor)
        if key not in self._weights:
            edges, ids = skb.edges, self.edges_of(rel)
            self._weights[key] = np.fromiter((edge_weight(edges[i].props, floor, prop) for i in ids.tolist()),
                                             dtype=np.float32, count=len(ids))
        return self._weights[key]


def build_model(
    skb: SKB,
    annotation: Annotation,
    hierarchy: Hierarchy | None,
    *,
    weight_floor: float = 0.0,
    arrays: GraphArrays | None = None,
) -> AnnotationModel:
    """Build the matrices; IC is computed over targets that have at least one annotation.

    The edge-weight property and the default scoring weights come from the SKB's domain profile. ``arrays``:
    the SKB's (``GraphArrays.of(skb)``), shared by the models built from one SKB.
    """
    scoring = profile_for(skb).scoring
    arrays = arrays or GraphArrays.of(skb)
    keys, labels, node_label = arrays.keys, arrays.labels, arrays.node_label
    src_ids, dst_ids = arrays.src_ids, arrays.dst_ids

    def of_label(label: str) -> np.ndarray:
        return np.flatnonzero(node_label == labels.index(label)) if label in labels else np.zeros(0, dtype=np.int64)

    def positions(ids: np.ndarray) -> np.ndarray:
        pos = np.full(len(node_label), -1, dtype=np.int64)
        pos[ids] = np.arange(len(ids), dtype=np.int64)
        return pos

    term_ids, target_ids = of_label(annotation.term_label), of_label(annotation.target_label)
    terms = tuple(keys[i] for i in term_ids.tolist())  # tuples: graphs.heap
    term_index = {k: i for i, k in enumerate(terms)}
    targets = tuple(keys[i] for i in target_ids.tolist())
    target_index = {k: i for i, k in enumerate(targets)}
    term_pos, target_pos = positions(term_ids), positions(target_ids)

    def along(rel: str, forward: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edge ids of ``rel`` and their (from, to) node ids, src -> dst when ``forward``."""
        ids = arrays.edges_of(rel)
        a, b = src_ids[ids], dst_ids[ids]
        return (ids, a, b) if forward else (ids, b, a)

    parents: list[list[int]] = [[] for _ in terms]
    if hierarchy is not None:
        _, child, parent = along(hierarchy.rel, hierarchy.narrow_to_broad == "out")
        ci, pi = term_pos[child], term_pos[parent]
        keep = (ci >= 0) & (pi >= 0) & (ci != pi)
        for c, q in zip(ci[keep].tolist(), pi[keep].tolist(), strict=True):
            parents[c].append(q)
    ancestors = _build_ancestors(len(terms), parents)

    _, tgt, term = along(annotation.rel, annotation.direction == "out")
    ti, ci = target_pos[tgt], term_pos[term]
    keep = (ti >= 0) & (ci >= 0)
    d_rows, d_cols = ti[keep], ci[keep]
    prop = scoring.edge_weight_property
    if prop is None:
        d_vals = np.full(len(d_rows), DEFAULT_EDGE_WEIGHT, dtype=np.float32)
    else:  # the weights are edge properties: read only the annotation edges' records
        d_vals = arrays.weights(skb, annotation.rel, prop, weight_floor)[keep]
    shape = (len(targets), len(terms))
    direct = sparse.csr_matrix((d_vals, (d_rows, d_cols)), shape=shape)
    direct.sum_duplicates()

    # Max-propagate each annotation's weight to all ancestors of its term.
    # (each annotation's ancestor row of the closure, gathered as one index array: no Python loop per term)
    coo = direct.tocoo()
    starts = ancestors.indptr[coo.col].astype(np.int64)
    lengths = ancestors.indptr[coo.col + 1].astype(np.int64) - starts
    p_rows = np.repeat(coo.row, lengths)
    p_vals = np.repeat(coo.data, lengths)
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    p_cols = ancestors.indices[np.repeat(starts, lengths) + within]
    order = np.lexsort((-p_vals, p_cols, p_rows))
    p_rows, p_cols, p_vals = p_rows[order], p_cols[order], p_vals[order]
    first = np.ones(len(p_rows), dtype=bool)
    if len(p_rows) > 1:
        first[1:] = (p_rows[1:] != p_rows[:-1]) | (p_cols[1:] != p_cols[:-1])
    propagated = sparse.csc_matrix((p_vals[first], (p_rows[first], p_cols[first])), shape=shape, dtype=np.float32)

    annotated = int(np.count_nonzero(np.diff(direct.indptr)))
    counts = np.diff(propagated.indptr).astype(np.float64)
    n = max(annotated, 1)
    max_ic = math.log(n + 1)
    with np.errstate(divide="ignore"):
        ic = np.where(counts > 0, -np.log(np.maximum(counts, 1) / n), max_ic)
    ic = np.maximum(ic, 0.0).astype(np.float32)
    return AnnotationModel(
        terms=terms,
        term_index=term_index,
        targets=targets,
        target_index=target_index,
        ancestors=ancestors,
        direct=direct,
        propagated=propagated,
        ic=ic,
        max_ic=max_ic,
        hierarchy=hierarchy,
        annotation=annotation,
        frequency_mix=scoring.frequency_mix,
        size_penalty=scoring.size_penalty,
        symmetric=scoring.symmetric,
        partial_credit_power=scoring.partial_credit_power,
    )


@dataclass
class LinkMatrix:
    """Adjacency between two labels along one relation: rows ``rows`` keys, columns a model's targets."""

    row_index: dict[str, int]
    matrix: sparse.csr_matrix
