"""GraphStore over the embedded FalkorDB server (graphs/store/falkordb_server.py).

Read paths go through the static guard and GRAPH.RO_QUERY, so the server refuses
writes even if the guard missed one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

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
from graphs.store.base import CypherStore, ProgressFn
from graphs.store.falkordb_bulk import BulkUnsupported, edge_tokens, node_tokens
from graphs.store.falkordb_bulk import commands as bulk_commands
from graphs.store.falkordb_server import HOST, RESULTSET_SIZE, FalkorDBServer
from graphs.store.props import EdgeRow, quote_name

__all__ = ["FalkorDBServer", "FalkorDBStore"]


class _GraphMissingError(StoreError):
    """The graph key does not exist yet: internal reads treat it as an empty graph."""


class _SlowReadError(StoreError):
    """An internal read outlived READ_FIRST_WAIT_S on a server that still answers PINGs: retried in full."""


#: Value types the client already returns as plain Python (checked by exact type: the common case,
#: hundreds of cells per call, costs one set lookup instead of six isinstance checks).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _to_plain(value: Any) -> Any:
    """FalkorDB result values as JSON-friendly Python (same shapes as the Neo4j store)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [v if type(v) in _SCALARS else _to_plain(v) for v in value]
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


QUERY_GRACE_S = 3.0
"""Seconds a model query may run past its own timeout before the client stops waiting for it.

FalkorDB starts its timeout after parsing and checks it between records only, so a query can hold
a server thread longer than its limit; the caller gets QueryTimeoutError after timeout + grace
instead of waiting up to timeout_max (10 min)."""

PING_TIMEOUT_S = 1.0
"""How long a PING may take before a server that let a query time out counts as frozen, not slow."""

SUSPECT_S = 30.0
"""After a frozen verdict, calls PING first (PING_TIMEOUT_S) for this long instead of each waiting
out a full query timeout against a server that does not answer."""

READ_FIRST_WAIT_S = 5.0
"""How long an internal read (key lookups, neighbours, counts) waits before the server is PINGed:
a frozen server is then named within seconds, not after the 10-minute ceiling of a long read. A
server that answers the PING only had a slow read, which is retried without the short wait."""

INDEX_PIPELINE = 1000
"""Key-index statements sent per round trip during a load."""

_QUICK_POOL = -1  # key of the internal-read pool in _tool_dbs (socket timeout READ_FIRST_WAIT_S)

_TOOL_POOLS_MAX = 4
"""Distinct model-query timeouts that keep their own connection pool (the tool uses one or two)."""


class FalkorDBStore(CypherStore):
    """GraphStore over the embedded FalkorDB server; restarts the child if it died.

    The shared Cypher (load, schema, neighbors) lives in CypherStore; this class supplies the
    execution (RO_QUERY on the read path, restarts, model-query pools) and value conversion.
    """

    _plain = staticmethod(_to_plain)
    _load_group = 64  # load statements chained per query (many labels or relation names: fewer round trips)

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
        super().__init__(schema_sample_size=schema_sample_size)
        self.data_dir = Path(data_dir)
        self.graph_name = graph_name
        self._own_server = server is None
        self.server = server or FalkorDBServer(self.data_dir, persist=persist)
        self.auto_restart = auto_restart
        self._db: FalkorDB | None = None
        self._connected_port: int | None = None
        # Model-written queries (query()) get their own connection pools, whose socket timeout is
        # the query's timeout plus QUERY_GRACE_S, and at most thread_count - 1 of them run at once,
        # so the planner's keyed lookups (neighbors, schema) always find a free server thread.
        self._tool_dbs: dict[int, FalkorDB] = {}
        self.max_concurrent_queries = max(1, self.server.thread_count - 1)
        self._query_slots = threading.BoundedSemaphore(self.max_concurrent_queries)
        self._suspect_until = 0.0
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
        """The graph handle on the model-query pool for this timeout (socket timeout = timeout + grace);
        ``_QUICK_POOL``: the internal reads' pool (socket timeout READ_FIRST_WAIT_S)."""
        with self._lock:
            self._graph()  # (re)start and (re)connect first: a new port drops the old pools
            db = self._tool_dbs.get(timeout_ms)
            if db is None:
                if len(self._tool_dbs) >= _TOOL_POOLS_MAX:
                    self._close_tool_pools()
                socket_s = READ_FIRST_WAIT_S if timeout_ms == _QUICK_POOL else timeout_ms / 1000 + QUERY_GRACE_S
                db = self.server.client(socket_timeout=socket_s)
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

    def _responsive(self) -> bool:
        """Whether the server answers a PING within PING_TIMEOUT_S (on a fresh connection)."""
        try:
            conn = self.server.connection(socket_timeout=PING_TIMEOUT_S)
        except (StoreError, redis.RedisError, OSError):
            return False
        try:
            return bool(conn.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            with contextlib.suppress(redis.RedisError, OSError):
                conn.close()

    def _frozen(self) -> StoreUnavailableError:
        """The error for a server that accepts connections but answers nothing (stopped with SIGSTOP,
        swapped out, wedged): it names the store and what to do, not the query."""
        self._suspect_until = time.monotonic() + SUSPECT_S
        pid = self.server.pid
        return StoreUnavailableError(
            f"graph store FalkorDB at {HOST}:{self.server.port} (pid {pid}) for {self.data_dir} is not answering "
            f"(not even a PING within {PING_TIMEOUT_S:g} s): its process is stopped, frozen or overloaded; "
            f"resume it (kill -CONT {pid}) or end it (kill {pid}: the next call restarts it), or re-open the index; "
            f"log: {self.server.log_path}"
        )

    def _run(
        self,
        cypher: str,
        params: dict[str, Any] | None,
        *,
        read_only: bool,
        timeout_ms: int,
        model: bool = False,
        quick: bool = False,
    ) -> Any:
        if self._suspect_until > time.monotonic():
            if not self._responsive():
                raise self._frozen()
            self._suspect_until = 0.0
        try:  # opening a pool talks to the server too: a frozen one times out there, and is named the same way
            if model:
                graph = self._tool_graph(timeout_ms)
            else:
                graph = self._tool_graph(_QUICK_POOL) if quick else self._graph()
            if read_only:
                return graph.ro_query(cypher, params, timeout=int(timeout_ms))
            return graph.query(cypher, params, timeout=int(timeout_ms))
        except redis.TimeoutError as exc:
            if not self._responsive():  # the server, not the query: say so, and fail fast for a while
                raise self._frozen() from exc
            if quick:
                raise _SlowReadError("internal read slower than the first wait") from exc
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

    def _map_response_error(self, exc: redis.ResponseError, cypher: str, timeout_ms: int) -> StoreError:
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
                f"query exceeded FalkorDB's per-query memory cap ({self.server.query_mem_capacity // 1024**2} MiB): "
                f"{msg}; "
                "avoid materialising huge lists (range(), collect()) and add a LIMIT"
            )
        if "read-only" in low or "ro_query" in low:
            return ReadOnlyViolationError(f"FalkorDB refused a write on the read-only path: {msg}")
        return CypherValidationError(f"FalkorDB rejected the query: {msg}. Query: {cypher[:300]}")

    # -- CypherStore ----------------------------------------------------------
    def _write(self, cypher: str, params: dict[str, Any] | None = None) -> int | None:
        result = self._run(cypher, params, read_only=False, timeout_ms=self.server.timeout_max_ms)
        return int(result.relationships_created or 0)

    def _clear(self) -> None:
        graph = self._graph()
        try:
            graph.delete()
        except redis.ResponseError as exc:
            if "empty key" not in str(exc).lower():
                raise StoreError(f"cannot drop graph {self.graph_name!r} before loading: {exc}") from exc
        except redis.ConnectionError as exc:
            raise self._unavailable(exc) from exc

    def _create_key_index(self, label: str) -> None:
        self._write(f"CREATE INDEX FOR (n:{quote_name(label)}) ON (n.key)")

    def _create_key_indexes(self, labels: Sequence[str]) -> None:
        """Pipelined, INDEX_PIPELINE per round trip: a graph with thousands of labels waited a round
        trip per index. The first refusal is raised as ``_write`` would raise it."""
        conn = self._conn()
        for start in range(0, len(labels), INDEX_PIPELINE):
            pipe = conn.pipeline(transaction=False)
            for label in labels[start : start + INDEX_PIPELINE]:
                cypher = f"CREATE INDEX FOR (n:{quote_name(label)}) ON (n.key)"
                pipe.execute_command("GRAPH.QUERY", self.graph_name, cypher, "--compact")
            try:
                replies = pipe.execute(raise_on_error=False)
            except (redis.ConnectionError, ConnectionError, redis.TimeoutError) as exc:
                raise self._unavailable(exc) from exc
            for label, reply in zip(labels[start : start + INDEX_PIPELINE], replies, strict=True):
                if isinstance(reply, redis.ResponseError):
                    raise self._map_response_error(reply, f"CREATE INDEX FOR (n:{quote_name(label)}) ON (n.key)",
                                                   self.server.timeout_max_ms)  # fmt: skip
                if isinstance(reply, Exception):
                    raise self._unavailable(reply)

    def _load_native(
        self,
        node_rows: dict[str, list[dict[str, Any]]],
        edge_rows: dict[tuple[str, str, str], list[EdgeRow]],
        progress: ProgressFn | None,
        total: int,
    ) -> bool:
        """GRAPH.BULK (``graphs.store.falkordb_bulk``): a few commands instead of a parsed statement per label
        and per relation pattern. False where the format cannot carry the graph or the server refuses the
        command (a served index's server), or the loaded graph is not what was written (checked: counts, ids,
        indexes): the graph is then back to its key indexes alone, and the Cypher statements load it. The
        bytes are encoded while they are sent, about COMMAND_BYTES at a time."""
        if not node_rows:
            return False
        ids: dict[str, int] = {}
        conn = self._conn()
        done = 0
        carried = True
        try:
            for args, rows in bulk_commands(chain(node_tokens(node_rows, ids), edge_tokens(edge_rows, ids))):
                try:
                    conn.execute_command("GRAPH.BULK", self.graph_name, *args)
                except redis.ResponseError as exc:
                    if not done and isinstance(exc, redis.exceptions.NoPermissionError):
                        return False  # LOAD_COMMANDS are not ours here; nothing was written
                    raise StoreError(
                        f"FalkorDB refused the bulk load of graph {self.graph_name!r} ({exc}); "
                        f"rebuild with `skb index --force`; server log: {self.server.log_path}"
                    ) from exc
                except (redis.ConnectionError, ConnectionError, redis.TimeoutError) as exc:
                    raise self._unavailable(exc) from exc
                done += rows
                if progress:
                    progress(done, total)
        except BulkUnsupported:
            carried = False
        if carried and self._bulk_matches(ids, node_rows, sum(len(r) for r in edge_rows.values())):
            return True
        if done:  # some of the graph went in bulk, or it came out other than written: start again from the indexes
            self._clear()
            self._create_key_indexes(sorted(node_rows))
            if progress:
                progress(0, total)
        return False

    def _bulk_matches(self, ids: dict[str, int], node_rows: dict[str, list[dict[str, Any]]], edge_count: int) -> bool:
        """Whether the loaded graph has every node and edge, node ids in the order the edges were written
        against (0, 1, ... in creation order on an empty graph), and key indexes that answer."""
        found = self._read("MATCH (n) RETURN count(n), max(id(n))")
        edges = self._read("MATCH ()-[e]->() RETURN count(e)")
        if not found or [found[0][0], found[0][1]] != [len(ids), len(ids) - 1]:
            return False
        if not edges or edges[0][0] != edge_count:
            return False
        first, last = min(node_rows), max(node_rows)
        for label, row in ((first, node_rows[first][0]), (last, node_rows[last][-1])):
            key = row["props"]["key"]
            got = self._read(f"MATCH (n:{quote_name(label)} {{key: $k}}) RETURN id(n)", {"k": key})
            if [r[0] for r in got] != [ids[key]]:
                return False
        return True

    def _conn(self) -> redis.Redis:
        """The plain connection of the graph client (after making sure the server is up)."""
        self._graph()
        assert self._db is not None
        return self._db.connection

    def _after_load(self) -> None:
        try:
            self.server.save()
        except redis.RedisError as exc:
            raise StoreError(self.server.save_failure(exc)) from exc

    @property
    def max_timeout_ms(self) -> int:
        return self.server.timeout_max_ms

    def _run_query(
        self, cypher: str, params: dict[str, Any], timeout_ms: int, max_rows: int
    ) -> tuple[list[str], list[list[Any]], bool]:
        if not self._query_slots.acquire(timeout=timeout_ms / 1000):
            raise QueryTimeoutError(
                f"{self.max_concurrent_queries} Cypher queries were already running on this store for "
                f"{timeout_ms} ms (one server thread stays free for keyed lookups); retry later or simplify them"
            )
        try:
            result = self._run(cypher, params, read_only=True, timeout_ms=timeout_ms, model=True)
        finally:
            self._query_slots.release()
        columns = [str(h[1]) for h in (result.header or [])]
        rows = result.result_set or []
        truncated = len(rows) > max_rows or len(rows) >= RESULTSET_SIZE
        return columns, [[_to_plain(v) for v in row] for row in rows[:max_rows]], truncated

    def _read(self, cypher: str, params: dict[str, Any] | None = None, timeout_ms: int | None = None) -> list[Any]:
        """Internal read (fixed, trusted text): RO_QUERY without the guard's tokenizer cost."""
        timeout_ms = timeout_ms or self.server.timeout_max_ms
        try:
            try:
                result = self._run(cypher, params or {}, read_only=True, timeout_ms=timeout_ms, quick=True)
            except _SlowReadError:  # the server answers PINGs: a slow read, given its full time now
                result = self._run(cypher, params or {}, read_only=True, timeout_ms=timeout_ms)
        except _GraphMissingError:
            return []
        return list(result.result_set or [])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                with contextlib.suppress(Exception):
                    self._db.connection.close()
                self._db = None
            self._close_tool_pools()
            if self._own_server:
                self.server.stop()
