"""Neighbourhood aggregation over the index's own memory-mapped SKB: the rows the store's aggregation query
returns, computed in this process.

Why: the embedded graph store of an index is loaded from the same SKB that the process already holds as
memory-mapped arrays (``graphs.skb.compact``), so a one-hop aggregate costs a few array slices here, where
the query costs a round trip to the server, its planning and the parsing of its reply (measured on the HPO
index: 36 ms of a question's ~60 ms went to these queries, almost all of it waiting on the socket). The
store stays the path wherever its graph may differ from the SKB (a live Neo4j source) or where the server
decides what is read (a hub's sample: "the first edges it finds" is the server's order), and for
model-written Cypher.

The rows are the store's: one per neighbour, ``paths`` the number of edges reaching it (parallel edges
count each, a self-loop once when both directions are read), ``seeds`` one expanded key per edge, ``rels``
the distinct relationship types, ordered by ``paths`` descending then key ascending (code-point order, as
the store compares strings) and cut at ``limit``. ``tests/test_skb_aggregate.py`` holds them equal to a
real FalkorDB's on a graph of neutral labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from graphs.skb.compact import CompactSKB
from graphs.store.aggregate import NeighborAggregate

_SIDES: dict[str, tuple[Literal["out", "in"], ...]] = {"out": ("out",), "in": ("in",), "both": ("out", "in")}


def skb_aggregate(
    skb: CompactSKB,
    seed_label: str,
    keys: Sequence[str],
    *,
    rel_types: Sequence[str] | None = None,
    direction: Literal["out", "in", "both"] = "both",
    target_label: str | None = None,
    limit: int = 50,
    among: Sequence[str] | None = None,
) -> list[NeighborAggregate]:
    """``GraphStore.aggregate_neighbors`` (without a weight or an edge bound) over ``skb``: see the module
    docstring. Names the SKB does not hold select nothing (the tool checks them against the schema first)."""
    labels, node_label = skb.label_ids()
    if limit <= 0 or seed_label not in labels or (target_label is not None and target_label not in labels):
        return []
    seed_lid = labels.index(seed_label)
    nodes = skb.nodes
    seeds = [k for k in dict.fromkeys(keys) if k in nodes]
    if not seeds:
        return []
    seed_ids = skb.positions(seeds)
    rel_names, edge_rel, edge_src, edge_dst = skb.edge_arrays()
    rel_ids: list[int] | None = None
    if rel_types:
        rel_ids = list(dict.fromkeys(rel_names.index(r) for r in rel_types if r in rel_names))
        if not rel_ids:
            return []
    ends: list[np.ndarray] = []
    edges: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for pos, i in enumerate(seed_ids.tolist()):
        if int(node_label[i]) != seed_lid:  # the store's MATCH names the seed label
            continue
        for side in _SIDES[direction]:
            found = skb.incident(i, side, rel_ids)
            other = (edge_dst if side == "out" else edge_src)[found]
            if direction == "both" and side == "in":
                keep = other != i  # an undirected match reads a self-loop once
                found, other = found[keep], other[keep]
            if len(found):
                ends.append(other)
                edges.append(found)
                owners.append(np.full(len(found), pos, dtype=np.int32))
    if not ends:
        return []
    other = np.concatenate(ends)
    edge = np.concatenate(edges)
    owner = np.concatenate(owners)
    mask: np.ndarray | None = None
    if target_label is not None:
        mask = node_label[other] == labels.index(target_label)
    if among is not None:
        listed = skb.positions([k for k in dict.fromkeys(among) if k in nodes])
        inside = np.isin(other, listed)
        mask = inside if mask is None else mask & inside
    if mask is not None:
        other, edge, owner = other[mask], edge[mask], owner[mask]
        if not len(other):
            return []
    uniq, inverse, counts = np.unique(other, return_inverse=True, return_counts=True)
    node_keys = skb.node_keys()
    ids = uniq.tolist()
    paths = counts.tolist()
    # most edges first, then key (code points: the store's string order); only the rows returned are built
    order = np.lexsort((skb.key_ranks()[uniq], -counts))[:limit].tolist()
    one_rel = [rel_names[rel_ids[0]]] if rel_ids is not None and len(rel_ids) == 1 else None
    one_seed = len(seeds) == 1
    by_row: list[np.ndarray] | None = None
    if one_rel is None or not one_seed:
        grouped = np.argsort(inverse, kind="stable")
        bounds = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(counts, out=bounds[1:])
        by_row = [grouped[bounds[j] : bounds[j + 1]] for j in order]
    rows: list[NeighborAggregate] = []
    for n, j in enumerate(order):
        members = None if by_row is None else by_row[n]
        if one_seed or members is None:
            row_seeds = [seeds[0]] * paths[j]
        else:
            row_seeds = [seeds[p] for p in owner[members].tolist()]
        if one_rel is not None or members is None:
            rels = list(one_rel or ())
        else:
            rels = sorted({rel_names[r] for r in edge_rel[edge[members]].tolist()})
        rows.append(NeighborAggregate(node_keys[ids[j]], row_seeds, rels, paths[j], None))
    return rows
