"""Finding a term hierarchy and an annotation relation in a graph's schema, and closing a hierarchy
over ancestors.

Why apart from the scoring model: discovery reads only the schema and the edge arrays, and decides
whether a self-relation is a taxonomy at all (a citation network is not); the model (``ontology``)
is built over what it finds. Nothing here names a label or a relation.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from graphs.skb.model import SKB, Direction, GraphSchema


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
    if not closure_within(parents, MAX_MEAN_ANCESTORS * max(1, len(nodes)), MAX_ANCESTORS):
        return None  # a network (citations, co-purchases), not a taxonomy: its closure grows with n^2
    return Hierarchy(label, rel_name, direction)


#: A self-relation whose nodes have more broader terms than this on average is not a hierarchy.
#: Taxonomies are shallow and narrow upwards (HPO: 11.3 ancestors per term, at most 43), while the
#: closure of a citation-like network reaches a large share of the graph from every node (a generated
#: 10k-node graph: 1,860 per node, 20 s to build and 230 MB stored; quadratic in size).
MAX_MEAN_ANCESTORS = 128

#: Nor is one where a single node has more broader terms than this (HPO: at most 43).
#: Why a bound per node besides the mean: a network's closures grow from its first nodes on, so one node
#: past it rejects the network early; the mean alone let a 150,000-node citation network fill 19 million set
#: entries first (0.9 GB and seconds at 300k nodes, three times that at a million).
MAX_ANCESTORS = 8 * MAX_MEAN_ANCESTORS


def closure_within(parents: Sequence[Sequence[int]], budget: int, cap: int | None = None) -> bool:
    """Whether the reflexive transitive closure over ``parents`` has at most ``budget`` entries in all, and
    at most ``cap`` (None: any number) for each node.

    Stops as soon as the running total passes ``budget`` or a node's closure passes ``cap``, so a network
    costs at most about ``budget`` set insertions to reject instead of its whole (quadratic) closure. Cycles
    are tolerated (a node on a cycle stops at itself), as in ``_build_ancestors``."""
    limit = budget if cap is None else min(cap, budget)
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
                    if len(acc) > limit:
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
