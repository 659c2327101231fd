"""Large read-only tables held as tuples, so the cyclic garbage collector stops visiting them.

Why: a full collection of CPython's cyclic garbage collector visits every element of every container it
tracks. A list is tracked for as long as it lives; a tuple of strings and numbers is untracked by the
first collection that sees it. The key and label tables of the SKB, of the indexes, of the lexicon and of
the scoring models grow with the graph: at 1M nodes they held ~9 M list elements, and a full collection
(one every few questions that parse thousands of rows) paused a question for 141 ms instead of ~55 ms.

And memory a replaced build let go of, handed back to the system: glibc keeps freed blocks in per-thread arenas,
so a server whose threads load and drop one build after another grew by megabytes per update with nothing of the
old builds alive (``give_back_freed_memory``).

And the collector paused while a build or a loader makes millions of objects that live on (``paused_gc``).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_ATOMS = (str, int, float, bool, type(None))


def table(values: Iterable[T]) -> tuple[T, ...]:
    """``values`` as a tuple (the same object when it is one already)."""
    return values if isinstance(values, tuple) else tuple(values)


def one_copy(values: Iterable[str]) -> tuple[str, ...]:
    """``values`` as a tuple holding one string object per distinct value. Why: a parsed JSON list makes a new
    string for every element, so an index's label per node held as many copies of a few names as the graph has
    nodes (2 MB a table on a graph of 37,000 nodes)."""
    seen: dict[str, str] = {}
    return tuple(seen.setdefault(value, value) for value in values)


def untracked_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (a parsed JSON object) with each list of strings and numbers in it, or in an object in it, as a
    tuple (other values as they are)."""
    return {key: _untracked(value) for key, value in meta.items()}


def _untracked(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, _ATOMS) for v in value):
        return tuple(value)
    if isinstance(value, dict):
        return {key: _untracked(v) for key, v in value.items()}
    return value


_PAUSE_LOCK = threading.Lock()
_pauses = 0  # blocks open, in every thread: the collector is one per process
_restore = (False, False)  # (enable, unfreeze) when the outermost block ends


@contextmanager
def paused_gc() -> Iterator[None]:
    """No automatic cyclic collection inside the block, and explicit ``gc.collect()`` calls inside it skip the
    objects alive when it was entered (``gc.freeze``); the collector is as it was once the last open block, in
    any thread, ends. A caller's own ``gc.disable()`` and ``gc.freeze()`` are kept (then nothing is frozen).

    Why: a loader or a build makes millions of objects that live until it ends, and few cycles. Each time the
    survivors grow by a quarter, CPython runs a full collection that visits every tracked object again, so
    their cost grows with the square of the graph; and the build's one explicit collection (before the graph
    server loads) need not visit the graph it was given. Measured on an HPO update (two graphs of 37k nodes and
    557k edges in memory): 2 of its 12 s went to these passes. The pause is process-wide, as the collector is:
    another thread's cyclic garbage waits for the block's end."""
    global _pauses, _restore
    with _PAUSE_LOCK:
        if _pauses == 0:
            _restore = (gc.isenabled(), gc.get_freeze_count() == 0)
            gc.disable()
        _pauses += 1
        if _restore[1]:
            gc.freeze()
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses -= 1
            if _pauses == 0:
                enable, unfreeze = _restore
                if unfreeze:
                    gc.unfreeze()
                if enable:
                    gc.enable()


def give_back_freed_memory() -> bool:
    """Return the C heap's free blocks to the system (glibc's ``malloc_trim``); False where there is none.

    Why: after a server drops a replaced build (tens to hundreds of MB of arrays and objects), glibc keeps the
    freed blocks in whichever threads' arenas allocated them; the next build is allocated elsewhere, and the
    process's resident memory climbs with every update although nothing of the old builds is alive. Measured on
    an MCP server under eight clients: one ``malloc_trim`` gave back 30 of the 50 MB it had grown over ten
    updates. Once per replaced build; a few milliseconds."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))


def release_heap() -> None:
    """Collect what the finished stages dropped and hand freed heap pages back to the system (glibc's
    ``malloc_trim``; a no-op elsewhere): the freed memory of millions of small objects otherwise stays in
    the process, counted in its RSS while the graph store loads beside it."""
    gc.collect()
    give_back_freed_memory()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` from the running process's own symbols, looked up once; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and other C libraries have no malloc_trim
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
