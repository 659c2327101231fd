"""The trace writer's queue, bounded in rows and payload bytes.

Why its own room: back-pressure and dropping are the one concurrency-sensitive part of tracing; the
tracer owns the thread that drains it and the store that receives the rows.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any


class _RowQueue:
    """The writer's queue, bounded in rows and payload bytes.

    Why not ``queue.Queue()``: under concurrent questions the callbacks produced rows faster than one
    SQLite writer stored them, and the unbounded queue grew a server to gigabytes. A full queue makes
    the traced call wait up to ``wait_s`` (back-pressure); if it is still full the row is dropped and
    counted, and until the writer takes its next batch, further rows that find it full are dropped at
    once (a stuck writer must not slow every call by ``wait_s`` per row)."""

    def __init__(self, max_rows: int, max_bytes: int, wait_s: float) -> None:
        self.max_rows = max(1, max_rows)
        self.max_bytes = max(1, max_bytes)
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._rows: deque[tuple[dict[str, Any] | None, int]] = deque()
        self._bytes = 0
        self._busy = 0  # rows the writer has taken and not yet stored
        self._shedding = False
        self.dropped = 0
        self.peak_rows = 0
        self.peak_bytes = 0

    def _full(self, size: int) -> bool:
        return bool(self._rows) and (len(self._rows) >= self.max_rows or self._bytes + size > self.max_bytes)

    def put(self, row: dict[str, Any], size: int) -> bool:
        """Queue ``row``; False when it was dropped."""
        with self._cond:
            if self._shedding and self._full(size):
                self.dropped += 1
                return False
            deadline = time.monotonic() + self.wait_s
            while self._full(size):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._shedding = True
                    self.dropped += 1
                    return False
                self._cond.wait(left)
            self._rows.append((row, size))
            self._bytes += size
            self.peak_rows = max(self.peak_rows, len(self._rows))
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            self._cond.notify_all()
            return True

    def stop(self) -> None:
        with self._cond:
            self._rows.append((None, 0))
            self._cond.notify_all()

    def take(self) -> list[dict[str, Any] | None]:
        """Everything queued (blocking while empty); call `done` once it is stored."""
        with self._cond:
            while not self._rows:
                self._cond.wait()
            batch = [row for row, _ in self._rows]
            self._busy = len(batch)
            self._rows.clear()
            self._bytes = 0
            if self._shedding:
                self._shedding = False
            self._cond.notify_all()
            return batch

    def done(self) -> None:
        with self._cond:
            self._busy = 0
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every queued row is stored; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._rows or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True


def _row_size(row: Mapping[str, Any]) -> int:
    return 256 + sum(len(v) for v in row.values() if isinstance(v, str))
