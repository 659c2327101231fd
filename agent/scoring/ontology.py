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
annotation relation lives in ``agent.scoring.hierarchy`` (re-exported here); this module is the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import sparse

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

#: Annotation weight of an edge without a usable frequency property.
DEFAULT_EDGE_WEIGHT = 1.0

#: Most targets ``AnnotationModel.score_of`` walks for the lowest score over every target; past them it returns
#: a bound on it (about 1 ms of scoring at a million nodes; see ``score_of``).
MAX_FLOOR_PROBE = 1024


def edge_weight(props: dict[str, object], floor: float = 0.0, prop: str | None = None) -> float:
    """Annotation weight from the numeric edge property ``prop`` in [0, 1] (the domain profile's
    ``scoring.edge_weight_property``, e.g. HPO's ``freq``); 1.0 when absent or when ``prop`` is None."""
    if prop is None:
        return DEFAULT_EDGE_WEIGHT
    value = props.get(prop)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(floor, min(1.0, float(value)))
    return DEFAULT_EDGE_WEIGHT


def match_value(shared_ic: float, query_ic: float, power: float) -> float:
    """Credit of a query term matched through a common ancestor: ``IC(q) * (IC(c) / IC(q)) ** power``.

    ``shared_ic`` is IC(c) of the most informative term the query term q shares with an annotation
    (q itself when the target is annotated with q or a narrower term, then the credit is IC(q) whatever
    the power). Power 1 is Resnik's IC(c). Why a power above 1: Resnik credits a match through a broad
    ancestor with that ancestor's IC in full, and with every feature of a question a little of that
    credit reaches every target annotated anywhere under the same broad branches. A target with many
    annotations collects it from most features and can outrank the target that carries the features
    themselves, most of all when features are linked from paraphrases, as neighbours of the right term
    (measured on the paraphrase benchmark: evals report ``paraphrased-clauses.md``). A power above 1
    keeps a near match (the sibling's parent, almost as informative as the term) close to full credit
    and shrinks a far one (a broad category) towards zero.
    """
    if power == 1.0 or shared_ic <= 0.0 or query_ic <= 0.0 or shared_ic >= query_ic:
        return shared_ic
    return query_ic * (shared_ic / query_ic) ** power


@dataclass
class AnnotationModel:
    """Sparse matrices over one term hierarchy and one target label.

    ``ancestors`` (terms x terms, CSR): row t has t and all its broader terms.
    ``direct`` (targets x terms, CSR): the annotation weights as stored.
    ``propagated`` (targets x terms, CSC): max weight of any direct annotation at or below the term.
    ``ic``: information content per term (0 for the root, ``max_ic`` for unannotated terms).
    """

    terms: Sequence[str]
    term_index: dict[str, int]
    targets: Sequence[str]
    target_index: dict[str, int]
    ancestors: sparse.csr_matrix
    direct: sparse.csr_matrix
    propagated: sparse.csc_matrix
    ic: np.ndarray
    max_ic: float
    hierarchy: Hierarchy | None
    annotation: Annotation
    frequency_mix: float = 0.1
    """Default share of frequency-weighted matches in ``score`` (the profile's ``scoring.frequency_mix``)."""
    size_penalty: float = 0.5
    """Default penalty per log annotation count in ``score`` (the profile's ``scoring.size_penalty``)."""
    symmetric: float = 0.0
    """Default weight of the target->query match in ``score`` (the profile's ``scoring.symmetric``)."""
    partial_credit_power: float = 1.0
    """Default steepness of the credit for a match through a broader term (the profile's
    ``scoring.partial_credit_power``; 1 is Resnik, see ``match_value``)."""
    _anc_cache: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    # not dataclass fields: the stored models' code digest covers the fields, and derived caches change
    # nothing that is stored
    @cached_property
    def _by_target(self) -> sparse.csr_matrix:
        """``propagated`` by rows (built on the first scoring of a few targets)."""
        return self.propagated.tocsr()

    @cached_property
    def _by_size(self) -> tuple[sparse.csc_matrix, np.ndarray]:
        """``propagated`` with its rows in ``_size_order`` (each column's rows ascending), and each annotation's
        ``column * targets + row``, ascending: the annotations of a run of that order under given terms are
        found by one binary search per term (``score_of`` walks a prefix of the order for the floor, a run of
        the most annotated targets, whose rows hold up to a few hundred terms each where a query reaches tens)."""
        by_size = sparse.csc_matrix(self.propagated[self._size_order])
        by_size.sort_indices()
        rows, cols = by_size.shape
        kind = np.int32 if rows * cols < np.iinfo(np.int32).max else np.int64  # half the memory where it fits
        columns = np.repeat(np.arange(cols, dtype=kind), np.diff(by_size.indptr))
        return by_size, columns * kind(rows) + by_size.indices.astype(kind)

    @cached_property
    def _size_rank(self) -> np.ndarray:
        """Each target's position in ``_size_order``."""
        rank = np.empty(len(self._size_order), dtype=np.int64)
        rank[self._size_order] = np.arange(len(self._size_order), dtype=np.int64)
        return rank

    @cached_property
    def _size_order(self) -> np.ndarray:
        """Targets by annotation count, most first (the order ``score_of`` walks for the floor)."""
        return np.argsort(-np.diff(self.direct.indptr), kind="stable")

    # -- hierarchy -----------------------------------------------------------------
    def ancestors_of(self, term: int) -> np.ndarray:
        """Indices of the term and its broader terms, most informative first."""
        hit = self._anc_cache.get(term)
        if hit is None:
            row = self.ancestors.indices[self.ancestors.indptr[term] : self.ancestors.indptr[term + 1]]
            hit = row[np.argsort(-self.ic[row], kind="stable")]
            self._anc_cache[term] = hit
        return hit

    def term_ids(self, keys: Iterable[str]) -> list[int]:
        return [self.term_index[k] for k in keys if k in self.term_index]

    # -- scoring -------------------------------------------------------------------
    def query_to_target(self, query_terms: Sequence[int], weighted: bool = True) -> np.ndarray:
        """(n_query, n_targets): for each query term, best IC of a term shared with each target.

        Resnik best match: max over common ancestors c of the query term and any of the target's
        annotations of IC(c), optionally multiplied by the annotation's frequency weight.
        """
        return self._best_matches(query_terms)[1 if weighted else 0]

    def _best_matches(
        self, query_terms: Sequence[int], partial_credit_power: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unweighted and frequency-weighted best matches in one pass over the ancestors."""
        power = self.partial_credit_power if partial_credit_power is None else partial_credit_power
        plain = np.zeros((len(query_terms), len(self.targets)), dtype=np.float32)
        weighted = np.zeros_like(plain)
        prop = self.propagated
        for qi, term in enumerate(query_terms):
            row, wrow = plain[qi], weighted[qi]
            for c, ic in self._ancestor_credits(term, power):
                lo, hi = prop.indptr[c], prop.indptr[c + 1]
                rows = prop.indices[lo:hi]  # unique within a column: plain fancy assignment is safe
                row[rows] = np.maximum(row[rows], ic)
                wrow[rows] = np.maximum(wrow[rows], ic * prop.data[lo:hi])
        return plain, weighted

    def _ancestor_credits(self, term: int, power: float) -> list[tuple[int, float]]:
        """(ancestor, credit of a match through it: ``match_value``) for a query term, most informative first,
        while the ancestor's IC is positive. The one definition of a match's value that ``_best_matches`` and
        ``_best_matches_of`` share (they must give the same numbers)."""
        own = float(self.ic[term])
        credits: list[tuple[int, float]] = []
        for c in self.ancestors_of(term):
            ic = float(self.ic[c])
            if ic <= 0.0:
                break
            credits.append((int(c), match_value(ic, own, power)))
        return credits

    def _clean_groups(self, groups: Sequence[Sequence[tuple[str, float]]]) -> list[list[tuple[int, float]]]:
        """Each feature's candidates as (term id, weight), unknown terms and non-positive weights dropped, and a
        feature that repeats another one counted once (``score_groups`` and the candidate scoring alike)."""
        seen: set[tuple[tuple[int, float], ...]] = set()
        clean: list[list[tuple[int, float]]] = []
        for group in groups:
            found = tuple(sorted({(self.term_index[k], float(w)) for k, w in group if k in self.term_index and w > 0}))
            if found and found not in seen:
                seen.add(found)
                clean.append(list(found))
        return clean

    def _best_matches_of(
        self,
        query_terms: Sequence[int],
        targets: np.ndarray,
        partial_credit_power: float | None = None,
        done: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``_best_matches`` restricted to the target ids ``targets`` (columns in that order), computed from the
        targets' rows: the same float32 values, at a cost of their annotations instead of every target
        under the query's broader terms (a hub term's column can hold most of the targets). A run of targets
        in ``_size_order`` (the floor walk of ``score_of``) is read from the reached terms' columns instead,
        cut to the run (``_by_size``): at a cost of the annotations that score, not of all the run's.

        ``done``: this call's result for a prefix of ``targets`` (an earlier call with the same query terms);
        only the other columns are computed. Each column depends on its target alone, so the values are the
        same as computing every column again."""
        if done is not None:
            k = done[0].shape[1]
            plain, weighted = self._best_matches_of(query_terms, targets[k:], partial_credit_power)
            return np.hstack((done[0], plain)), np.hstack((done[1], weighted))
        ranks = self._size_rank[targets]
        breaks = np.flatnonzero(np.diff(ranks) != 1)
        run = int(breaks[-1]) + 1 if len(breaks) else 0  # where the last run of the size order starts
        if 0 < run < len(targets) - 1:  # some targets, then a run (``score_of``'s candidates, then its walk)
            head = self._best_matches_of(query_terms, targets[:run], partial_credit_power)
            return self._best_matches_of(query_terms, targets, partial_credit_power, head)
        power = self.partial_credit_power if partial_credit_power is None else partial_credit_power
        credits = [self._ancestor_credits(term, power) for term in query_terms]
        # only the annotations some query term reaches can score: a few hundred terms of the candidates' many
        reached = np.unique(np.array([c for found in credits for c, _ in found], dtype=np.int64))
        slot = np.zeros(len(self.terms), dtype=np.int64)
        slot[reached] = np.arange(len(reached), dtype=np.int64)
        if len(targets) > 1 and run == 0:
            # a run of the size order: the reached terms' columns, cut to the run by binary search
            by_size, positions = self._by_size
            first = reached * by_size.shape[0] + ranks[0]
            lo = np.searchsorted(positions, first.astype(positions.dtype))
            lengths = np.searchsorted(positions, (first + len(ranks)).astype(positions.dtype)) - lo
            flat = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
            by_owner = np.argsort(by_size.indices[flat], kind="stable")
            flat = flat[by_owner]
            owner = by_size.indices[flat].astype(np.int64) - ranks[0]
            slots = np.repeat(np.arange(len(reached), dtype=np.int64), lengths)[by_owner]
            weights = by_size.data[flat]
        else:
            by_row = self._by_target
            starts, ends = by_row.indptr[targets], by_row.indptr[targets + 1]
            lengths = (ends - starts).astype(np.int64)
            bounds = np.cumsum(lengths)  # where each target's annotations end among the gathered ones
            # the concatenated row slices, without a Python loop over the targets
            flat = np.repeat(starts - (bounds - lengths), lengths) + np.arange(int(bounds[-1]) if len(bounds) else 0)
            reach = np.zeros(len(self.terms), dtype=bool)
            reach[reached] = True
            terms = by_row.indices[flat]
            keep = np.flatnonzero(reach[terms])
            slots, weights = slot[terms[keep]], by_row.data[flat[keep]]
            owner = np.searchsorted(bounds, keep, side="right")  # the annotations run target by target
        plain = np.zeros((len(query_terms), len(targets)), dtype=np.float32)
        weighted = np.zeros_like(plain)
        if not len(owner):
            return plain, weighted
        # the credit of each query term through each reached term (0: no match), float32 as ``_best_matches``
        level = np.zeros((len(query_terms), len(reached)), dtype=np.float32)
        for qi, found in enumerate(credits):
            for c, credit in found:
                level[qi, slot[c]] = credit
        vals = level[:, slots]
        wvals = np.where(vals > 0, vals * weights, np.float32(0.0)).astype(np.float32)
        # each target's best is a maximum over one segment of the annotations (they run target by target)
        firsts = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
        owners = owner[firsts]
        zero = np.float32(0.0)  # credits are positive: the zero start is the no-match score
        plain[:, owners] = np.maximum(zero, np.maximum.reduceat(vals, firsts, axis=1))
        weighted[:, owners] = np.maximum(zero, np.maximum.reduceat(wvals, firsts, axis=1))
        return plain, weighted

    def score_of(
        self,
        query_keys: Sequence[str],
        targets: Sequence[str],
        groups: Sequence[Sequence[tuple[str, float]]] | None = None,
        *,
        frequency_mix: float | None = None,
        size_penalty: float | None = None,
        partial_credit_power: float | None = None,
    ) -> tuple[np.ndarray, float]:
        """The scores of ``targets`` (``score``, or ``score_groups`` when ``groups`` are given; NaN for a key
        that is not a target, the same float32 values as the full arrays) and the minimum score over every
        target: exact, or past :data:`MAX_FLOOR_PROBE` targets a bound on it.

        Why: a planner ranks a few thousand candidates, and scoring every target of a million-node graph
        per question cost time in proportion to the graph. The minimum needs no full pass either: no target
        scores below ``-size_penalty * log(1 + its annotations)`` (what it scores when no query term reaches
        it), so walking targets from the most annotated down, the walk stops at the first target no query
        term reaches, or as soon as the next target's least possible score is no lower than the lowest score
        so far. A query reaching nearly every heavily annotated target (a hub term, or broad terms with
        partial credit) would walk far (16,384 of the 500,000 targets of the 1M-node scale graph: 30 ms per
        question), so the walk stops at :data:`MAX_FLOOR_PROBE` targets with a bound (the lowest score so far
        and the least any later target can score). The floor is one constant per question and model, which
        the planner subtracts from every candidate: the order it ranks by is the same either way. Falls back
        to the full arrays where no such bound holds (no size penalty, or a symmetric term)."""
        frequency_mix = self.frequency_mix if frequency_mix is None else frequency_mix
        size_penalty = self.size_penalty if size_penalty is None else size_penalty
        ids = np.array([self.target_index.get(k, -1) for k in targets], dtype=np.int64)
        if size_penalty <= 0 or (groups is None and self.symmetric):
            knobs = {"frequency_mix": frequency_mix, "size_penalty": size_penalty,
                     "partial_credit_power": partial_credit_power}
            full = (self.score_groups(groups, **knobs) if groups is not None else self.score(query_keys, **knobs))
            return np.where(ids >= 0, full[np.maximum(ids, 0)], np.nan).astype(np.float32), float(full.min())
        order = self._size_order
        n = len(self.targets)
        valid = ids[ids >= 0]
        probe = min(n, 64)
        matches: tuple[np.ndarray, np.ndarray] | None = None  # the previous round's, for a prefix of ``rows``
        while True:
            rows = np.concatenate((valid, order[:probe]))
            scores, reached, matches = self._scores_of(query_keys, groups, rows, frequency_mix, size_penalty,
                                                       partial_credit_power, matches)
            lowest = np.minimum.accumulate(scores[len(valid) :])
            if not reached[len(valid) :].all():
                # the first target no query term reaches scores the least a target of its size can
                floor = float(lowest[int(np.argmin(reached[len(valid) :]))])
                break
            nxt = order[1 : probe + 1]
            least = (np.zeros(len(nxt), dtype=np.float32) - size_penalty * self.log_sizes[nxt]).astype(np.float32)
            # every target after position j scores at least ``least[j]``: the walk may stop at the first j
            # where that is no lower than the lowest score so far
            done = np.flatnonzero(least >= lowest[: len(least)])
            if done.size:
                floor = float(lowest[int(done[0])])
                break
            if probe == n:
                floor = float(lowest[-1])
                break
            if probe >= MAX_FLOOR_PROBE:
                # a bound, not the exact minimum: every later target scores at least ``least[-1]``
                floor = float(min(lowest[-1], least[-1]))
                break
            probe = min(n, probe * 4)
        out = np.full(len(ids), np.nan, dtype=np.float32)
        out[ids >= 0] = scores[: int((ids >= 0).sum())]
        return out, floor

    def _scores_of(
        self,
        query_keys: Sequence[str],
        groups: Sequence[Sequence[tuple[str, float]]] | None,
        rows: np.ndarray,
        frequency_mix: float,
        size_penalty: float,
        partial_credit_power: float | None = None,
        done: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """``score`` / ``score_groups`` of the target ids ``rows`` (the same float32 operations, per element),
        whether any query term reaches each, and the best matches they rest on (``done`` of a later call whose
        ``rows`` extend these: see ``_best_matches_of``)."""
        log_sizes = self.log_sizes[rows]
        if groups is None:
            qids = list(dict.fromkeys(self.term_ids(query_keys)))
            if not qids:
                return np.zeros(len(rows), dtype=np.float32), np.zeros(len(rows), dtype=bool), None
            plain, weighted = self._best_matches_of(qids, rows, partial_credit_power, done)
            agg = plain.sum(axis=0)
            if frequency_mix:
                agg = (1.0 - frequency_mix) * agg + frequency_mix * weighted.sum(axis=0)
            agg = agg - size_penalty * log_sizes
            return agg.astype(np.float32), np.asarray((plain > 0).any(axis=0)), (plain, weighted)
        clean = self._clean_groups(groups)
        agg = np.zeros(len(rows), dtype=np.float32)
        if not clean:
            return agg, np.zeros(len(rows), dtype=bool), None
        terms = list(dict.fromkeys(t for chosen in clean for t, _ in chosen))
        row_of = {t: i for i, t in enumerate(terms)}
        plain, weighted = self._best_matches_of(terms, rows, partial_credit_power, done)
        mixed = (1.0 - frequency_mix) * plain + frequency_mix * weighted if frequency_mix else plain
        for items in clean:
            if len(items) == 1 and items[0][1] == 1.0:
                agg += mixed[row_of[items[0][0]]]
                continue
            best = np.zeros(len(rows), dtype=np.float32)
            for term_id, weight in items:
                np.maximum(best, weight * mixed[row_of[term_id]], out=best)
            agg += best
        matches = (plain, weighted)
        return (agg - size_penalty * log_sizes).astype(np.float32), np.asarray((plain > 0).any(axis=0)), matches

    def target_to_query(self, query_terms: Sequence[int]) -> np.ndarray:
        """(n_targets,): mean over a target's direct annotations of their best IC match in the query."""
        m = np.zeros(len(self.terms), dtype=np.float32)
        for term in query_terms:
            anc = self.ancestors_of(term)
            m[anc] = self.ic[anc]
        # best[a] = max over ancestors c of a of m[c]
        anc_m = self.ancestors.multiply(m[np.newaxis, :]).tocsr()
        best = np.asarray(anc_m.max(axis=1).todense()).ravel().astype(np.float32)
        indicator = self.direct.copy()
        indicator.data[:] = 1.0
        sums = indicator @ best
        counts = np.asarray(indicator.sum(axis=1)).ravel()
        return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0).astype(np.float32)

    def score(
        self,
        query_keys: Sequence[str],
        *,
        frequency_mix: float | None = None,
        size_penalty: float | None = None,
        symmetric: float | None = None,
        partial_credit_power: float | None = None,
    ) -> np.ndarray:
        """Score every target for a set of query terms (higher is better).

        ``sum_q [(1 - mix) * resnik(q, t) + mix * resnik_freq(q, t)] - size_penalty * log(1 + |ann(t)|)``
        (+ ``symmetric`` x mean target->query match). The size penalty is the prior of a generative
        reading: a target with many annotations explains any one feature less specifically; without
        it, ties between targets that match every feature are broken arbitrarily. ``None`` takes the
        model's values, which come from the domain profile (HPO's profile: mix 0.1 and penalty 0.5,
        which beat plain Resnik by ~8 points Hit@1 on the HPO dev benchmark).
        """
        frequency_mix = self.frequency_mix if frequency_mix is None else frequency_mix
        size_penalty = self.size_penalty if size_penalty is None else size_penalty
        symmetric = self.symmetric if symmetric is None else symmetric
        qids = list(dict.fromkeys(self.term_ids(query_keys)))
        if not qids:
            return np.zeros(len(self.targets), dtype=np.float32)
        plain, weighted = self._best_matches(qids, partial_credit_power)
        agg = plain.sum(axis=0)
        if frequency_mix:
            agg = (1.0 - frequency_mix) * agg + frequency_mix * weighted.sum(axis=0)
        if size_penalty:
            agg = agg - size_penalty * self.log_sizes
        if symmetric:
            agg = agg + symmetric * len(qids) * self.target_to_query(qids)
        return agg.astype(np.float32)

    def score_groups(
        self,
        groups: Sequence[Sequence[tuple[str, float]]],
        *,
        frequency_mix: float | None = None,
        size_penalty: float | None = None,
        partial_credit_power: float | None = None,
    ) -> np.ndarray:
        """Score every target for weighted alternatives per query feature (higher is better).

        ``groups``: one list per feature (a question clause) of ``(term key, weight)`` candidates.
        A feature contributes ``max_c weight_c * match(c, t)`` -- the candidate reading of the clause
        that best explains the target, discounted by how confidently the clause was linked to it --
        so several candidates per clause widen what can match without counting the clause twice.
        With single candidates of weight 1 this equals ``score`` (without the symmetric term).
        """
        frequency_mix = self.frequency_mix if frequency_mix is None else frequency_mix
        size_penalty = self.size_penalty if size_penalty is None else size_penalty
        clean = self._clean_groups(groups)
        agg = np.zeros(len(self.targets), dtype=np.float32)
        if not clean:
            return agg
        terms = list(dict.fromkeys(t for chosen in clean for t, _ in chosen))
        row_of = {t: i for i, t in enumerate(terms)}
        plain, weighted = self._best_matches(terms, partial_credit_power)
        mixed = (1.0 - frequency_mix) * plain + frequency_mix * weighted if frequency_mix else plain
        for items in clean:
            if len(items) == 1 and items[0][1] == 1.0:
                agg += mixed[row_of[items[0][0]]]
                continue
            best = np.zeros(len(self.targets), dtype=np.float32)
            for term_id, weight in items:
                np.maximum(best, weight * mixed[row_of[term_id]], out=best)
            agg += best
        if size_penalty:
            return (agg - size_penalty * self.log_sizes).astype(np.float32)
        return agg

    @cached_property
    def log_sizes(self) -> np.ndarray:
        """``log(1 + annotations)`` per target, float32 (every scoring reads it; computed once)."""
        return np.log1p(np.diff(self.direct.indptr).astype(np.float32))

    def mean_annotations(self) -> float:
        """Average number of direct annotations per annotated target."""
        sizes = np.diff(self.direct.indptr)
        annotated = sizes[sizes > 0]
        return float(annotated.mean()) if len(annotated) else 0.0


def build_model(
    skb: SKB,
    annotation: Annotation,
    hierarchy: Hierarchy | None,
    *,
    weight_floor: float = 0.0,
) -> AnnotationModel:
    """Build the matrices; IC is computed over targets that have at least one annotation.

    The edge-weight property and the default scoring weights come from the SKB's domain profile.
    """
    scoring = profile_for(skb).scoring
    # from the SKB's arrays (node order, edge order): the same matrices as a pass over the Node and Edge
    # objects, without building a million of them at a million nodes (seconds, and kept alive)
    keys = skb.node_keys()
    labels, node_label = skb.label_ids()
    node_label = np.asarray(node_label)
    rels, rel_array, src_array, dst_array = skb.edge_arrays()
    rel_ids, src_ids, dst_ids = np.asarray(rel_array), np.asarray(src_array), np.asarray(dst_array)

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
        ids = np.flatnonzero(rel_ids == rels.index(rel)) if rel in rels else np.zeros(0, dtype=np.int64)
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

    edge_ids, tgt, term = along(annotation.rel, annotation.direction == "out")
    ti, ci = target_pos[tgt], term_pos[term]
    keep = (ti >= 0) & (ci >= 0)
    d_rows, d_cols = ti[keep], ci[keep]
    prop = scoring.edge_weight_property
    if prop is None:
        d_vals = np.full(len(d_rows), DEFAULT_EDGE_WEIGHT, dtype=np.float32)
    else:  # the weights are edge properties: read only the annotation edges' records
        edges = skb.edges
        d_vals = np.array([edge_weight(edges[int(i)].props, weight_floor, prop) for i in edge_ids[keep].tolist()],
                          dtype=np.float32)
    shape = (len(targets), len(terms))
    direct = sparse.csr_matrix((d_vals, (d_rows, d_cols)), shape=shape)
    direct.sum_duplicates()

    # Max-propagate each annotation's weight to all ancestors of its term.
    coo = direct.tocoo()
    anc_lists = [ancestors.indices[ancestors.indptr[c] : ancestors.indptr[c + 1]] for c in range(len(terms))]
    lengths = np.array([len(anc_lists[c]) for c in coo.col], dtype=np.int64)
    p_rows = np.repeat(coo.row, lengths)
    p_vals = np.repeat(coo.data, lengths)
    p_cols = np.concatenate([anc_lists[c] for c in coo.col]) if len(coo.col) else np.zeros(0, dtype=np.int64)
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
