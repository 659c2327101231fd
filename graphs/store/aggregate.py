"""Neighbourhood aggregation in Cypher: one row per neighbour of a set of keys, computed by the server.

Why here and not in the tool: labels and relation types cannot be Cypher parameters, so the query
text names them (validated against the schema, backtick-quoted), as the stores' own ``neighbors``
does; query text is built only in the store layer, never in tools or the agent. The text is
portable: FalkorDB and Neo4j-compatible servers (tested over Bolt against ArcadeDB) run it as is,
through ``GraphStore.aggregate_neighbors`` on the backend's read-only path. That path skips the
static guard's tokenizer (a few milliseconds per call, several calls per question): the text is
built here from schema-checked names, and the server's read-only mode still refuses writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple

from graphs.store.props import quote_name


class NeighborAggregate(NamedTuple):
    """One neighbour of a set of keys, aggregated over every edge that reaches it (a row of
    ``aggregation_query`` with the columns it leaves out filled in)."""

    key: str
    seeds: list[str]
    """The expanded keys adjacent to it, one entry per edge (parallel edges repeat a seed)."""
    rels: list[str]
    """The relationship types that reach it."""
    paths: int
    """How many edges reach it."""
    weight: float | None
    """Sum of the weight property over those edges (None: no weight property asked for)."""


def aggregation_query(
    seed_label: str,
    rel_types: list[str] | None,
    direction: Literal["out", "in", "both"],
    target_label: str | None,
    weight_property: str | None = None,
    *,
    single_seed: bool = False,
) -> str:
    """The one Cypher query that aggregates the neighbourhood of ``$keys`` (all of ``seed_label``).

    Columns: key, seeds (one entry per edge: parallel edges repeat a seed; left out with
    ``single_seed``, where every entry is the one key), paths (edge count), then rels (the relation
    types reaching the neighbour) only when more than one type is allowed, and weight (sum of
    ``weight_property``) only when one is named. A column whose value the caller already knows would be
    built by the server and parsed by the client once per row for nothing (``aggregation_rows`` fills
    them in): from one hub key (thousands of neighbours, every one of which is ranked) dropping the
    seeds list cut the call from 76 to 28 ms. Only names validated against the schema are spliced in
    (backtick-quoted); keys and the limit are parameters. Portable across FalkorDB and Neo4j-compatible
    servers (no subqueries, no dynamic property access). Cheap by construction: no DISTINCT over seeds.
    """
    rels = ":" + "|".join(quote_name(r) for r in rel_types) if rel_types else ""
    target = f":{quote_name(target_label)}" if target_label else ""
    left, right = {"out": ("-", "->"), "in": ("<-", "-"), "both": ("-", "-")}[direction]
    grouped = "count(r) AS paths" if single_seed else "collect(n.key) AS seeds, count(r) AS paths"
    returned = "m.key AS key, paths" if single_seed else "m.key AS key, seeds, paths"
    if not _one_type(rel_types):
        grouped += ", collect(DISTINCT type(r)) AS rels"
        returned += ", rels"
    if weight_property:
        grouped += f", sum(coalesce(toFloat(r.{quote_name(weight_property)}), 0.0)) AS weight"
        returned += ", weight"
    return (
        f"MATCH (n:{quote_name(seed_label)}){left}[r{rels}]{right}(m{target}) WHERE n.key IN $keys "
        f"WITH m, {grouped} "
        f"RETURN {returned} "
        "ORDER BY paths DESC, key ASC LIMIT $limit"
    )


def _one_type(rel_types: Sequence[str] | None) -> bool:
    return rel_types is not None and len(rel_types) == 1


def aggregation_params(keys: list[str], rel_types: list[str] | None, limit: int) -> dict[str, Any]:
    """The parameters of ``aggregation_query``."""
    return {"keys": keys, "limit": limit}


def aggregation_rows(
    rows: Iterable[Sequence[Any]],
    rel_types: Sequence[str] | None,
    weight_property: str | None,
    single_seed: str | None = None,
) -> list[NeighborAggregate]:
    """The rows of ``aggregation_query`` as NeighborAggregate, with the columns it left out filled in
    (``single_seed``: the one key expanded, for a query built with ``single_seed=True``)."""
    one = [str(rel_types[0])] if rel_types is not None and _one_type(rel_types) else None
    out: list[NeighborAggregate] = []
    for row in rows:
        if single_seed is not None:
            key, paths = row[0], int(row[1])
            seeds = [single_seed] * paths
            rest = 2
        else:
            key, paths = row[0], int(row[2])
            seeds = [str(s) for s in row[1]]
            rest = 3
        if one is None:
            rels = [str(r) for r in row[rest]]
            rest += 1
        else:
            rels = one
        weight = row[rest] if weight_property else None
        out.append(NeighborAggregate(str(key), seeds, rels, paths, None if weight is None else float(weight)))
    return out


def path_walk_query(start_label: str, hops: Sequence[tuple[str, Literal["out", "in"]]], limit: int) -> str:
    """One read-only Cypher query walking ``hops`` (relation, direction) from the node ``$key``.

    Names come from the schema and are backtick-quoted; intermediate and end nodes must differ from
    the topic node (a path that returns to the topic is not "another" answer). Rows: end node key and
    the number of distinct walks reaching it (more walks = better supported), best first.
    """
    parts = [f"(s:{quote_name(start_label)} {{key: $key}})"]
    names = []
    for i, (rel, direction) in enumerate(hops, 1):
        name = f"n{i}"
        names.append(name)
        pattern = f"[:{quote_name(rel)}]"
        parts.append(f"-{pattern}->({name})" if direction == "out" else f"<-{pattern}-({name})")
    where = " AND ".join(f"{n} <> s" for n in names)
    end = names[-1]
    return (
        f"MATCH {''.join(parts)} WHERE {where} "
        f"RETURN {end}.key AS key, count(*) AS walks ORDER BY walks DESC, key LIMIT {int(limit)}"
    )
