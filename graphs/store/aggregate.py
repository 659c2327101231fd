"""Neighbourhood aggregation in Cypher: one row per neighbour of a set of keys, computed by the server.

Why here and not in the tool: labels and relation types cannot be Cypher parameters, so the query
text names them (validated against the schema, backtick-quoted), as the stores' own ``neighbors``
does; query text is built only in the store layer, never in tools or the agent. The text is
portable: FalkorDB and Neo4j-compatible servers (tested over Bolt against ArcadeDB) run it as is,
through the read-only ``GraphStore.query`` path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from graphs.store.props import quote_name


def aggregation_query(
    seed_label: str,
    rel_types: list[str] | None,
    direction: Literal["out", "in", "both"],
    target_label: str | None,
    weight_property: str | None = None,
) -> str:
    """The one Cypher query that aggregates the neighbourhood of ``$keys`` (all of ``seed_label``).

    Columns: key, seeds (one entry per edge: parallel edges repeat a seed), rels (the relation types
    reaching the neighbour), paths (edge count), weight (sum of ``weight_property`` or null). Only
    names validated against the schema are spliced in (backtick-quoted); keys and the limit are
    parameters. Portable across FalkorDB and Neo4j-compatible servers (no subqueries, no dynamic
    property access). Cheap by construction: no DISTINCT over seeds, and the relation types are
    collected only when the call allows more than one.
    """
    rels = ":" + "|".join(quote_name(r) for r in rel_types) if rel_types else ""
    target = f":{quote_name(target_label)}" if target_label else ""
    left, right = {"out": ("-", "->"), "in": ("<-", "-"), "both": ("-", "-")}[direction]
    one_type = rel_types is not None and len(rel_types) == 1
    rel_col = "[$rel] AS rels" if one_type else "collect(DISTINCT type(r)) AS rels"
    weight = (
        f"sum(coalesce(toFloat(r.{quote_name(weight_property)}), 0.0)) AS weight"
        if weight_property
        else "null AS weight"
    )
    return (
        f"MATCH (n:{quote_name(seed_label)}){left}[r{rels}]{right}(m{target}) WHERE n.key IN $keys "
        f"WITH m, collect(n.key) AS seeds, {rel_col}, count(r) AS paths, {weight} "
        "RETURN m.key AS key, seeds, rels, paths, weight "
        "ORDER BY paths DESC, key ASC LIMIT $limit"
    )


def aggregation_params(keys: list[str], rel_types: list[str] | None, limit: int) -> dict[str, Any]:
    """The parameters of ``aggregation_query``."""
    params: dict[str, Any] = {"keys": keys, "limit": limit}
    if rel_types is not None and len(rel_types) == 1:
        params["rel"] = rel_types[0]
    return params


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
