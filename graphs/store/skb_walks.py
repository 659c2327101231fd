"""Relation-path walks over the index's own memory-mapped SKB: the rows the store returns for the walk query
(``graphs.store.aggregate.path_walk_query``), computed in this process.

Why: the offline planner's relation-path walks are one such query per predicted path, and on the embedded
store (loaded from the same SKB) each cost a round trip to the server, its planning and the parsing of its
reply (1.3-1.5 ms a call on the MetaQA index, about a seventh of a question). Here a walk is a few array
slices per node of its frontier.

The rows are the store's: the end nodes of every walk along the hops from the ``$key`` node of the start
label, each with the number of walks reaching it (``count(*)`` over the node sequences: the store traverses
an unnamed relationship by adjacency, so parallel edges are one step, and a walk may go back over an edge),
no position of a walk on the start node,
ordered by walks descending then key ascending (code-point order, as the store compares strings) and cut at
the query's LIMIT. Only the exact text ``path_walk_query`` writes is read here (``parse_walk`` re-renders
what it parsed and compares); any other query, and a walk that reads more than :data:`WALK_EDGE_BOUND`
edges (where the store's time limit could end it first), stays on the store.
``tests/graphs/store/test_skb_walks.py`` holds the rows equal to a real FalkorDB's on a graph of neutral
labels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from graphs.skb.compact import CompactSKB
from graphs.store.aggregate import path_walk_query

#: Edges a walk may read in this process (summed over its hops' frontiers); a larger walk goes to the store,
#: whose time limit decides how it ends.
WALK_EDGE_BOUND = 200_000

_NAME = r"`(?:[^`]|``)*`"
_HOP = re.compile(rf"(<)?-\[:({_NAME})\]-(>)?\(n\d+\)")
_WALK = re.compile(
    rf"MATCH \(s:({_NAME}) \{{key: \$key\}}\)((?:<?-\[:{_NAME}\]->?\(n\d+\))+) WHERE .* "
    r"RETURN n\d+\.key AS key, count\(\*\) AS walks ORDER BY walks DESC, key LIMIT (\d+)",
    re.DOTALL,
)


class Walk(NamedTuple):
    start_label: str
    hops: list[tuple[str, Literal["out", "in"]]]
    limit: int


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`")


def parse_walk(query: str) -> Walk | None:
    """The walk ``query`` asks for when it is exactly a ``path_walk_query`` text, else None."""
    found = _WALK.fullmatch(query)
    if found is None:
        return None
    hops: list[tuple[str, Literal["out", "in"]]] = []
    for arrow_in, rel, arrow_out in _HOP.findall(found.group(2)):
        if bool(arrow_in) == bool(arrow_out):
            return None
        hops.append((_unquote(rel), "in" if arrow_in else "out"))
    walk = Walk(_unquote(found.group(1)), hops, int(found.group(3)))
    if not hops or path_walk_query(walk.start_label, walk.hops, walk.limit) != query:
        return None
    return walk


def skb_walk(
    skb: CompactSKB,
    start_label: str,
    key: str,
    hops: Sequence[tuple[str, Literal["out", "in"]]],
    limit: int,
    *,
    max_edges: int = WALK_EDGE_BOUND,
) -> list[list[str | int]] | None:
    """The rows ``[key, walks]`` of the walk query over ``skb`` (see the module docstring); None when the walk
    would read more than ``max_edges`` edges. Names the SKB does not hold select nothing."""
    labels, node_label = skb.label_ids()
    if limit <= 0 or start_label not in labels or key not in skb.nodes or not hops:
        return []
    start = int(skb.positions([key])[0])
    if int(node_label[start]) != labels.index(start_label):
        return []
    rel_names, _, edge_src, edge_dst = skb.edge_arrays()
    ids = np.array([start], dtype=np.int64)
    counts = np.ones(1, dtype=np.int64)
    read = 0
    for rel, direction in hops:
        if rel not in rel_names:
            return []
        rel_id = rel_names.index(rel)
        ends: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for node, count in zip(ids.tolist(), counts.tolist(), strict=True):
            found = skb.incident(node, direction, [rel_id])
            read += len(found)
            if read > max_edges:
                return None
            if len(found):
                # the store traverses an unnamed relationship by adjacency: parallel edges are one step
                reached = np.unique((edge_dst if direction == "out" else edge_src)[found]).astype(np.int64)
                ends.append(reached)
                weights.append(np.full(len(reached), count, dtype=np.int64))
        if not ends:
            return []
        other, weight = np.concatenate(ends), np.concatenate(weights)
        keep = other != start  # no position of a walk is the start node
        other, weight = other[keep], weight[keep]
        if not len(other):
            return []
        ids, inverse = np.unique(other, return_inverse=True)
        counts = np.zeros(len(ids), dtype=np.int64)
        np.add.at(counts, inverse, weight)
    order = np.lexsort((skb.key_ranks()[ids], -counts))[:limit].tolist()
    node_keys = skb.node_keys()
    return [[node_keys[int(ids[j])], int(counts[j])] for j in order]
