"""The graph-store contract shared by the embedded FalkorDB store and the Neo4j adapter.

Read paths (`query`, `neighbors`, `schema`) must never be able to write: every
implementation runs them through the static Cypher guard *and* the server's own
read-only mode. `load` is the only write path and takes no model-produced text.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, Field

from graphs.errors import CypherValidationError, StoreError
from graphs.skb.model import SKB, GraphSchema
from graphs.store.aggregate import NeighborAggregate, aggregation_params, aggregation_query, aggregation_rows
from graphs.store.cypher_guard import check_params, check_read_only, check_resources
from graphs.store.load_check import load_mismatches, mismatch_message
from graphs.store.props import (
    EdgeRow,
    batched,
    edge_params,
    edge_rows_by_pattern,
    group_by_label,
    label_info_from_samples,
    node_rows_by_label,
    quote_name,
    relations_from_rows,
)

ProgressFn = Callable[[int, int], None]
"""Called as progress(done, total) during bulk loads."""


class QueryResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False
    elapsed_ms: float = 0.0


class Triple(BaseModel):
    """One edge of a one-hop subgraph, oriented as stored (src -[rel]-> dst)."""

    src: str
    src_label: str
    rel: str
    dst: str
    dst_label: str
    props: dict[str, Any] = Field(default_factory=dict)


class GraphStore(ABC):
    """Bulk load once; then read-only Cypher, schema and one-hop expansion."""

    default_timeout_ms: int = 5000
    default_max_rows: int = 1000

    @abstractmethod
    def load(self, skb: SKB, *, batch_size: int = 5000, progress: ProgressFn | None = None) -> None:
        """Replace the graph's contents with the SKB (nodes keyed by `key`, indexed per label)."""

    @abstractmethod
    def query(
        self,
        cypher: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        """Run a read-only query; raises ReadOnlyViolationError, QueryTimeoutError, CypherValidationError."""

    @abstractmethod
    def schema(self) -> GraphSchema:
        """Introspect labels, relation patterns, properties and a few sample values."""

    @abstractmethod
    def neighbors(
        self,
        keys: Sequence[str],
        *,
        rel_types: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        limit: int = 5000,
    ) -> list[Triple]:
        """One-hop edges around the given node keys (labelled, index-backed lookups)."""

    @abstractmethod
    def aggregate_neighbors(
        self,
        seed_label: str,
        keys: Sequence[str],
        *,
        rel_types: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        weight_property: str | None = None,
        limit: int = 50,
        timeout_ms: int | None = None,
        max_edges: int | None = None,
        among: Sequence[str] | None = None,
    ) -> list[NeighborAggregate]:
        """The one-hop neighbourhood of ``keys`` (all of ``seed_label``), one row per neighbour, aggregated,
        ordered (most edges first, then key) and limited by the server in one query.

        ``max_edges``: read at most that many edges (the first the server finds) and aggregate those: a
        sample of a hub's neighbourhood at a bounded cost (None: every edge). ``among``: only the
        neighbours with these keys (a membership check, at the cost of their edges; None: every neighbour)."""

    @abstractmethod
    def labels(self) -> list[str]: ...

    @abstractmethod
    def relationship_types(self) -> list[str]: ...

    def _neighbor_keys(
        self,
        keys: Sequence[str],
        rel_types: Sequence[str] | None,
        direction: str,
        target_label: str | None,
        limit: int,
    ) -> list[str]:
        """Validate `neighbors()` arguments the same way in every store; [] means nothing to look up.

        Unknown relation types or labels are errors naming the valid choices (an LLM can repair
        them), not an empty result that reads as "no neighbours".
        """
        if isinstance(keys, str):
            keys = [keys]
        if direction not in ("out", "in", "both"):
            raise CypherValidationError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        if limit <= 0 or not keys:
            return []
        if rel_types:
            known = set(self.relationship_types())
            unknown = [r for r in rel_types if r not in known]
            if unknown:
                raise CypherValidationError(
                    f"unknown relationship type(s) {', '.join(map(repr, unknown))}; valid types: "
                    f"{', '.join(sorted(known)) or '(none)'}"
                )
        if target_label is not None and target_label not in set(self.labels()):
            raise CypherValidationError(
                f"unknown target label {target_label!r}; valid labels: {', '.join(self.labels()) or '(none)'}"
            )
        return [str(k) for k in keys]

    @abstractmethod
    def count_nodes(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


KEY_LABEL_CACHE_MAX = 1_000_000
"""Keys whose label a store remembers (cleared whole when full): one lookup per key, not per call."""


def _chained(
    statements: Sequence[tuple[str, Sequence[Any]]], group: int, max_rows: int
) -> Iterator[list[tuple[str, Sequence[Any]]]]:
    """``statements`` in order, in runs of at most ``group`` statements and about ``max_rows`` rows."""
    run: list[tuple[str, Sequence[Any]]] = []
    rows = 0
    for statement in statements:
        if run and (len(run) >= group or rows + len(statement[1]) > max_rows):
            yield run
            run, rows = [], 0
        run.append(statement)
        rows += len(statement[1])
    if run:
        yield run


class CypherStore(GraphStore):
    """Everything the Cypher stores share; a subclass supplies only execution and value conversion.

    Why one base: loading, schema introspection, key-to-label resolution and one-hop expansion
    are the same Cypher on FalkorDB and on a Bolt server; two copies drifted apart (argument
    checks, dangling-edge detection, limits). A subclass implements:

    - `_read(cypher, params)`: rows of a trusted internal read (no guard), on the read-only path;
    - `_write(cypher, params)`: run a load statement, return the relationships it created
      (None where the server does not say);
    - `_clear()`, `_create_key_index(label)`, optionally `_create_key_indexes(labels)` (several in one
      round trip), `_load_native(...)` (a bulk path) and `_after_load()`: the load's edges;
    - `_plain(value)`: driver values as JSON-friendly Python;
    - `_run_query(...)`: run model-written Cypher that passed the guard (`query()` checks it), on
      the backend's read-only path, within its timeout; `max_timeout_ms`, the longest it allows;
    - `count_nodes`/`labels` sources where the backend needs another query (`_fetch_labels`,
      `_fetch_relationship_types`);
    - `_union_all`: whether one `UNION ALL` round trip may replace one query per branch;
    - `_edge_id`: the function naming an edge uniquely (`id` or `elementId`);
    - `_load_group`: how many labels' (or edge patterns') load statements one query may chain
      (``WITH count(*)`` between them); 1: one query each.
    """

    _union_all: ClassVar[bool] = True
    _edge_id: ClassVar[str] = "id"
    _load_group: ClassVar[int] = 1

    def __init__(self, *, schema_sample_size: int = 200) -> None:
        self.schema_sample_size = schema_sample_size
        self._schema: GraphSchema | None = None
        self._labels: list[str] | None = None
        self._rels: list[str] | None = None
        self._key_labels: dict[str, str] = {}
        self._lock = threading.RLock()

    # -- supplied by the backend ------------------------------------------------------
    @abstractmethod
    def _read(self, cypher: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Rows of a fixed, trusted read (read-only session/command; the guard is skipped)."""

    @abstractmethod
    def _write(self, cypher: str, params: dict[str, Any] | None = None) -> int | None:
        """Run one load statement; the number of relationships it created, None if not reported."""

    @abstractmethod
    def _run_query(
        self, cypher: str, params: dict[str, Any], timeout_ms: int, max_rows: int
    ) -> tuple[list[str], list[list[Any]], bool]:
        """Run guarded, model-written Cypher read-only: (columns, plain rows up to max_rows, truncated)."""

    @property
    def max_timeout_ms(self) -> int | None:
        """The longest per-query timeout the backend accepts (None: no limit of its own)."""
        return None

    @abstractmethod
    def _clear(self) -> None:
        """Remove the whole graph before a load."""

    @abstractmethod
    def _create_key_index(self, label: str) -> None:
        """Index `label.key`, the property every lookup is anchored on."""

    def _create_key_indexes(self, labels: Sequence[str]) -> None:
        """Index `key` on every label, in order (a backend may send them in fewer round trips)."""
        for label in labels:
            self._create_key_index(label)

    def _after_load(self) -> None:
        """Make the loaded graph durable where the backend needs a step for it."""

    @staticmethod
    def _plain(value: Any) -> Any:
        """A driver value as JSON-friendly Python (backends convert their node/edge/path types)."""
        return value

    def _fetch_labels(self) -> list[str]:
        return sorted(str(r[0]) for r in self._read("CALL db.labels()"))

    def _fetch_relationship_types(self) -> list[str]:
        return sorted(str(r[0]) for r in self._read("CALL db.relationshipTypes()"))

    # -- shared -------------------------------------------------------------------------
    def load(self, skb: SKB, *, batch_size: int = 5000, progress: ProgressFn | None = None) -> None:
        node_rows = node_rows_by_label(skb)
        edge_rows = edge_rows_by_pattern(skb)
        total = sum(len(r) for r in node_rows.values()) + sum(len(r) for r in edge_rows.values())
        done = 0
        with self._lock:
            self._invalidate()
            self._clear()
            if progress:
                progress(0, total)
            self._create_key_indexes(sorted(node_rows))
            if self._load_native(node_rows, edge_rows, progress, total):
                self._check_load(node_rows, edge_rows)
                self._after_load()
                self._invalidate()
                return
            # statements in the same order as one query each (the store numbers nodes and edges in creation
            # order), chained by ``_load_group`` per query: a graph with thousands of labels or relation
            # names paid a round trip (and a plan) per tiny statement, minutes at 5,000 relation names
            node_statements = [
                (f"UNWIND $rows AS r CREATE (n:{quote_name(label)}) SET n = r.props", batch)
                for label in sorted(node_rows) for batch in batched(node_rows[label], batch_size)
            ]
            for statements in _chained(node_statements, self._load_group, batch_size):
                self._write_chained(statements)
                done += sum(len(rows) for _, rows in statements)
                if progress:
                    progress(done, total)
            patterns = sorted(edge_rows)
            edge_statements = [
                (
                    (f"UNWIND $rows AS r MATCH (a:{quote_name(src_label)} {{key: r.s}}) "
                     f"MATCH (b:{quote_name(dst_label)} {{key: r.d}}) "
                     f"CREATE (a)-[e:{quote_name(rel)}]->(b) SET e = r.p"),
                    edge_params(batch),
                )
                for rel, src_label, dst_label in patterns for batch in batched(edge_rows[(rel, src_label, dst_label)], batch_size)
            ]
            owner = [pattern for pattern in patterns for _ in batched(edge_rows[pattern], batch_size)]
            at = 0
            for statements in _chained(edge_statements, self._load_group, batch_size):
                count = self._write_chained(statements)
                mine = list(dict.fromkeys(owner[at : at + len(statements)]))
                at += len(statements)
                expected = sum(len(rows) for _, rows in statements)
                if count is not None and count != expected:
                    shown = ", ".join(f"{rel} ({src_label}->{dst_label})" for rel, src_label, dst_label in mine[:5])
                    raise StoreError(
                        f"loaded {count} of {expected} edges of {shown}{' and more' if len(mine) > 5 else ''}; some "
                        "endpoint keys did not match a node (a key missing from the nodes, or one the store cannot "
                        "index); check the input (the loaders refuse duplicate, missing and over-long keys with file "
                        "and line) and rebuild with `skb index --force`"
                    )
                done += expected
                if progress:
                    progress(done, total)
            self._check_load(node_rows, edge_rows)
            self._after_load()
            self._invalidate()

    def _check_load(
        self, node_rows: dict[str, list[dict[str, Any]]], edge_rows: dict[tuple[str, str, str], list[EdgeRow]]
    ) -> None:
        """Keyed lookups and edges of a sample of the nodes read back (``graphs.store.load_check``)."""
        wrong = load_mismatches(self._read, node_rows, edge_rows, union=self._union_all)
        if wrong:
            raise StoreError(mismatch_message(wrong, f"the {type(self).__name__}"))

    def _load_native(
        self,
        node_rows: dict[str, list[dict[str, Any]]],
        edge_rows: dict[tuple[str, str, str], list[EdgeRow]],
        progress: ProgressFn | None,
        total: int,
    ) -> bool:
        """Load the rows (after the key indexes, on an empty graph) by the backend's own bulk path, in
        the order the Cypher statements would create them; False where it has none or cannot carry
        this graph (then nothing was written, and the Cypher statements load it)."""
        return False

    def _write_chained(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> int | None:
        """Run load statements (each reading ``$rows``) as one query; the relationships they created."""
        if len(statements) == 1:
            cypher, rows = statements[0]
            return self._write(cypher, {"rows": list(rows)})
        parts: list[str] = []
        params: dict[str, Any] = {}
        for i, (cypher, rows) in enumerate(statements):
            if i:
                parts.append(f"WITH count(*) AS done{i}")
            parts.append(cypher.replace("$rows", f"$rows{i}"))
            params[f"rows{i}"] = list(rows)
        return self._write(" ".join(parts), params)

    def query(
        self,
        cypher: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        # the guards one by one, read-only first (tests switch that one off alone to prove the
        # server's own read-only mode), then parameter values, then resource bounds
        check_read_only(cypher)
        check_params(params)
        check_resources(cypher, params)
        timeout = self._timeout(timeout_ms)
        cap = int(max_rows if max_rows is not None else self.default_max_rows)
        started = time.perf_counter()
        columns, rows, truncated = self._run_query(cypher, params or {}, timeout, cap)
        return QueryResult(
            columns=columns, rows=rows, truncated=truncated, elapsed_ms=(time.perf_counter() - started) * 1000
        )

    def _timeout(self, timeout_ms: int | None) -> int:
        """``timeout_ms`` (default: ``default_timeout_ms``) checked against the backend's limit."""
        timeout = int(timeout_ms if timeout_ms is not None else self.default_timeout_ms)
        most = self.max_timeout_ms
        if timeout <= 0 or (most is not None and timeout > most):
            raise CypherValidationError(
                f"timeout_ms must be between 1 and {most}, got {timeout}"
                if most is not None
                else f"timeout_ms must be positive, got {timeout}"
            )
        return timeout

    def labels(self) -> list[str]:
        with self._lock:
            if self._labels is None:
                self._labels = self._fetch_labels()
            return list(self._labels)

    def relationship_types(self) -> list[str]:
        with self._lock:
            if self._rels is None:
                self._rels = self._fetch_relationship_types()
            return list(self._rels)

    def _count(self, label: str) -> int:
        rows = self._read(f"MATCH (n:{quote_name(label)}) RETURN count(n)")
        return int(rows[0][0]) if rows else 0

    def schema(self) -> GraphSchema:
        with self._lock:
            if self._schema is not None:
                return self._schema
            label_infos = []
            for label in self.labels():
                samples = [
                    dict(r[0] or {})
                    for r in self._read(
                        f"MATCH (n:{quote_name(label)}) WITH n LIMIT $n RETURN properties(n)",
                        {"n": self.schema_sample_size},
                    )
                ]
                label_infos.append(label_info_from_samples(label, self._count(label), samples, max_samples=3))
            rows = self._read(
                "MATCH (a)-[r]->(b) RETURN type(r) AS rel, labels(a)[0] AS src, labels(b)[0] AS dst, count(r) AS c"
            )
            self._schema = GraphSchema(labels=label_infos, relations=relations_from_rows(rows))
            return self._schema

    def _read_branches(
        self,
        branches: list[tuple[str, dict[str, Any]]],
        limit: int | None = None,
        row_id: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """Rows of several read queries: one UNION ALL round trip where the backend allows it,
        else one query each, each asked (as `$limit`) only for the rows still missing up to `limit`.
        With `row_id`, rows with an id already seen are dropped (and not counted)."""
        rows: list[Any] = []
        seen: set[Any] = set()

        def take(batch: list[Any]) -> bool:
            """Append new rows; True once `limit` rows are there."""
            for row in batch:
                if row_id is not None:
                    rid = row_id(row)
                    if rid in seen:
                        continue
                    seen.add(rid)
                rows.append(row)
                if limit is not None and len(rows) >= limit:
                    return True
            return False

        if not branches:
            return rows
        if self._union_all:
            params: dict[str, Any] = {}
            for _, branch_params in branches:
                params |= branch_params
            take(self._read(" UNION ALL ".join(cypher for cypher, _ in branches), params))
            return rows
        for cypher, branch_params in branches:
            if limit is not None:
                branch_params = {**branch_params, "limit": limit - len(rows)}
            if take(self._read(cypher, branch_params)):
                break
        return rows

    def _labels_of_keys(self, keys: Sequence[str]) -> dict[str, list[str]]:
        """label -> keys, resolving unknown keys with one index lookup per label (then cached)."""
        unknown = [k for k in dict.fromkeys(keys) if k not in self._key_labels]
        if unknown:
            if len(self._key_labels) + len(unknown) > KEY_LABEL_CACHE_MAX:
                self._key_labels.clear()
            branches = [
                (
                    f"MATCH (n:{quote_name(label)}) WHERE n.key IN $keys RETURN n.key AS k, $l{i} AS l",
                    {"keys": unknown, f"l{i}": label},
                )
                for i, label in enumerate(self.labels())
            ]
            for key, label in self._read_branches(branches):
                self._key_labels[str(key)] = str(label)
        return group_by_label(keys, self._key_labels)

    def neighbors(
        self,
        keys: Sequence[str],
        *,
        rel_types: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        limit: int = 5000,
    ) -> list[Triple]:
        keys = self._neighbor_keys(keys, rel_types, direction, target_label, limit)
        if not keys:
            return []
        rel_pattern = ":" + "|".join(quote_name(r) for r in rel_types) if rel_types else ""
        target = f":{quote_name(target_label)}" if target_label else ""
        edge_id = self._edge_id
        with self._lock:
            by_label = self._labels_of_keys(keys)
            branches: list[tuple[str, dict[str, Any]]] = []
            sides = [side for side in ("out", "in") if direction in (side, "both")]
            for i, label in enumerate(sorted(by_label)):
                params: dict[str, Any] = {f"k{i}": by_label[label], f"l{i}": label, "limit": limit}
                n = f"(n:{quote_name(label)})"
                for side in sides:
                    if side == "out":
                        pattern = f"{n}-[r{rel_pattern}]->(m{target})"
                        ends = f"n.key AS s, $l{i} AS sl, type(r) AS t, m.key AS d, labels(m)[0] AS dl"
                    else:
                        pattern = f"{n}<-[r{rel_pattern}]-(m{target})"
                        ends = f"m.key AS s, labels(m)[0] AS sl, type(r) AS t, n.key AS d, $l{i} AS dl"
                    cypher = (
                        f"MATCH {pattern} WHERE n.key IN $k{i} "
                        f"RETURN {ends}, properties(r) AS p, {edge_id}(r) AS i LIMIT $limit"
                    )
                    branches.append((cypher, params))
            # bind r so parallel edges stay distinct; an edge between two requested keys, or a
            # self-loop, comes back from both ends and is kept once
            rows = self._read_branches(branches, limit, row_id=lambda row: str(row[6]))
            triples = [
                Triple(
                    src=str(src),
                    src_label=str(src_label),
                    rel=str(rel),
                    dst=str(dst),
                    dst_label=str(dst_label),
                    props=self._plain(dict(props or {})),
                )
                for src, src_label, rel, dst, dst_label, props, _ in rows
            ]
        return triples[:limit]

    def aggregate_neighbors(
        self,
        seed_label: str,
        keys: Sequence[str],
        *,
        rel_types: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        weight_property: str | None = None,
        limit: int = 50,
        timeout_ms: int | None = None,
        max_edges: int | None = None,
        among: Sequence[str] | None = None,
    ) -> list[NeighborAggregate]:
        """One aggregation query (``graphs.store.aggregate``) on the read-only path, without the guard's
        tokenizer: the text is built here from names checked against the graph (unknown ones are errors
        naming the valid choices) and the server's read-only mode still applies."""
        rels = list(rel_types) if rel_types else None
        checked = self._neighbor_keys(keys, rels, direction, target_label, limit)
        if not checked:
            return []
        if seed_label not in set(self.labels()):
            raise CypherValidationError(
                f"unknown seed label {seed_label!r}; valid labels: {', '.join(self.labels()) or '(none)'}"
            )
        if weight_property is not None and not weight_property:
            raise CypherValidationError("weight_property must be a property name or None, got ''")
        timeout = self._timeout(timeout_ms)
        single = checked[0] if len(set(checked)) == 1 else None
        if max_edges is not None and max_edges < 1:
            raise CypherValidationError(f"max_edges must be at least 1 or None, got {max_edges}")
        if among is not None and (isinstance(among, str) or not all(isinstance(k, str) for k in among)):
            raise CypherValidationError("among must be a list of node keys (strings) or None")
        if among is not None and not among:
            return []
        cypher = aggregation_query(
            seed_label, rels, direction, target_label, weight_property, single_seed=single is not None,
            max_edges=max_edges is not None, among=among is not None,
        )
        params = aggregation_params(checked, rels, limit, max_edges, None if among is None else list(among))
        _, rows, _ = self._run_query(cypher, params, timeout, limit)
        return aggregation_rows(rows, rels, weight_property, single)

    def count_nodes(self) -> int:
        rows = self._read("MATCH (n) RETURN count(n)")
        return int(rows[0][0]) if rows else 0

    def _invalidate(self) -> None:
        self._schema = None
        self._labels = None
        self._rels = None
        self._key_labels.clear()
