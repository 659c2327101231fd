"""GraphStore over a Bolt server (Neo4j 5, or ArcadeDB's Neo4j-compatible Bolt plugin).

Why the static guard matters most here: sessions are opened in READ access mode,
which Neo4j enforces, but ArcadeDB's Bolt plugin accepts writes in READ mode and
ignores transaction timeouts. So every read query passes `check_read_only` first,
and the per-query timeout is also enforced on the client side (the caller gets a
QueryTimeoutError on time even if the server keeps working).

Only portable Cypher is used (no APOC, no `db.awaitIndexes`): schema introspection
is `CALL db.labels()` with a MATCH-based fallback, counts and property samples are
plain MATCH queries.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import neo4j
from neo4j import GraphDatabase, Query
from neo4j import exceptions as neo4j_exc
from neo4j.graph import Node as NeoNode
from neo4j.graph import Path as NeoPath
from neo4j.graph import Relationship as NeoRelationship

from graphs.errors import (
    ConfigError,
    CypherValidationError,
    QueryTimeoutError,
    ReadOnlyViolationError,
    StoreError,
    StoreUnavailableError,
)
from graphs.model import SKB, GraphSchema
from graphs.store.base import GraphStore, ProgressFn, QueryResult, Triple
from graphs.store.cypher_guard import check_read_only
from graphs.store.props import (
    batched,
    edge_rows_by_pattern,
    group_by_label,
    label_info_from_samples,
    node_rows_by_label,
    quote_name,
    relations_from_rows,
)

log = logging.getLogger(__name__)

ENV_VARS = ("NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE")
_T = TypeVar("_T")
_KEY_LABEL_CACHE_MAX = 1_000_000
_CLIENT_TIMEOUT_GRACE_S = 2.0


def _to_plain(value: Any) -> Any:
    """Driver values as JSON-friendly Python, shaped like FalkorDBStore's results."""
    if isinstance(value, NeoNode):
        return {"labels": sorted(value.labels), "properties": dict(value.items())}
    if isinstance(value, NeoRelationship):
        return {"type": value.type, "properties": dict(value.items())}
    if isinstance(value, NeoPath):
        return {
            "nodes": [_to_plain(n) for n in value.nodes],
            "relationships": [_to_plain(r) for r in value.relationships],
        }
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # temporal and spatial types


class Neo4jStore(GraphStore):
    """Bolt-backed store; `load` replaces the *whole database's* nodes and relationships."""

    def __init__(
        self,
        uri: str,
        user: str,
        password: str,
        database: str | None = None,
        *,
        timeout_s: float = 5.0,
        connection_timeout_s: float = 10.0,
        schema_sample_size: int = 200,
        client_timeout_grace_s: float = _CLIENT_TIMEOUT_GRACE_S,
    ) -> None:
        self.uri = uri
        self.client_timeout_grace_s = client_timeout_grace_s
        self.user = user
        self.database = database or None
        self.default_timeout_ms = int(timeout_s * 1000)
        self.schema_sample_size = schema_sample_size
        self.notes: list[str] = []
        """Things load() had to work around (e.g. an index statement the server rejected)."""
        self._schema: GraphSchema | None = None
        self._labels: list[str] | None = None
        self._rels: list[str] | None = None
        self._key_labels: dict[str, str] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="neo4j-read")
        try:
            self._driver = GraphDatabase.driver(
                uri,
                auth=(user, password),
                connection_timeout=connection_timeout_s,
                connection_acquisition_timeout=connection_timeout_s,
            )
            self._driver.verify_connectivity()
        except neo4j_exc.AuthError as exc:
            self._pool.shutdown(wait=False)
            raise ConfigError(
                f"Bolt server at {uri} refused the credentials of user {user!r} ({exc.message}); "
                "check NEO4J_USER and NEO4J_PASSWORD"
            ) from exc
        except (neo4j_exc.ServiceUnavailable, neo4j_exc.DriverError, OSError, ValueError) as exc:
            self._pool.shutdown(wait=False)
            raise self._unavailable(exc) from exc

    @classmethod
    def from_env(cls, **kwargs: Any) -> Neo4jStore:
        """Build from NEO4J_URI, NEO4J_USER (or NEO4J_USERNAME), NEO4J_PASSWORD and optional NEO4J_DATABASE."""
        uri = os.environ.get("NEO4J_URI", "").strip()
        user = (os.environ.get("NEO4J_USER") or os.environ.get("NEO4J_USERNAME") or "").strip()
        password = os.environ.get("NEO4J_PASSWORD", "")
        missing = [
            name
            for name, value in (("NEO4J_URI", uri), ("NEO4J_USER", user), ("NEO4J_PASSWORD", password))
            if not value
        ]
        if missing:
            raise ConfigError(
                f"the Neo4j store needs environment variable(s) {', '.join(missing)} "
                "(e.g. NEO4J_URI=bolt://localhost:7687 NEO4J_USER=neo4j NEO4J_PASSWORD=...; "
                "NEO4J_DATABASE is optional), or use the embedded FalkorDB store"
            )
        database = os.environ.get("NEO4J_DATABASE", "").strip() or None
        return cls(uri, user, password, database, **kwargs)

    # -- plumbing -------------------------------------------------------------
    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"cannot reach the Bolt server at {self.uri} ({exc}); start it or fix NEO4J_URI "
            f"(also read: {', '.join(ENV_VARS[1:])}), or use the embedded FalkorDB store"
        )

    def _session(self, mode: str) -> neo4j.Session:
        return self._driver.session(database=self.database, default_access_mode=mode)

    def _map_error(self, exc: BaseException, cypher: str, timeout_ms: int) -> StoreError:
        if isinstance(exc, (neo4j_exc.ServiceUnavailable, neo4j_exc.SessionExpired, OSError)):
            return self._unavailable(exc)
        code = str(getattr(exc, "code", "") or "")
        message = str(getattr(exc, "message", None) or exc)
        low = (code + " " + message).lower()
        if "timedout" in low.replace(" ", "") or "timeout" in code.lower():
            return QueryTimeoutError(
                f"query ran past its {timeout_ms} ms limit and was aborted; anchor it on an indexed key, "
                "add a LIMIT, or narrow variable-length patterns"
            )
        if "accessmode" in low or "write operations are not allowed" in low or isinstance(exc, neo4j_exc.Forbidden):
            return ReadOnlyViolationError(f"the server refused a write on the read-only path: {message}")
        if isinstance(exc, (neo4j_exc.ClientError, neo4j_exc.DatabaseError)):
            return CypherValidationError(f"the Bolt server rejected the query: {message}. Query: {cypher[:300]}")
        return StoreError(f"query failed on {self.uri}: {message}")

    def _run_read(
        self,
        cypher: str,
        params: dict[str, Any],
        timeout_ms: int,
        max_rows: int | None,
    ) -> tuple[list[str], list[list[Any]], bool]:
        """Run in a READ session; returns (columns, rows, truncated). Raises mapped errors."""

        def work() -> tuple[list[str], list[list[Any]], bool]:
            with self._session(neo4j.READ_ACCESS) as session:
                result = session.run(Query(cypher, timeout=timeout_ms / 1000), params)
                columns = list(result.keys())
                rows: list[list[Any]] = []
                truncated = False
                for record in result:
                    if max_rows is not None and len(rows) >= max_rows:
                        truncated = True
                        break
                    rows.append([_to_plain(v) for v in record.values()])
                return columns, rows, truncated

        return self._with_client_timeout(work, cypher, timeout_ms)

    def _with_client_timeout(self, fn: Callable[[], _T], cypher: str, timeout_ms: int) -> _T:
        future = self._pool.submit(fn)
        try:
            return future.result(timeout=timeout_ms / 1000 + self.client_timeout_grace_s)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise QueryTimeoutError(
                f"query ran past its {timeout_ms} ms limit (the server did not abort it; it may still be "
                "running); anchor it on an indexed key, add a LIMIT, or narrow variable-length patterns"
            ) from exc
        except neo4j_exc.Neo4jError as exc:
            raise self._map_error(exc, cypher, timeout_ms) from exc
        except (neo4j_exc.DriverError, OSError) as exc:
            raise self._map_error(exc, cypher, timeout_ms) from exc

    def _read(self, cypher: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        """Internal read of fixed, trusted text (no guard), with a generous timeout."""
        return self._run_read(cypher, params or {}, timeout_ms=max(self.default_timeout_ms, 120_000), max_rows=None)[1]

    def _write(self, cypher: str, params: dict[str, Any] | None = None) -> neo4j.ResultSummary:
        try:
            with self._session(neo4j.WRITE_ACCESS) as session:
                return session.execute_write(lambda tx: tx.run(cypher, params or {}).consume())
        except neo4j_exc.Neo4jError as exc:
            raise self._map_error(exc, cypher, 0) from exc
        except (neo4j_exc.DriverError, OSError) as exc:
            raise self._map_error(exc, cypher, 0) from exc

    # -- GraphStore -----------------------------------------------------------
    def load(self, skb: SKB, *, batch_size: int = 5000, progress: ProgressFn | None = None) -> None:
        node_rows = node_rows_by_label(skb)
        edge_rows = edge_rows_by_pattern(skb)
        total = sum(len(r) for r in node_rows.values()) + sum(len(r) for r in edge_rows.values())
        done = 0
        self._invalidate()
        self.notes = []
        if progress:
            progress(0, total)
        while True:  # batched delete: one huge DETACH DELETE can exhaust the server's transaction memory
            summary = self._write("MATCH (n) WITH n LIMIT $n DETACH DELETE n", {"n": 10_000})
            if summary.counters.nodes_deleted == 0:
                break
        for label in sorted(node_rows):
            self._ensure_key_index(label)
        for label in sorted(node_rows):
            cypher = f"UNWIND $rows AS r CREATE (n:{quote_name(label)}) SET n = r.props"
            for batch in batched(node_rows[label], batch_size):
                self._write(cypher, {"rows": list(batch)})
                done += len(batch)
                if progress:
                    progress(done, total)
        for rel, src_label, dst_label in sorted(edge_rows):
            cypher = (
                f"UNWIND $rows AS r MATCH (a:{quote_name(src_label)} {{key: r.s}}) "
                f"MATCH (b:{quote_name(dst_label)} {{key: r.d}}) "
                f"CREATE (a)-[e:{quote_name(rel)}]->(b) SET e = r.p"
            )
            for batch in batched(edge_rows[(rel, src_label, dst_label)], batch_size):
                self._write(cypher, {"rows": list(batch)})
                done += len(batch)
                if progress:
                    progress(done, total)
        self._invalidate()

    def _ensure_key_index(self, label: str) -> None:
        q = quote_name(label)
        attempts = (
            f"CREATE INDEX IF NOT EXISTS FOR (n:{q}) ON (n.key)",  # Neo4j 5 / ArcadeDB
            f"CREATE INDEX ON :{q}(key)",  # Neo4j 3.5/4.x
        )
        errors: list[str] = []
        for statement in attempts:
            try:
                self._write(statement)
                return
            except StoreUnavailableError:
                raise
            except StoreError as exc:
                errors.append(f"{statement!r}: {exc}")
        note = (
            f"no index on {label}.key: the server rejected every index statement ({'; '.join(errors)}); "
            "loading continues but key lookups will scan"
        )
        log.warning(note)
        self.notes.append(note)

    def query(
        self,
        cypher: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        check_read_only(cypher)
        timeout = int(timeout_ms if timeout_ms is not None else self.default_timeout_ms)
        if timeout <= 0:
            raise CypherValidationError(f"timeout_ms must be positive, got {timeout}")
        cap = int(max_rows if max_rows is not None else self.default_max_rows)
        started = time.perf_counter()
        columns, rows, truncated = self._run_read(cypher, params or {}, timeout, cap)
        return QueryResult(
            columns=columns, rows=rows, truncated=truncated, elapsed_ms=(time.perf_counter() - started) * 1000
        )

    def labels(self) -> list[str]:
        """Labels that have nodes (ArcadeDB's db.labels() also lists emptied types, so they are counted)."""
        if self._labels is None:
            try:
                names = [str(r[0]) for r in self._read("CALL db.labels()")]
            except (CypherValidationError, StoreError) as exc:
                if isinstance(exc, StoreUnavailableError):
                    raise
                names = sorted({str(lab) for r in self._read("MATCH (n) RETURN DISTINCT labels(n)") for lab in r[0]})
            self._labels = sorted(name for name in names if self._count(name) > 0)
        return list(self._labels)

    def relationship_types(self) -> list[str]:
        if self._rels is None:
            self._rels = sorted({r.rel for r in self.schema().relations})
        return list(self._rels)

    def _count(self, label: str) -> int:
        rows = self._read(f"MATCH (n:{quote_name(label)}) RETURN count(n)")
        return int(rows[0][0]) if rows else 0

    def schema(self) -> GraphSchema:
        if self._schema is not None:
            return self._schema
        infos = []
        for label in self.labels():
            q = quote_name(label)
            samples = [
                dict(r[0] or {})
                for r in self._read(
                    f"MATCH (n:{q}) WITH n LIMIT $n RETURN properties(n)", {"n": self.schema_sample_size}
                )
            ]
            infos.append(label_info_from_samples(label, self._count(label), samples, max_samples=3))
        rows = self._read(
            "MATCH (a)-[r]->(b) RETURN type(r) AS rel, labels(a)[0] AS src, labels(b)[0] AS dst, count(r) AS c"
        )
        relations = relations_from_rows(rows)
        self._schema = GraphSchema(labels=infos, relations=relations)
        return self._schema

    def _labels_of_keys(self, keys: Sequence[str]) -> dict[str, list[str]]:
        unknown = [k for k in dict.fromkeys(keys) if k not in self._key_labels]
        if unknown:
            if len(self._key_labels) + len(unknown) > _KEY_LABEL_CACHE_MAX:
                self._key_labels.clear()
            for label in self.labels():
                for (key,) in self._read(
                    f"MATCH (n:{quote_name(label)}) WHERE n.key IN $keys RETURN n.key", {"keys": unknown}
                ):
                    self._key_labels[str(key)] = label
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
        seen: set[str] = set()
        by_label = self._labels_of_keys(keys)
        for label in sorted(by_label):
            for side in ("out", "in") if direction == "both" else (direction,):
                remaining = limit - len(triples)
                if remaining <= 0:
                    return triples
                arrow = f"-[r{rel_pattern}]->" if side == "out" else f"<-[r{rel_pattern}]-"
                cypher = (
                    f"MATCH (n:{quote_name(label)}){arrow}(m{target}) WHERE n.key IN $keys "
                    "RETURN n.key, type(r), m.key, labels(m)[0], properties(r), elementId(r) LIMIT $limit"
                )
                for nk, rel, mk, ml, props, rid in self._read(cypher, {"keys": by_label[label], "limit": remaining}):
                    if str(rid) in seen:
                        continue  # an edge between two requested keys, or a self-loop, seen from both sides
                    seen.add(str(rid))
                    if side == "out":
                        src, src_label, dst, dst_label = nk, label, mk, ml
                    else:
                        src, src_label, dst, dst_label = mk, ml, nk, label
                    triples.append(
                        Triple(
                            src=str(src),
                            src_label=str(src_label),
                            rel=str(rel),
                            dst=str(dst),
                            dst_label=str(dst_label),
                            props=dict(props or {}),
                        )
                    )
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
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._driver.close()
