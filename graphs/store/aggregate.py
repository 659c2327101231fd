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
    max_edges: bool = False,
    among: bool = False,
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

    ``max_edges``: the server reads at most ``$max_edges`` edges (the first it finds) before grouping.
    Why: grouping, ordering and returning cost the size of the whole neighbourhood, and in a graph with
    power-law degrees the largest hubs grow with the graph (a 116,608-edge hub of the 300k-node scale
    graph: 458 ms grouped whole, 12 ms when 5,001 edges are read); callers bound a hub's share this way
    and say that what they return is a sample.

    ``among``: only neighbours whose key is in ``$among`` (a membership check: which of those nodes the
    keys reach). The server looks the listed nodes up by key and reads their edges, so the cost is
    theirs, not the seeds' (from a 384,058-edge hub of the 1M-node scale graph to 119 listed nodes: 2 ms).
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
    bound = ("WITH m, r LIMIT $max_edges " if single_seed else "WITH n, m, r LIMIT $max_edges ") if max_edges else ""
    return (
        f"MATCH (n:{quote_name(seed_label)}){left}[r{rels}]{right}(m{target}) WHERE n.key IN $keys "
        f"{'AND m.key IN $among ' if among else ''}"
        f"{bound}WITH m, {grouped} "
        f"RETURN {returned} "
        "ORDER BY paths DESC, key ASC LIMIT $limit"
    )


def _one_type(rel_types: Sequence[str] | None) -> bool:
    return rel_types is not None and len(rel_types) == 1


def aggregation_params(
    keys: list[str],
    rel_types: list[str] | None,
    limit: int,
    max_edges: int | None = None,
    among: list[str] | None = None,
) -> dict[str, Any]:
    """The parameters of ``aggregation_query`` (``max_edges`` for a query built with ``max_edges=True``,
    ``among`` for one built with ``among=True``)."""
    params: dict[str, Any] = {"keys": keys, "limit": limit}
    if max_edges is not None:
        params["max_edges"] = int(max_edges)
    if among is not None:
        params["among"] = list(among)
    return params


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


JoinDirection = Literal["out", "in", "any"]
JOIN_OPERATORS: dict[str, str] = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
"""Comparison operators of attribute conditions (plus ``contains``, a case-insensitive substring test)."""


class JoinTriplet(NamedTuple):
    """``(x)-[relation]-(anchor)`` with the anchor among ``anchors`` (a relation of None: any)."""

    relation: str | None
    direction: JoinDirection
    anchors: list[str]


class JoinCondition(NamedTuple):
    """``x.property <op> value``; the value travels as a parameter."""

    property: str
    op: str
    value: Any


def _join_pattern(relation: str | None, direction: JoinDirection) -> str:
    rel = f"[:{quote_name(relation)}]" if relation else "[]"
    return {"out": f"-{rel}->", "in": f"<-{rel}-", "any": f"-{rel}-"}[direction]


def constraint_join_query(
    target: str, triplets: Sequence[JoinTriplet], conditions: Sequence[JoinCondition], limit: int
) -> tuple[str, dict[str, Any]]:
    """One read-only node-set join: answers of label ``target`` adjacent to anchors of every triplet
    and meeting every condition, with ``support`` (anchors reached) as the order.

    Each triplet adds ``MATCH (x)-[r]-(aN) WHERE aN.key IN $aN`` then ``WITH x, <counts>`` (the join on
    x); conditions filter the survivors. Names are backtick-quoted, values and keys are parameters."""
    if not triplets and not conditions:
        raise ValueError("a join needs at least one constraint")
    params: dict[str, Any] = {"limit": int(limit)}
    lines: list[str] = []
    label = quote_name(target)
    if not triplets:
        lines.append(f"MATCH (x:{label})")
    for n, t in enumerate(triplets):
        head = f"(x:{label})" if n == 0 else "(x)"
        lines.append(f"MATCH {head}{_join_pattern(t.relation, t.direction)}(a{n}) WHERE a{n}.key IN $a{n}")
        params[f"a{n}"] = list(t.anchors)
        lines.append("WITH " + ", ".join(["x", *(f"s{i}" for i in range(n)), f"count(DISTINCT a{n}) AS s{n}"]))
    where: list[str] = []
    for n, c in enumerate(conditions):
        prop = f"x.{quote_name(c.property)}"
        params[f"v{n}"] = c.value
        if c.op == "contains":
            where.append(f"toLower(toString({prop})) CONTAINS toLower(toString($v{n}))")
        elif c.op in JOIN_OPERATORS:
            where.append(f"{prop} {JOIN_OPERATORS[c.op]} $v{n}")
        else:
            raise ValueError(f"unknown operator {c.op!r}; use one of {sorted([*JOIN_OPERATORS, 'contains'])}")
    if where:
        lines.append(("WHERE " if not triplets else "WITH * WHERE ") + " AND ".join(where))
    support = " + ".join(f"s{i}" for i in range(len(triplets))) or "1"
    lines.append(f"RETURN x.key AS key, {support} AS support ORDER BY support DESC, key LIMIT $limit")
    return "\n".join(lines), params
