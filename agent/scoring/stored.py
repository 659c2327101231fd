"""The scoring models a question uses, stored at index time or computed once per SKB.

Why: the ontology scoring models (transitive closure, propagated annotations, information content)
took seconds on every process start for the same index. ``skb index`` runs ``precompute_scoring``
(an ``skb_agent.index_state`` entry point); ``model_for`` and ``find_hierarchy`` read the records back
and fall back to computing (``agent.scoring.ontology``) when a record is missing or was computed by
other code or another domain profile.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from agent.scoring import hierarchy as hy
from agent.scoring import ontology as os_
from agent.scoring.hierarchy import (
    _META_LOCK,
    _SCHEMAS,
    Annotation,
    Hierarchy,
    annotations_by_pair,
    detect_hierarchy,
    find_annotation,
    schema_for,
)
from agent.scoring.ontology import AnnotationModel, GraphArrays, LinkMatrix, build_model
from graphs.skb.digest import code_digest
from graphs.skb.model import SKB, Edge, GraphSchema, Node
from graphs.skb.state import digest_of, node_keys, profile_section_json, stored_record, write_state

SCORING = "scoring"

_DIGESTS: weakref.WeakKeyDictionary[SKB, dict[str, str]] = weakref.WeakKeyDictionary()


def scoring_digest(skb: SKB) -> str:
    """The code and profile the scoring record depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if SCORING not in per:
        code = code_digest(os_.build_model, hy._build_ancestors, os_.edge_weight, os_.GraphArrays, hy.detect_hierarchy,
                            hy.closure_within, hy.MAX_MEAN_ANCESTORS, hy.MAX_ANCESTORS, hy.find_annotation,
                            os_.AnnotationModel, hy.Hierarchy, hy.Annotation, os_.DEFAULT_EDGE_WEIGHT)
        per[SCORING] = digest_of(code, code_digest(Node, Edge), profile_section_json(skb, "scoring"))
    return per[SCORING]


# -- scoring models --------------------------------------------------------------------------
#: At most this many (target, term) models are stored per index (a schema with many labels has many pairs).
MAX_STORED_MODELS = 16


def precompute_scoring(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Store every label's hierarchy and the scoring models of label pairs linked by a relation.

    Pairs whose term label has a hierarchy come first (the information-content ranking), then the
    others by annotation count, up to ``MAX_STORED_MODELS``; any other pair is computed on demand."""
    if schema is not None:
        with _META_LOCK:
            _SCHEMAS.setdefault(skb, schema)  # the build computed it once already
    schema = schema_for(skb)
    labels = schema.label_names()
    position = {key: i for i, key in enumerate(node_keys(skb))}
    by_rel: dict[str, list[Any]] = defaultdict(list)
    for edge in () if skb.arrays_are_fixed else skb.edges:  # one pass; each hierarchy test reads its relations'
        by_rel[edge.rel].append(edge)
    hierarchies: dict[str, list[str] | None] = {}
    found: dict[str, Any] = {}
    # one pass over the relations each (a loop per label or per pair of labels over every relation was
    # quadratic, and cubic, in relation names where labels grow with them)
    self_rels: dict[str, set[str]] = defaultdict(set)
    for r in schema.relations:
        if r.src_label == r.dst_label:
            self_rels[r.src_label].add(r.rel)
    for label in labels:
        # no self-relation, no hierarchy (``detect_hierarchy`` looks at self-relations only)
        found[label] = detect_hierarchy(_with_edges(skb, by_rel, self_rels[label]), label) if self_rels.get(label) else None
        hierarchy = found[label]
        hierarchies[label] = None if hierarchy is None else [hierarchy.rel, hierarchy.narrow_to_broad]
    counts = {(r.rel, r.src_label, r.dst_label): r.count for r in schema.relations}
    pairs = []
    known = set(labels)
    for (target_label, term_label), annotation in annotations_by_pair(schema).items():
        if target_label not in known or term_label not in known:
            continue
        ends = (target_label, term_label) if annotation.direction == "out" else (term_label, target_label)
        weight = counts.get((annotation.rel, *ends), 0)
        pairs.append((found[term_label] is None, -weight, target_label, term_label, annotation))
    pairs.sort(key=lambda p: p[:4])
    models: list[dict[str, Any]] = []
    stored: dict[str, np.ndarray] = {}
    arrays = GraphArrays.of(skb)  # the models read one relation's edges each, in edge order: shared
    for _, _, target_label, term_label, annotation in pairs[:MAX_STORED_MODELS]:
        model = build_model(skb, annotation, found[term_label], arrays=arrays)
        tag = f"m{len(models)}"
        models.append({
            "tag": tag, "target_label": target_label, "term_label": term_label,
            "rel": annotation.rel, "direction": annotation.direction, "max_ic": model.max_ic,
            "frequency_mix": model.frequency_mix, "size_penalty": model.size_penalty,
            "symmetric": model.symmetric, "partial_credit_power": model.partial_credit_power,
        })
        stored[f"{tag}.terms"] = np.asarray([position[k] for k in model.terms], dtype=np.int32)
        stored[f"{tag}.targets"] = np.asarray([position[k] for k in model.targets], dtype=np.int32)
        stored[f"{tag}.ic"] = np.asarray(model.ic, dtype=np.float32)
        for name in ("ancestors", "direct", "propagated"):
            stored.update(_matrix_arrays(f"{tag}.{name}", getattr(model, name)))
        stored.update(_orderings(tag, model))
    write_state(state_dir, SCORING, scoring_digest(skb), {"hierarchies": hierarchies, "models": models}, stored)


def _matrix_arrays(prefix: str, matrix: Any) -> dict[str, np.ndarray]:
    """A sparse matrix's three arrays, as a stored record names them (``_stored_matrix`` reads them back)."""
    return {f"{prefix}.data": matrix.data, f"{prefix}.indices": matrix.indices, f"{prefix}.indptr": matrix.indptr}


def _stored_matrix(arrays: dict[str, np.ndarray], prefix: str, kind: type[sparse.csr_matrix | sparse.csc_matrix],
                   shape: tuple[int, int]) -> Any:  # fmt: skip
    """The matrix ``_matrix_arrays`` stored under ``prefix``, on the mapped arrays themselves (no copy)."""
    return kind((arrays[f"{prefix}.data"], arrays[f"{prefix}.indices"], arrays[f"{prefix}.indptr"]), shape=shape)


def _orderings(tag: str, model: AnnotationModel) -> dict[str, np.ndarray]:
    """The orderings a question's scoring derives from a model (``AnnotationModel._by_target``, ``_by_size``,
    ``_size_order``), stored beside its matrices. Why: derived in each process that answers, they are its own
    memory (about 40 MB on HPO); stored, every process maps the same pages."""
    by_size, flat = model._by_size
    return {
        f"{tag}.size_order": np.asarray(model._size_order), f"{tag}.by_size.flat": flat,
        **_matrix_arrays(f"{tag}.by_size", by_size), **_matrix_arrays(f"{tag}.by_target", model._by_target),
    }  # fmt: skip


def _adopt_orderings(model: AnnotationModel, tag: str, arrays: dict[str, np.ndarray]) -> None:
    """Give ``model`` the stored orderings (where the index has them: an index built before they were stored
    derives them on first use, as before). They are ``cached_property`` values: set where it keeps them."""
    if f"{tag}.size_order" not in arrays:
        return
    shape = model.propagated.shape
    by_size = _stored_matrix(arrays, f"{tag}.by_size", sparse.csc_matrix, shape)
    by_size.has_sorted_indices = True
    by_target = _stored_matrix(arrays, f"{tag}.by_target", sparse.csr_matrix, shape)
    model.__dict__.update({"_size_order": arrays[f"{tag}.size_order"], "_by_target": by_target,
                           "_by_size": (by_size, arrays[f"{tag}.by_size.flat"])})  # fmt: skip


def _with_edges(skb: SKB, by_rel: dict[str, list[Any]], rels: set[str]) -> SKB:
    """A shallow copy of ``skb`` holding only the edges of ``rels`` (each relation's edges in their order).

    Why: finding a label's hierarchy filters edges by relation; giving it only its self-relations' edges
    makes it several times faster with identical results (it never mixes two relations' edges in one
    loop, so the order within each relation is all that matters). The models read ``GraphArrays``."""
    import copy

    if skb.arrays_are_fixed:  # the whole graph's arrays cost nothing to read: a view would build its own
        return skb
    view = copy.copy(skb)
    view.edges = [edge for rel in sorted(rels) for edge in by_rel.get(rel, ())]
    schema = schema_for(skb)
    with _META_LOCK:
        _SCHEMAS[view] = schema  # the whole SKB's schema (relation counts), not the view's
    return view


def stored_hierarchy(skb: SKB, label: str) -> tuple[bool, Any]:
    """``(True, Hierarchy | None)`` when the index stores ``label``'s hierarchy; ``(False, None)`` otherwise."""
    found = stored_record(skb, SCORING, scoring_digest)
    if found is None or label not in found[0]["hierarchies"]:
        return False, None
    value = found[0]["hierarchies"][label]
    return True, None if value is None else Hierarchy(label, str(value[0]), value[1])


def stored_model(skb: SKB, target_label: str, term_label: str) -> Any:
    """The stored ``AnnotationModel`` for the pair, or None (not stored: compute it)."""
    found = stored_record(skb, SCORING, scoring_digest)
    if found is None:
        return None
    meta, arrays = found
    spec = next(
        (m for m in meta["models"] if m["target_label"] == target_label and m["term_label"] == term_label), None
    )
    if spec is None:
        return None
    has, hierarchy = stored_hierarchy(skb, term_label)
    tag = spec["tag"]
    terms, term_index = key_table(skb, arrays[f"{tag}.terms"])
    targets, target_index = key_table(skb, arrays[f"{tag}.targets"])
    shape_tt = (len(targets), len(terms))

    model = AnnotationModel(
        terms=terms,
        term_index=term_index,
        targets=targets,
        target_index=target_index,
        ancestors=_stored_matrix(arrays, f"{tag}.ancestors", sparse.csr_matrix, (len(terms), len(terms))),
        direct=_stored_matrix(arrays, f"{tag}.direct", sparse.csr_matrix, shape_tt),
        propagated=_stored_matrix(arrays, f"{tag}.propagated", sparse.csc_matrix, shape_tt),
        ic=np.array(arrays[f"{tag}.ic"], dtype=np.float32),
        max_ic=float(spec["max_ic"]),
        hierarchy=hierarchy if has else None,
        annotation=Annotation(target_label, term_label, str(spec["rel"]), spec["direction"]),
        frequency_mix=float(spec["frequency_mix"]),
        size_penalty=float(spec["size_penalty"]),
        symmetric=float(spec["symmetric"]),
        partial_credit_power=float(spec.get("partial_credit_power", 1.0)),
    )
    _adopt_orderings(model, tag, arrays)
    return model


_KEY_TABLES: weakref.WeakKeyDictionary[SKB, dict[bytes, tuple[tuple[str, ...], dict[str, int]]]] = (
    weakref.WeakKeyDictionary()
)


def key_table(skb: SKB, positions: np.ndarray) -> tuple[tuple[str, ...], dict[str, int]]:
    """The keys of the nodes at ``positions`` and each key's place among them, one pair per distinct list.

    Why shared: the models of a label pair, of the reverse pair and the link matrices name the same nodes of a
    label (six stored models of three labels list three sets of nodes), and each pair held its own tuple and
    dictionary of them (8 MB of every answering process on a graph of 37,000 nodes). Callers must not change them."""
    flat = np.ascontiguousarray(positions, dtype=np.int64)
    digest = hashlib.blake2b(flat.tobytes(), digest_size=16).digest()
    with _META_LOCK:
        hit = _KEY_TABLES.setdefault(skb, {}).get(digest)
    if hit is None:
        keys = node_keys(skb)
        ordered = tuple(keys[i] for i in flat.tolist())  # a tuple: graphs.heap
        hit = (ordered, {key: i for i, key in enumerate(ordered)})
        with _META_LOCK:
            hit = _KEY_TABLES.setdefault(skb, {}).setdefault(digest, hit)
    return hit


def link_pairs(
    skb: SKB, rel: str, row_label: str, target_index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(row nodes' positions, rows, cols)`` of ``rel`` edges (either direction) from ``row_label`` nodes to the
    targets of ``target_index``, vectorised over a memory-mapped SKB's arrays; None for other SKBs
    (``ontology_scoring.link_matrix`` then scans the edges)."""
    from graphs.skb.compact import CompactSKB

    if not isinstance(skb, CompactSKB):
        return None
    rels, rel_ids, src, dst = skb.edge_arrays()
    labels, node_label = skb.label_ids()
    keys = skb.node_keys()
    n = len(keys)
    row_nodes = np.flatnonzero(np.asarray(node_label) == labels.index(row_label)) if row_label in labels else np.zeros(0, dtype=np.int64)
    # int32 positions and one direction at a time: the temporaries over a relation's edges were 16 MB on HPO's
    # largest, memory a process's allocator kept
    idx = np.int32 if n < 2**31 else np.int64
    row_of = np.full(n, -1, dtype=idx)
    row_of[row_nodes] = np.arange(len(row_nodes), dtype=idx)
    col_of = np.full(n, -1, dtype=idx)
    if target_index:
        col_of[skb.positions(list(target_index))] = np.fromiter(target_index.values(), dtype=idx, count=len(target_index))
    if rel not in rels:
        return row_nodes, np.zeros(0, dtype=idx), np.zeros(0, dtype=idx)
    mask = np.asarray(rel_ids) == rels.index(rel)
    s, d = np.asarray(src)[mask], np.asarray(dst)[mask]
    del mask
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for one, other in ((s, d), (d, s)):  # either direction
        r, c = row_of[one], col_of[other]
        keep = (r >= 0) & (c >= 0)
        rows.append(r[keep])
        cols.append(c[keep])
    return row_nodes, np.concatenate(rows), np.concatenate(cols)


# -- the models a question uses: stored or computed once per SKB -----------------------------
_HIERARCHIES: weakref.WeakKeyDictionary[SKB, dict[str, Hierarchy | None]] = weakref.WeakKeyDictionary()


def find_hierarchy(skb: SKB, label: str) -> Hierarchy | None:
    """Cached ``detect_hierarchy`` (stored by ``skb index``: ``agent.scoring.stored``)."""
    with _META_LOCK:
        per = _HIERARCHIES.setdefault(skb, {})
        if label in per:
            return per[label]
    stored, found = stored_hierarchy(skb, label)
    if not stored:
        found = detect_hierarchy(skb, label)
    with _META_LOCK:
        _HIERARCHIES.setdefault(skb, {})[label] = found
    return found


_CACHE: weakref.WeakKeyDictionary[SKB, dict[tuple[str, str], AnnotationModel | None]] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def model_for(skb: SKB, target_label: str, term_label: str) -> AnnotationModel | None:
    """The cached model scoring ``target_label`` nodes by ``term_label`` annotations (None if unlinked)."""
    with _CACHE_LOCK:
        per = _CACHE.setdefault(skb, {})
        if (target_label, term_label) in per:
            return per[(target_label, term_label)]
        model = stored_model(skb, target_label, term_label)
        if model is not None:
            per[(target_label, term_label)] = model
            return model
        annotation = find_annotation(schema_for(skb), target_label, term_label)
        if annotation is not None:
            model = build_model(skb, annotation, find_hierarchy(skb, term_label))
        per[(target_label, term_label)] = model
        return model


_LINKS: weakref.WeakKeyDictionary[SKB, dict[tuple[str, str, str, str], LinkMatrix]] = weakref.WeakKeyDictionary()


def link_matrix(skb: SKB, rel: str, row_label: str, col_model: AnnotationModel) -> LinkMatrix:
    """Cached sparse adjacency from ``row_label`` nodes to ``col_model``'s targets over ``rel`` (either direction)."""
    cache_key = (rel, row_label, col_model.annotation.target_label, col_model.annotation.term_label)
    with _CACHE_LOCK:
        per = _LINKS.setdefault(skb, {})
        hit = per.get(cache_key)
        if hit is not None:
            return hit
        fast = link_pairs(skb, rel, row_label, col_model.target_index)  # an index's arrays: no scan
        r: list[int] | np.ndarray
        c: list[int] | np.ndarray
        rows_keys: tuple[str, ...] | list[str]
        if fast is not None:
            row_nodes, r, c = fast
            rows_keys, row_index = key_table(skb, row_nodes)
        else:
            rows_keys = [n.key for n in skb.nodes.values() if n.label == row_label]
            row_index = {k: i for i, k in enumerate(rows_keys)}
            r_list: list[int] = []
            c_list: list[int] = []
            r, c = r_list, c_list
            for edge in skb.edges:
                if edge.rel != rel:
                    continue
                for a, b in ((edge.src, edge.dst), (edge.dst, edge.src)):
                    ri, ci = row_index.get(a), col_model.target_index.get(b)
                    if ri is not None and ci is not None:
                        r_list.append(ri)
                        c_list.append(ci)
        mat = sparse.csr_matrix(
            (np.ones(len(r), dtype=np.float32), (np.asarray(r), np.asarray(c))),
            shape=(len(rows_keys), len(col_model.targets)),
        )
        mat.sum_duplicates()
        mat.data[:] = 1.0
        per[cache_key] = result = LinkMatrix(row_index, mat)
        return result
