"""GraphStore over the embedded FalkorDB server (graphs/store/falkordb_server.py).

Read paths go through the static guard and GRAPH.RO_QUERY, so the server refuses
writes even if the guard missed one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import redis
from falkordb import FalkorDB
from falkordb.edge import Edge as FEdge
from falkordb.node import Node as FNode
from falkordb.path import Path as FPath

from graphs.errors import (
    CypherValidationError,
    QueryTimeoutError,
    ReadOnlyViolationError,
    StoreError,
    StoreUnavailableError,
)
from graphs.model import SKB, GraphSchema
from graphs.store.base import GraphStore, ProgressFn, QueryResult, Triple
from graphs.store.cypher_guard import check_query
from graphs.store.falkordb_server import HOST, QUERY_MEM_CAPACITY, RESULTSET_SIZE, FalkorDBServer
from graphs.store.props import (
    batched,
    edge_rows_by_pattern,
    group_by_label,
    label_info_from_samples,
    node_rows_by_label,
    quote_name,
    relations_from_rows,
)

__all__ = ["FalkorDBServer", "FalkorDBStore"]


class _GraphMissingError(StoreError):
    """The graph key does not exist yet: internal reads treat it as an empty graph."""


def _to_plain(value: Any) -> Any:
    """FalkorDB result values as JSON-friendly Python (same shapes as the Neo4j store)."""
    if isinstance(value, FNode):
        return {"labels": list(value.labels or []), "properties": dict(value.properties or {})}
    if isinstance(value, FEdge):
        return {"type": value.relation, "properties": dict(value.properties or {})}
    if isinstance(value, FPath):
        return {
            "nodes": [_to_plain(n) for n in value.nodes()],
            "relationships": [_to_plain(e) for e in value.edges()],
        }
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    return value


_KEY_LABEL_CACHE_MAX = 1_000_000

QUERY_GRACE_S = 3.0
"""Seconds a model query may run past its own timeout before the client stops waiting for it.

FalkorDB starts its timeout after parsing and checks it between records only, so a query can hold
a server thread longer than its limit; the caller gets QueryTimeoutError after timeout + grace
instead of waiting up to timeout_max (10 min)."""

_TOOL_POOLS_MAX = 4
"""Distinct model-query timeouts that keep their own connection pool (the tool uses one or two)."""


class FalkorDBStore(GraphStore):
    """GraphStore over the embedded FalkorDB server; restarts the child if it died."""

    def __init__(
        self,
        data_dir: Path,
        graph_name: str = "skb",
        server: FalkorDBServer | None = None,
        *,
        auto_restart: bool = True,
        schema_sample_size: int = 200,
        persist: bool = True,
    ) -> None:
        """``persist=False`` (used by ``open_store`` for a built index): the server this store starts
        never writes dump.rdb, so the manifest's digest of the graph stays valid while it serves."""
        self.data_dir = Path(data_dir)
        self.graph_name = graph_name
        self._own_server = server is None
        self.server = server or FalkorDBServer(self.data_dir, persist=persist)
        self.auto_restart = auto_restart
        self.schema_sample_size = schema_sample_size
        self._db: FalkorDB | None = None
        self._connected_port: int | None = None
        self._schema: GraphSchema | None = None
        self._labels: list[str] | None = None
        self._rels: list[str] | None = None
        self._key_labels: dict[str, str] = {}
        self._lock = threading.RLock()
        # Model-written queries (query()) get their own connection pools, whose socket timeout is
        # the query's timeout plus QUERY_GRACE_S, and at most thread_count - 1 of them run at once,
        # so the planner's keyed lookups (neighbors, schema) always find a free server thread.
        self._tool_dbs: dict[int, FalkorDB] = {}
        self.max_concurrent_queries = max(1, self.server.thread_count - 1)
        self._query_slots = threading.BoundedSemaphore(self.max_concurrent_queries)
        self.server.start()
        self._connect()

    # -- connection -----------------------------------------------------------
    def _connect(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.connection.close()
        self._close_tool_pools()
        self._db = self.server.client(socket_timeout=self.server.timeout_max_ms / 1000 + 30)
        self._connected_port = self.server.port

    def _close_tool_pools(self) -> None:
        for db in self._tool_dbs.values():
            with contextlib.suppress(Exception):
                db.connection.close()
        self._tool_dbs.clear()

    def _tool_graph(self, timeout_ms: int) -> Any:
        """The graph handle on the model-query pool for this timeout (socket timeout = timeout + grace)."""
        with self._lock:
            self._graph()  # (re)start and (re)connect first: a new port drops the old pools
            db = self._tool_dbs.get(timeout_ms)
            if db is None:
                if len(self._tool_dbs) >= _TOOL_POOLS_MAX:
                    self._close_tool_pools()
                db = self.server.client(socket_timeout=timeout_ms / 1000 + QUERY_GRACE_S)
                self._tool_dbs[timeout_ms] = db
            return db.select_graph(self.graph_name)

    def _graph(self) -> Any:
        """The graph handle, after making sure the server is up (restarting it if allowed)."""
        with self._lock:
            if not self.server.is_running():
                if not self.auto_restart:
                    raise StoreUnavailableError(
                        f"FalkorDB server for {self.data_dir} is not running; restart it "
                        "(FalkorDBStore(..., auto_restart=True) does so on the next call) or re-open the index"
                    )
                self.server.start()
                self._key_labels.clear()
            if self._db is None or self._connected_port != self.server.port:
                self._connect()
            assert self._db is not None
            return self._db.select_graph(self.graph_name)

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"FalkorDB at {HOST}:{self.server.port} for {self.data_dir} is unreachable ({exc}); "
            f"the next call restarts it; if this persists see {self.server.log_path}"
        )

    def _run(
        self, cypher: str, params: dict[str, Any] | None, *, read_only: bool, timeout_ms: int, model: bool = False
    ) -> Any:
        graph = self._tool_graph(timeout_ms) if model else self._graph()
        try:
            if read_only:
                return graph.ro_query(cypher, params, timeout=int(timeout_ms))
            return graph.query(cypher, params, timeout=int(timeout_ms))
        except redis.TimeoutError as exc:
            if not model:
                raise self._unavailable(exc) from exc
            raise QueryTimeoutError(
                f"no answer from FalkorDB within {timeout_ms / 1000 + QUERY_GRACE_S:.0f} s (the query's "
                f"{timeout_ms} ms limit plus {QUERY_GRACE_S:.0f} s), so the client stopped waiting; anchor it on an "
                "indexed key (n:Label {key: ...}), add a LIMIT, or simplify its expressions"
            ) from exc
        except (redis.ConnectionError, ConnectionError) as exc:
            raise self._unavailable(exc) from exc
        except redis.ResponseError as exc:
            raise self._map_response_error(exc, cypher, timeout_ms) from exc
        except (ValueError, TypeError) as exc:  # the client could not encode a parameter
            raise CypherValidationError(
                f"cannot send the query parameters to FalkorDB: {exc}; use strings, numbers, booleans, "
                "lists and maps with plain keys"
            ) from exc

    @staticmethod
    def _map_response_error(exc: redis.ResponseError, cypher: str, timeout_ms: int) -> StoreError:
        msg = str(exc)
        low = msg.lower()
        if "empty key" in low:
            return _GraphMissingError(
                "the graph has not been loaded yet (FalkorDB: empty key); build the index "
                "(`skb build`) or call store.load(skb) first"
            )
        if "timed out" in low or ("timeout" in low and "exceed" not in low):
            return QueryTimeoutError(
                f"query ran past its {timeout_ms} ms limit and was aborted; anchor it on an indexed "
                "key (n:Label {key: ...}), add a LIMIT, or narrow variable-length patterns"
            )
        if "mem consumption" in low or "memory" in low:
            return StoreError(
                f"query exceeded FalkorDB's per-query memory cap ({QUERY_MEM_CAPACITY // 1024**2} MiB): {msg}; "
                "avoid materialising huge lists (range(), collect()) and add a LIMIT"
            )
        if "read-only" in low or "ro_query" in low:
            return ReadOnlyViolationError(f"FalkorDB refused a write on the read-only path: {msg}")
        return CypherValidationError(f"FalkorDB rejected the query: {msg}. Query: {cypher[:300]}")

    # -- GraphStore -----------------------------------------------------------
    def load(self, skb: SKB, *, batch_size: int = 5000, progress: ProgressFn | None = None) -> None:
        node_rows = node_rows_by_label(skb)
        edge_rows = edge_rows_by_pattern(skb)
        total = sum(len(r) for r in node_rows.values()) + sum(len(r) for r in edge_rows.values())
        done = 0
        timeout = self.server.timeout_max_ms
        with self._lock:
            self._invalidate()
            graph = self._graph()
            try:
                graph.delete()
            except redis.ResponseError as exc:
                if "empty key" not in str(exc).lower():
                    raise StoreError(f"cannot drop graph {self.graph_name!r} before loading: {exc}") from exc
            except redis.ConnectionError as exc:
                raise self._unavailable(exc) from exc
            if progress:
                progress(0, total)
            for label in sorted(node_rows):
                self._run(f"CREATE INDEX FOR (n:{quote_name(label)}) ON (n.key)", None, read_only=False,
                          timeout_ms=timeout)  # fmt: skip
            for label in sorted(node_rows):
                cypher = f"UNWIND $rows AS r CREATE (n:{quote_name(label)}) SET n = r.props"
                for batch in batched(node_rows[label], batch_size):
                    self._run(cypher, {"rows": list(batch)}, read_only=False, timeout_ms=timeout)
                    done += len(batch)
                    if progress:
                        progress(done, total)
            for rel, src_label, dst_label in sorted(edge_rows):
                cypher = (
                    f"UNWIND $rows AS r MATCH (a:{quote_name(src_label)} {{key: r.s}}) "
                    f"MATCH (b:{quote_name(dst_label)} {{key: r.d}}) "
                    f"CREATE (a)-[e:{quote_name(rel)}]->(b) SET e = r.p"
                )
                created = 0
                rows = edge_rows[(rel, src_label, dst_label)]
                for batch in batched(rows, batch_size):
                    result = self._run(cypher, {"rows": list(batch)}, read_only=False, timeout_ms=timeout)
                    created += int(result.relationships_created or 0)
                    done += len(batch)
                    if progress:
                        progress(done, total)
                if created != len(rows):
                    raise StoreError(
                        f"loaded {created} of {len(rows)} {rel} edges ({src_label}->{dst_label}); some endpoint keys "
                        "did not match a node (duplicate or missing keys); run skb.validate() and rebuild"
                    )
            try:
                self.server.save()
            except redis.RedisError as exc:
                raise StoreError(f"FalkorDB SAVE after load failed: {exc}; see {self.server.log_path}") from exc
            self._invalidate()

    def query(
        self,
        cypher: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        check_query(cypher, params)
        timeout = int(timeout_ms if timeout_ms is not None else self.default_timeout_ms)
        if timeout <= 0 or timeout > self.server.timeout_max_ms:
            raise CypherValidationError(f"timeout_ms must be between 1 and {self.server.timeout_max_ms}, got {timeout}")
        cap = int(max_rows if max_rows is not None else self.default_max_rows)
        started = time.perf_counter()
        if not self._query_slots.acquire(timeout=timeout / 1000):
            raise QueryTimeoutError(
                f"{self.max_concurrent_queries} Cypher queries were already running on this store for "
                f"{timeout} ms (one server thread stays free for keyed lookups); retry later or simplify them"
            )
        try:
            result = self._run(cypher, params or {}, read_only=True, timeout_ms=timeout, model=True)
        finally:
            self._query_slots.release()
        elapsed = (time.perf_counter() - started) * 1000
        columns = [str(h[1]) for h in (result.header or [])]
        rows = result.result_set or []
        truncated = len(rows) > cap or len(rows) >= RESULTSET_SIZE
        return QueryResult(
            columns=columns,
            rows=[[_to_plain(v) for v in row] for row in rows[:cap]],
            truncated=truncated,
            elapsed_ms=elapsed,
        )

    def _read(self, cypher: str, params: dict[str, Any] | None = None, timeout_ms: int | None = None) -> list[Any]:
        """Internal read (fixed, trusted text): RO_QUERY without the guard's tokenizer cost."""
        try:
            result = self._run(
                cypher, params or {}, read_only=True, timeout_ms=timeout_ms or self.server.timeout_max_ms
            )
        except _GraphMissingError:
            return []
        return list(result.result_set or [])

    def labels(self) -> list[str]:
        with self._lock:
            if self._labels is None:
                self._labels = sorted(str(r[0]) for r in self._read("CALL db.labels()"))
            return list(self._labels)

    def relationship_types(self) -> list[str]:
        with self._lock:
            if self._rels is None:
                self._rels = sorted(str(r[0]) for r in self._read("CALL db.relationshipTypes()"))
            return list(self._rels)

    def schema(self) -> GraphSchema:
        with self._lock:
            if self._schema is not None:
                return self._schema
            label_infos = []
            for label in self.labels():
                q = quote_name(label)
                counted = self._read(f"MATCH (n:{q}) RETURN count(n)")
                count = int(counted[0][0]) if counted else 0
                samples = [
                    dict(r[0])
                    for r in self._read(
                        f"MATCH (n:{q}) WITH n LIMIT $n RETURN properties(n)", {"n": self.schema_sample_size}
                    )
                ]
                label_infos.append(label_info_from_samples(label, count, samples, max_samples=3))
            rows = self._read(
                "MATCH (a)-[r]->(b) RETURN type(r) AS rel, labels(a)[0] AS src, labels(b)[0] AS dst, count(r) AS c"
            )
            relations = relations_from_rows(rows)
            self._schema = GraphSchema(labels=label_infos, relations=relations)
            return self._schema

    def _labels_of_keys(self, keys: Sequence[str]) -> dict[str, list[str]]:
        """label -> keys, resolving unknown keys with one index lookup per label (then cached)."""
        unknown = [k for k in dict.fromkeys(keys) if k not in self._key_labels]
        if unknown:
            if len(self._key_labels) + len(unknown) > _KEY_LABEL_CACHE_MAX:
                self._key_labels.clear()
            labels = self.labels()
            if labels:
                # one round trip: a UNION ALL of index lookups, one branch per label
                cypher = " UNION ALL ".join(
                    f"MATCH (n:{quote_name(label)}) WHERE n.key IN $keys RETURN n.key AS k, $l{i} AS l"
                    for i, label in enumerate(labels)
                )
                params: dict[str, Any] = {"keys": unknown} | {f"l{i}": label for i, label in enumerate(labels)}
                for key, label in self._read(cypher, params):
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
        triples: list[Triple] = []
        seen: set[int] = set()
        with self._lock:
            by_label = self._labels_of_keys(keys)
            branches: list[str] = []
            params: dict[str, Any] = {"limit": limit}
            for i, label in enumerate(sorted(by_label)):
                params[f"k{i}"] = by_label[label]
                params[f"l{i}"] = label
                n = f"(n:{quote_name(label)})"
                if direction in ("out", "both"):
                    branches.append(
                        f"MATCH {n}-[r{rel_pattern}]->(m{target}) WHERE n.key IN $k{i} "
                        f"RETURN n.key AS s, $l{i} AS sl, type(r) AS t, m.key AS d, labels(m)[0] AS dl, "
                        "properties(r) AS p, id(r) AS i LIMIT $limit"
                    )
                if direction in ("in", "both"):
                    branches.append(
                        f"MATCH {n}<-[r{rel_pattern}]-(m{target}) WHERE n.key IN $k{i} "
                        f"RETURN m.key AS s, labels(m)[0] AS sl, type(r) AS t, n.key AS d, $l{i} AS dl, "
                        "properties(r) AS p, id(r) AS i LIMIT $limit"
                    )
            if not branches:
                return []
            # one round trip for every (label, direction); bind r so parallel edges stay distinct
            for src, src_label, rel, dst, dst_label, props, rid in self._read(" UNION ALL ".join(branches), params):
                if int(rid) in seen:
                    continue  # an edge between two requested keys, or a self-loop, seen from both ends
                seen.add(int(rid))
                triples.append(
                    Triple(
                        src=str(src),
                        src_label=str(src_label),
                        rel=str(rel),
                        dst=str(dst),
                        dst_label=str(dst_label),
                        props=_to_plain(dict(props or {})),
                    )
                )
                if len(triples) >= limit:
                    break
        return triples[:limit]

    def count_nodes(self) -> int:
        rows = self._read("MATCH (n) RETURN count(n)")
        return int(rows[0][0]) if rows else 0

    def _invalidate(self) -> None:
        self._schema = None
        self._labels = None
        self._rels = None
        self._key_labels.clear()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                with contextlib.suppress(Exception):
                    self._db.connection.close()
                self._db = None
            self._close_tool_pools()
            if self._own_server:
                self.server.stop()
