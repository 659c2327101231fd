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
cached, since building one scans every edge (about a second on HPO).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import sparse

from graphs.skb.model import SKB, Direction, GraphSchema
from graphs.skb.profile import profile_for

#: Annotation weight of an edge without a usable frequency property.
DEFAULT_EDGE_WEIGHT = 1.0


@dataclass(frozen=True)
class Hierarchy:
    """A self-relation on ``label``; ``narrow_to_broad`` is the direction from child to parent."""

    label: str
    rel: str
    narrow_to_broad: Direction


@dataclass(frozen=True)
class Annotation:
    """Targets of ``target_label`` annotated with terms of ``term_label`` via ``rel`` (``direction`` from target)."""

    target_label: str
    term_label: str
    rel: str
    direction: Direction


_SCHEMAS: weakref.WeakKeyDictionary[SKB, GraphSchema] = weakref.WeakKeyDictionary()
_META_LOCK = threading.Lock()


def schema_for(skb: SKB) -> GraphSchema:
    """``skb.schema()`` computed once per SKB (it walks every node and edge: ~1 s on HPO)."""
    with _META_LOCK:
        schema = _SCHEMAS.get(skb)
        if schema is None:
            schema = _SCHEMAS[skb] = skb.schema()
        return schema


def detect_hierarchy(skb: SKB, label: str) -> Hierarchy | None:
    """The self-relation on ``label`` with the most edges, oriented child -> parent.

    Orientation is inferred, not assumed: in a hierarchy the broader side has fewer distinct
    nodes (many children share a parent; the root has none), which holds for IS_A,
    subclass_of and part_of alike, whichever way an importer drew the edges.
    """
    counts: dict[str, int] = defaultdict(int)
    for rel in schema_for(skb).relations:
        if rel.src_label == label and rel.dst_label == label:
            counts[rel.rel] += rel.count
    if not counts:
        return None
    rel_name = max(counts, key=lambda r: counts[r])
    # from the SKB's arrays: a Python pass over every edge (and a Node object per endpoint) cost seconds
    # per label at a million nodes, and kept a million Node objects alive for the garbage collector
    labels, node_label = skb.label_ids()
    rels, rel_ids, src_ids, dst_ids = skb.edge_arrays()
    if rel_name not in rels or label not in labels:
        return None
    src_all = np.asarray(src_ids)
    mask = (np.asarray(rel_ids) == rels.index(rel_name)) & (np.asarray(node_label)[src_all] == labels.index(label))
    srcs, dsts = src_all[mask], np.asarray(dst_ids)[mask]
    direction: Direction = "out" if len(np.unique(dsts)) <= len(np.unique(srcs)) else "in"
    nodes, pair_index = np.unique(np.concatenate([srcs, dsts]), return_inverse=True)
    children, parents_of = (pair_index[: len(srcs)], pair_index[len(srcs) :])
    if direction == "in":
        children, parents_of = parents_of, children
    parents: list[list[int]] = [[] for _ in range(len(nodes))]
    for child, parent in zip(children.tolist(), parents_of.tolist(), strict=True):
        if child != parent:
            parents[child].append(parent)
    if not closure_within(parents, MAX_MEAN_ANCESTORS * max(1, len(nodes))):
        return None  # a network (citations, co-purchases), not a taxonomy: its closure grows with n^2
    return Hierarchy(label, rel_name, direction)


#: A self-relation whose nodes have more broader terms than this on average is not a hierarchy.
#: Taxonomies are shallow and narrow upwards (HPO: 11.3 ancestors per term, at most 43), while the
#: closure of a citation-like network reaches a large share of the graph from every node (a generated
#: 10k-node graph: 1,860 per node, 20 s to build and 230 MB stored; quadratic in size).
MAX_MEAN_ANCESTORS = 128

#: Most targets ``AnnotationModel.score_of`` walks for the lowest score over every target; past them it returns
#: a bound on it (about 1 ms of scoring at a million nodes; see ``score_of``).
MAX_FLOOR_PROBE = 1024


def closure_within(parents: Sequence[Sequence[int]], budget: int) -> bool:
    """Whether the reflexive transitive closure over ``parents`` has at most ``budget`` entries in all.

    Stops as soon as the running total passes ``budget``, so a network costs about ``budget`` set
    insertions to reject instead of its whole (quadratic) closure. Cycles are tolerated (a node
    on a cycle stops at itself), as in ``_build_ancestors``."""
    n = len(parents)
    closure: list[frozenset[int] | None] = [None] * n
    total = 0
    for root in range(n):
        if closure[root] is not None:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        on_path = {root}
        while stack:
            node, i = stack[-1]
            if i < len(parents[node]):
                stack[-1] = (node, i + 1)
                parent = parents[node][i]
                if closure[parent] is None and parent not in on_path:
                    on_path.add(parent)
                    stack.append((parent, 0))
                continue
            stack.pop()
            on_path.discard(node)
            acc = {node}
            for parent in parents[node]:
                done = closure[parent]
                if done is not None:
                    acc |= done
                    if len(acc) > budget:
                        return False
            closure[node] = frozenset(acc)
            total += len(acc)
            if total > budget:
                return False
    return True


def find_annotation(schema: GraphSchema, target_label: str, term_label: str) -> Annotation | None:
    """The most populated relation directly linking the two labels, seen from the target."""
    best: tuple[int, Annotation] | None = None
    for rel in schema.relations:
        if rel.src_label == target_label and rel.dst_label == term_label:
            cand = Annotation(target_label, term_label, rel.rel, "out")
        elif rel.src_label == term_label and rel.dst_label == target_label:
            cand = Annotation(target_label, term_label, rel.rel, "in")
        else:
            continue
        if target_label == term_label:
            continue
        if best is None or rel.count > best[0]:
            best = (rel.count, cand)
    return best[1] if best else None


def annotations_by_pair(schema: GraphSchema) -> dict[tuple[str, str], Annotation]:
    """``find_annotation`` of every (target label, term label) pair that has one, in one pass.

    Why: asking ``find_annotation`` for every pair of labels walks every relation per pair -- cubic in
    the number of relation names when labels grow with them (a graph with 500 relation names made
    249,500 calls, minutes of build). Same result per pair: relations in schema order, the first with
    the highest count wins."""
    best: dict[tuple[str, str], tuple[int, Annotation]] = {}
    for rel in schema.relations:
        if rel.src_label == rel.dst_label:
            continue
        for target, term, direction in ((rel.src_label, rel.dst_label, "out"), (rel.dst_label, rel.src_label, "in")):
            held = best.get((target, term))
            if held is None or rel.count > held[0]:
                best[(target, term)] = (rel.count, Annotation(target, term, rel.rel, direction))  # type: ignore[arg-type]
    return {pair: annotation for pair, (_, annotation) in best.items()}


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
        self, query_terms: Sequence[int], targets: np.ndarray, partial_credit_power: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``_best_matches`` restricted to the target ids ``targets`` (columns in that order), computed from the
        targets' rows: the same float32 values, at a cost of their annotations instead of every target
        under the query's broader terms (a hub term's column can hold most of the targets)."""
        by_row = self._by_target
        starts, ends = by_row.indptr[targets], by_row.indptr[targets + 1]
        lengths = (ends - starts).astype(np.int64)
        # the concatenated row slices, without a Python loop over the targets
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        flat = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
        power = self.partial_credit_power if partial_credit_power is None else partial_credit_power
        credits = [self._ancestor_credits(term, power) for term in query_terms]
        # only the annotations some query term reaches can score: a few hundred terms of the candidates' many
        reach = np.zeros(len(self.terms), dtype=bool)
        for found in credits:
            reach[[c for c, _ in found]] = True
        terms = by_row.indices[flat]
        keep = np.flatnonzero(reach[terms])
        terms, weights = terms[keep], by_row.data[flat[keep]]
        owner = np.repeat(np.arange(len(targets), dtype=np.int64), lengths)[keep]  # the target of each annotation
        plain = np.zeros((len(query_terms), len(targets)), dtype=np.float32)
        weighted = np.zeros_like(plain)
        level = np.zeros(len(self.terms), dtype=np.float32)
        for qi, found in enumerate(credits):
            for c, credit in found:
                level[c] = credit  # float32, as ``_best_matches`` stores it
            vals = level[terms]
            wvals = np.where(vals > 0, vals * weights, np.float32(0.0)).astype(np.float32)
            np.maximum.at(plain[qi], owner, vals)  # credits are positive: the zero start is the no-match score
            np.maximum.at(weighted[qi], owner, wvals)
            level[[c for c, _ in found]] = 0.0
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
        while True:
            rows = np.concatenate((valid, order[:probe]))
            scores, reached = self._scores_of(query_keys, groups, rows, frequency_mix, size_penalty,
                                              partial_credit_power)
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
    ) -> tuple[np.ndarray, np.ndarray]:
        """``score`` / ``score_groups`` of the target ids ``rows`` (the same float32 operations, per element), and
        whether any query term reaches each."""
        log_sizes = self.log_sizes[rows]
        if groups is None:
            qids = list(dict.fromkeys(self.term_ids(query_keys)))
            if not qids:
                return np.zeros(len(rows), dtype=np.float32), np.zeros(len(rows), dtype=bool)
            plain, weighted = self._best_matches_of(qids, rows, partial_credit_power)
            agg = plain.sum(axis=0)
            if frequency_mix:
                agg = (1.0 - frequency_mix) * agg + frequency_mix * weighted.sum(axis=0)
            agg = agg - size_penalty * log_sizes
            return agg.astype(np.float32), np.asarray((plain > 0).any(axis=0))
        clean = self._clean_groups(groups)
        agg = np.zeros(len(rows), dtype=np.float32)
        if not clean:
            return agg, np.zeros(len(rows), dtype=bool)
        terms = list(dict.fromkeys(t for chosen in clean for t, _ in chosen))
        row_of = {t: i for i, t in enumerate(terms)}
        plain, weighted = self._best_matches_of(terms, rows, partial_credit_power)
        mixed = (1.0 - frequency_mix) * plain + frequency_mix * weighted if frequency_mix else plain
        for items in clean:
            if len(items) == 1 and items[0][1] == 1.0:
                agg += mixed[row_of[items[0][0]]]
                continue
            best = np.zeros(len(rows), dtype=np.float32)
            for term_id, weight in items:
                np.maximum(best, weight * mixed[row_of[term_id]], out=best)
            agg += best
        return (agg - size_penalty * log_sizes).astype(np.float32), np.asarray((plain > 0).any(axis=0))

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


def _build_ancestors(n: int, parents: list[list[int]]) -> sparse.csr_matrix:
    """Transitive closure (reflexive) by memoised DFS; hierarchies are DAGs but guard cycles."""
    closure: list[set[int] | None] = [None] * n
    visiting: set[int] = set()

    def visit(t: int) -> set[int]:
        done = closure[t]
        if done is not None:
            return done
        visiting.add(t)
        acc = {t}
        for p in parents[t]:
            if p in visiting:
                continue
            acc |= visit(p)
        visiting.discard(t)
        closure[t] = acc
        return acc

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10 * n + 1000))
    try:
        rows: list[int] = []
        cols: list[int] = []
        for t in range(n):
            anc = visit(t)
            rows.extend([t] * len(anc))
            cols.extend(anc)
    finally:
        sys.setrecursionlimit(old)
        # ``visit`` refers to itself through its closure, a cycle that lives until a full collection of the
        # garbage collector: what it holds (a set per term, the caller's parent lists) is released now
        closure.clear()
        parents = []
    data = np.ones(len(rows), dtype=np.float32)
    return sparse.csr_matrix((data, (np.array(rows), np.array(cols))), shape=(n, n))


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
