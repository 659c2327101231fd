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
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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
from graphs.store.base import CypherStore
from graphs.store.props import quote_name

log = logging.getLogger(__name__)

ENV_VARS = ("NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE")
_T = TypeVar("_T")
_CLIENT_TIMEOUT_GRACE_S = 2.0


#: URI schemes of the Bolt protocol (the driver's others speak Neo4j's HTTP Query API, which needs an
#: optional dependency and is not what this store reads).
BOLT_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")


def check_bolt_uri(uri: str) -> None:
    """ConfigError naming the Bolt schemes when ``uri`` has another (http(s):// is Neo4j's browser port)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme not in BOLT_SCHEMES:
        shown = f"scheme {scheme!r}" if scheme else "no scheme"
        raise ConfigError(
            f"{uri!r} has {shown}; a Neo4j source is read over Bolt: use one of "
            f"{', '.join(s + '://' for s in BOLT_SCHEMES)} (e.g. bolt://HOST:7687, not the HTTP port 7474)"
        )


@contextlib.contextmanager
def _quiet_driver() -> Iterator[None]:
    """The driver's own log lines held back while it probes a server: a peer that speaks garbage made it
    print one ("Failed to read from defunct connection") before our message, which says the same and
    what to do. Our error carries the driver's text."""
    logger = logging.getLogger("neo4j")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


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


class Neo4jStore(CypherStore):
    """Bolt-backed store; `load` replaces the *whole database's* nodes and relationships.

    One query per label and direction instead of one UNION ALL (what ArcadeDB's Bolt plugin
    accepts is narrower than Neo4j's Cypher); edges are named by elementId().
    """

    _union_all = False
    _edge_id = "elementId"
    _plain = staticmethod(_to_plain)

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
        super().__init__(schema_sample_size=schema_sample_size)
        self.uri = uri
        self.client_timeout_grace_s = client_timeout_grace_s
        self.user = user
        self.database = database or None
        self.default_timeout_ms = int(timeout_s * 1000)
        self.notes: list[str] = []
        """Things load() had to work around (e.g. an index statement the server rejected)."""
        check_bolt_uri(uri)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="neo4j-read")
        try:
            self._driver = GraphDatabase.driver(
                uri,
                auth=(user, password),
                connection_timeout=connection_timeout_s,
                connection_acquisition_timeout=connection_timeout_s,
            )
            with _quiet_driver():
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

    def _run_query(
        self,
        cypher: str,
        params: dict[str, Any],
        timeout_ms: int,
        max_rows: int | None,
    ) -> tuple[list[str], list[list[Any]], bool]:
        """Run in a READ session (the static guard matters: ArcadeDB accepts writes in READ mode)."""

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
                    rows.append([self._plain(v) for v in record.values()])
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
        return self._run_query(cypher, params or {}, timeout_ms=max(self.default_timeout_ms, 120_000), max_rows=None)[1]

    def _write(self, cypher: str, params: dict[str, Any] | None = None) -> int | None:
        return int(self._execute_write(cypher, params).counters.relationships_created)

    def _execute_write(self, cypher: str, params: dict[str, Any] | None = None) -> neo4j.ResultSummary:
        try:
            with self._session(neo4j.WRITE_ACCESS) as session:
                return session.execute_write(lambda tx: tx.run(cypher, params or {}).consume())
        except neo4j_exc.Neo4jError as exc:
            raise self._map_error(exc, cypher, 0) from exc
        except (neo4j_exc.DriverError, OSError) as exc:
            raise self._map_error(exc, cypher, 0) from exc

    # -- CypherStore ------------------------------------------------------------
    def _clear(self) -> None:
        self.notes = []
        while True:  # batched delete: one huge DETACH DELETE can exhaust the server's transaction memory
            summary = self._execute_write("MATCH (n) WITH n LIMIT $n DETACH DELETE n", {"n": 10_000})
            if summary.counters.nodes_deleted == 0:
                break

    def _create_key_index(self, label: str) -> None:
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

    def _fetch_labels(self) -> list[str]:
        """Labels that have nodes (ArcadeDB's db.labels() also lists emptied types, so they are counted)."""
        try:
            names = [str(r[0]) for r in self._read("CALL db.labels()")]
        except (CypherValidationError, StoreError) as exc:
            if isinstance(exc, StoreUnavailableError):
                raise
            names = sorted({str(lab) for r in self._read("MATCH (n) RETURN DISTINCT labels(n)") for lab in r[0]})
        return sorted(name for name in names if self._count(name) > 0)

    def _fetch_relationship_types(self) -> list[str]:
        return sorted({r.rel for r in self.schema().relations})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._driver.close()
