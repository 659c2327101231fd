"""PASemiQA *Search*: the one-hop neighbourhood of given nodes, aggregated per neighbour.

Why aggregate in the store: a hub phenotype has thousands of edges; shipping each as a triple
(with properties) to Python and then to a model's context costs tens of kilobytes per call. One
Cypher query groups the edges per neighbour (which seeds and relations reach it, how many edges,
an optional weight sum) and orders and limits them server-side, so a call returns at most
``limit`` small rows. When the question is known and more neighbours exist than ``limit``, the
server returns a larger pool which is ranked by relevance to the question (one matrix-vector
product over the node vectors) and then cut to ``limit``. Raw triples come only on request. When the
store is the index's embedded copy of the graph, the same rows are read from the memory-mapped SKB in
this process instead (``graphs.store.skb_aggregate``: no round trip; :data:`READ_SKB`).

Hubs are sampled: a key whose expansion would read more than :data:`HUB_EDGES` edges is expanded on
its own, from the first ``HUB_EDGES`` edges the store reads, and the result says so (``sampled``, and
the provenance's query). Why: in a graph with power-law degrees the largest hubs grow with the graph
(116,608 edges into one node of a 300k-node graph), and aggregating a whole hub cost the server time
proportional to it on every question that named it (the agent's p50 grew ~10x from 10k to 300k
nodes). From one key every neighbour has one edge, so the ranking pool of a hub was already an
arbitrary ``RANK_POOL`` of its neighbours (the smallest keys); a bounded sample is no less
informative and costs the same at every graph size. Keys below the bound are expanded exactly as before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from langchain_core.tools import BaseTool
from pydantic import Field

from graphs.errors import ConfigError, StoreError, StoreUnavailableError
from graphs.skb.compact import CompactSKB
from graphs.store.aggregate import NeighborAggregate
from graphs.store.skb_aggregate import skb_aggregate
from tools.common import (
    InjectedArgs,
    QuestionGetter,
    SKBTool,
    embed_query,
    embedding_matrix,
    label_hint,
    question_for,
    relation_hint,
    schema_of,
)
from tools.results import (
    DEFAULT_BUDGET_TOKENS,
    Neighbor,
    Neighborhood,
    ToolProvenance,
    TripleRow,
    tool_error,
    tool_output,
)

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle
    from graphs.skb.model import Node

NAME = "search_nodes"
DESCRIPTION = (
    "Expand node keys one hop along typed relationships (explicit edges). Returns one row per neighbour: "
    "key, label, name, which of the given keys reach it (via seeds), by which relationship types, how many "
    "edges, and its relevance to the question; most-connected / most-relevant first. Filter by relationship "
    "types, direction ('out' follows the stored arrow from the given nodes, 'in' goes against it, 'both') and "
    "the neighbour label. Set among to check membership: only those neighbours, e.g. which of your "
    "candidates the keys reach (cheap even from a very connected node). Set include_triples for a few raw edges."
)
#: Most neighbours one call returns.
MAX_LIMIT = 1000
#: Neighbours the store hands back for relevance ranking before the cut to ``limit``.
RANK_POOL = 5000
#: Pool size per ``limit`` when many keys are expanded (edge counts make the cut; relevance orders the rest).
RANK_POOL_FACTOR = 1
#: Most raw edges a call returns when asked for them.
MAX_TRIPLES = 25
#: Most keys a membership check (``among``) lists.
MAX_AMONG = MAX_LIMIT
#: Wall-clock limit of the aggregation query.
QUERY_TIMEOUT_MS = 5000
#: Edges one key may make the store read; a key with more (a hub) is expanded from a sample of this many.
#: Equal to the ranking pool: below it the pool holds the whole neighbourhood, so nothing changes (the
#: bundled graphs' largest one-relation neighbourhoods: 4,195 and 4,176 edges).
HUB_EDGES = RANK_POOL
#: Read the neighbour aggregates from the index's memory-mapped SKB when the store is the embedded copy of
#: the same graph (``graphs.store.skb_aggregate``: the same rows without a round trip to the server); False
#: sends every aggregate to the store (tests of the store's own path).
READ_SKB = True


class SearchNodesArgs(InjectedArgs):
    keys: list[str] = Field(
        min_length=1, max_length=200, description="node keys to expand (the `key` of nodes from earlier results)"
    )
    rel_types: list[str] | None = Field(default=None, description="only these relationship types")
    direction: Literal["out", "in", "both"] = "both"
    target_label: str | None = Field(default=None, description="only neighbors with this label")
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT, description="most neighbours to return")
    among: list[str] | None = Field(
        default=None, max_length=MAX_AMONG,
        description="only neighbours with these keys (a membership check, e.g. which candidates the keys reach)",
    )
    rank: bool = Field(default=True, description="rank by relevance to the question; false keeps edge-count order")
    include_triples: bool = Field(default=False, description=f"also return up to {MAX_TRIPLES} raw edges")


def make_search_nodes(
    bundle: IndexBundle,
    question_getter: QuestionGetter | None = None,
    *,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    weight_property: str | None = None,
) -> BaseTool:
    """``weight_property``: a numeric edge property summed per neighbour (None: no weight column)."""

    def aggregate(
        known: list[str],
        rel_types: list[str] | None,
        direction: Literal["out", "in", "both"],
        target_label: str | None,
        fetch: int,
        sampled: dict[str, int],
        among: list[str] | None = None,
    ) -> list[NeighborAggregate]:
        """The neighbours of ``known`` as the store aggregated them (seeds made distinct), most edges first.
        A hub (see :data:`HUB_EDGES`) is its own query, over a sample; ``sampled`` gets its edge count. With
        ``among`` nothing is sampled: the listed nodes' edges bound what the server reads."""
        skb = bundle.skb
        nodes = skb.nodes
        by_label: dict[str, list[str]] = defaultdict(list)
        hubs: list[tuple[str, str]] = []
        for key in known:
            label = nodes[key].label
            # the total degree bounds the count and costs nothing; the exact count only for a possible hub
            if among is None and skb.degree(key) > HUB_EDGES:
                edges = skb.edge_count(key, rel_types, direction, target_label)
                if edges > HUB_EDGES:
                    sampled[key] = edges
                    hubs.append((label, key))
                    continue
            by_label[label].append(key)
        # one query per seed label (almost every call expands keys of a single label), one per hub
        groups: list[tuple[str, list[str], int | None]] = [(lab, keys, None) for lab, keys in sorted(by_label.items())]
        groups += [(label, [key], HUB_EDGES) for label, key in hubs]
        embedded = READ_SKB and weight_property is None and bundle.store_kind == "falkordb"
        local = skb if embedded and isinstance(skb, CompactSKB) else None
        results = [
            skb_aggregate(
                local, seed_label, keys, rel_types=rel_types, direction=direction, target_label=target_label,
                limit=fetch, among=among,
            )
            if local is not None and max_edges is None
            else bundle.store.aggregate_neighbors(
                seed_label,
                keys,
                rel_types=rel_types,
                direction=direction,
                target_label=target_label if among is not None or implied_label(seed_label, rel_types, direction)
                != target_label else None,
                weight_property=weight_property,
                limit=fetch,
                timeout_ms=QUERY_TIMEOUT_MS,
                max_edges=max_edges,
                among=among,
            )
            for seed_label, keys, max_edges in groups
        ]
        if len(results) == 1:
            return results[0]
        merged: dict[str, NeighborAggregate] = {}
        for rows in results:
            for row in rows:
                prev = merged.get(row.key)
                if prev is None:
                    merged[row.key] = row
                    continue
                weight = prev.weight if row.weight is None else (prev.weight or 0.0) + row.weight
                merged[row.key] = NeighborAggregate(
                    row.key, [*prev.seeds, *row.seeds], sorted({*prev.rels, *row.rels}), prev.paths + row.paths, weight
                )
        return sorted(merged.values(), key=lambda n: (-n.paths, n.key))

    def implied_label(seed_label: str, rel_types: list[str] | None, direction: str) -> str | None:
        """The one label every neighbour along ``rel_types`` in ``direction`` from ``seed_label`` nodes has, by
        the graph's schema (None: several, or none). Why: the store would check a target label that the
        relations already imply on every edge it reads, and that check is not free (from a 384,058-edge hub
        of the 1M-node scale graph, 1,000 edges read in 16 ms with the label, 4 ms without); each node of
        the graph has one label, so the rows are the same. Kept for a membership check (``among``): there the
        label lets the server start from the listed nodes' key index."""
        ends = {
            rel.dst_label if outgoing else rel.src_label
            for rel in schema_of(bundle).relations
            if rel_types is None or rel.rel in rel_types
            for outgoing in (True, False)
            if direction in (("out", "both") if outgoing else ("in", "both"))
            and (rel.src_label if outgoing else rel.dst_label) == seed_label
        }
        return next(iter(ends)) if len(ends) == 1 else None

    def neighbor(
        nodes: Mapping[str, Node], row: NeighborAggregate, target_label: str | None, score: float | None
    ) -> Neighbor:
        """The typed result row (validated: pydantic's core validates a row faster than model_construct
        copies one, and only the rows a call returns are built)."""
        node = nodes.get(row.key)
        return Neighbor(
            key=row.key,
            label=node.label if node is not None else (target_label or ""),
            name=node.name if node is not None else row.key,
            seeds=sorted(set(row.seeds)),
            rels=sorted(row.rels),
            paths=row.paths,
            weight=row.weight,
            score=score,
        )

    def run(
        keys: list[str],
        rel_types: list[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        limit: int = 50,
        among: list[str] | None = None,
        rank: bool = True,
        include_triples: bool = False,
        step: int = 0,
        question: str | None = None,
    ) -> tuple[str, Neighborhood | Any]:
        query = f"keys={keys} rel_types={rel_types} direction={direction} target_label={target_label}"
        if among is not None:
            query += f" among={among[:20]}{f' (+{len(among) - 20})' if len(among) > 20 else ''}"
        schema = schema_of(bundle)
        if target_label is not None and target_label not in schema.label_names():
            msg = f"no node label {target_label!r}"
            return tool_output(tool_error(NAME, step, query, "unknown_label", msg, label_hint(schema)), budget_tokens)
        unknown_rels = sorted(set(rel_types or ()) - set(schema.relation_names()))
        if unknown_rels:
            msg = f"unknown relationship types {unknown_rels}"
            err = tool_error(NAME, step, query, "unknown_relation", msg, relation_hint(schema))
            return tool_output(err, budget_tokens)
        known = [k for k in dict.fromkeys(keys) if k in bundle.skb.nodes]
        unknown_keys = [k for k in keys if k not in bundle.skb.nodes]
        if not known:
            msg = f"none of the keys {unknown_keys[:10]} is a node of the graph"
            hint = "use keys returned by semantic_search, the plan's linked entities or earlier results"
            return tool_output(tool_error(NAME, step, query, "unknown_key", msg, hint), budget_tokens)
        q = question_for(question, question_getter)
        do_rank = rank and bool(q)
        # Ranking order is edge count (how many of the keys reach a neighbour), then relevance. From one
        # key every neighbour has one edge, so relevance decides alone and needs the whole pool; from
        # many keys the server's edge-count order makes the cut and relevance orders what is returned
        # (a larger pool bought no accuracy on the HPO dev set and cost a third of the latency).
        pool = RANK_POOL if len(known) == 1 else min(RANK_POOL, RANK_POOL_FACTOR * limit)
        fetch = max(pool, limit) if do_rank else limit
        rels = list(rel_types) if rel_types else None
        wanted = None if among is None else list(dict.fromkeys(among))

        sampled: dict[str, int] = {}

        def fetch_all() -> tuple[list[NeighborAggregate], list[TripleRow]]:
            sampled.clear()
            found = aggregate(known, rels, direction, target_label, fetch + 1, sampled, wanted)
            triples: list[TripleRow] = []
            if include_triples:
                raw = bundle.store.neighbors(
                    known, rel_types=rels, direction=direction, target_label=target_label, limit=MAX_TRIPLES
                )
                listed = None if wanted is None else set(wanted)
                triples = [
                    TripleRow(src=t.src, rel=t.rel, dst=t.dst, props=t.props)
                    for t in raw
                    if listed is None or t.src in listed or t.dst in listed
                ]
            return found, triples

        try:
            try:
                rows, triples = fetch_all()
            except StoreUnavailableError:
                # a server that died (or was stopped by a rebuild) is restarted by the next call;
                # one-hop lookups are cheap and idempotent, so retry once before reporting
                rows, triples = fetch_all()
        except StoreUnavailableError as exc:
            hint = "the graph store is restarted on the next call; retry once, or use semantic_search meanwhile"
            return tool_output(tool_error(NAME, step, query, "store_unavailable", str(exc), hint), budget_tokens)
        except (StoreError, ConfigError) as exc:
            hint = "check keys, relationship types and label against the schema; " + relation_hint(schema)
            return tool_output(tool_error(NAME, step, query, "store_error", str(exc), hint), budget_tokens)
        truncated = len(rows) > fetch
        rows = rows[:fetch]
        scores: list[float | None] = [None] * len(rows)
        if do_rank and q and len(rows) > limit:
            cosines = embedding_matrix(bundle).scores([r.key for r in rows], embed_query(bundle, q))
            cosines = np.where(np.isnan(cosines), -1.0, cosines)
            # edge count first (more keys reaching a node is more evidence), then relevance
            order = np.lexsort((-cosines, -np.fromiter((r.paths for r in rows), dtype=np.int64, count=len(rows))))
            kept = order[: limit + 1]  # scores only on what is returned (one more, to detect the cut)
            rows = [rows[i] for i in kept]
            scores = [round(float(cosines[i]), 4) for i in kept]
            truncated = truncated or len(order) > limit
        else:
            do_rank = False
        if len(rows) > limit:
            rows, scores = rows[:limit], scores[:limit]
            truncated = True
        nodes = bundle.skb.nodes
        neighbors = [neighbor(nodes, row, target_label, score) for row, score in zip(rows, scores, strict=True)]
        if sampled:
            note = "; ".join(f"{k}: {HUB_EDGES:,} of {n:,} edges" for k, n in sampled.items())
            query = f"{query[:400]} sampled {note}"
            truncated = True
        result = Neighborhood(
            provenance=ToolProvenance(tool=NAME, step=step, query=query[:500]),
            keys=known,
            rel_types=rels,
            neighbors=neighbors,
            triples=triples,
            truncated=truncated,
            ranked=do_rank,
            unknown_keys=unknown_keys,
            sampled=sampled,
            sample_edges=HUB_EDGES if sampled else None,
        )
        return tool_output(result, budget_tokens)

    def in_process(args: dict[str, Any]) -> bool:
        """The call reads its aggregates from the in-process SKB (``aggregate``'s condition), no seed can be a
        hub sampled on the store, and no raw edges are asked for (those come from the store)."""
        skb = bundle.skb
        if not (READ_SKB and weight_property is None and bundle.store_kind == "falkordb" and isinstance(skb, CompactSKB)):
            return False
        if args.get("include_triples"):
            return False
        if args.get("among") is not None:
            return True
        keys = args.get("keys") or []
        return all(skb.degree(k) <= HUB_EDGES for k in keys if isinstance(k, str) and k in skb.nodes)

    return SKBTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=SearchNodesArgs, response_format="content_and_artifact",
        in_process=in_process,
    )
