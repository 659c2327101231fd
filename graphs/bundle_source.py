"""Whether an index that serves the user's live database (built with ``--dataset neo4j``) still matches it.

Why apart from the bundle: the check has its own clock, thread and remembered failure; the bundle only
says when a question starts and which store and source record to check. Every other index has no live
source, and the check costs it nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.errors import IndexMismatchError

if TYPE_CHECKING:
    from graphs.manifest import Manifest
    from graphs.store.base import GraphStore

_log = logging.getLogger("graphs.bundle")  # the bundle's logger: where these notes were always logged


def live_source(manifest: Manifest, store_kind: str) -> dict[str, Any] | None:
    """The source record of an index that serves the user's live database (built with --dataset neo4j)."""
    source = (manifest.extra.get("config") or {}).get("source")
    if store_kind == "neo4j" and isinstance(source, dict) and source.get("kind") == "neo4j":
        return source
    return None


class SourceWatch:
    """When the live database was last checked, the check running in the background, and the mismatch it
    found (raised on every later question until a check finds the database matching again)."""

    def __init__(self) -> None:
        self.checked = 0.0
        """``time.monotonic()`` of the last check started (or of the store's opening, which checks)."""
        self.error: Exception | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def check(self, recheck: Callable[[], None], max_age_s: float, wait: bool) -> None:
        """Start ``recheck`` in a background thread once the last check is older than ``max_age_s`` (``wait``:
        join it), then raise the mismatch the last finished check found, if any."""
        thread: threading.Thread | None = None
        with self._lock:
            due = time.monotonic() - self.checked >= max_age_s
            running = self._thread is not None and self._thread.is_alive()
            if due and not running:
                self.checked = time.monotonic()
                thread = self._thread = threading.Thread(target=recheck, name="skb-source-check", daemon=True)
                thread.start()
            elif running and wait:
                thread = self._thread
        if thread is not None and wait:
            thread.join()
        error = self.error
        if error is not None:
            raise error

    def recheck(self, store: GraphStore, source: dict[str, Any], index_dir: Path) -> None:
        """Compare the live database with the state the build recorded; remember a mismatch (or its end)."""
        from graphs.loaders.neo4j_source import check_recorded

        try:
            check_recorded(store, source, index_dir)  # type: ignore[arg-type]
            self.error = None
        except IndexMismatchError as exc:
            self.error = exc
        except Exception as exc:  # noqa: BLE001 - an unreachable server is reported by the question's own queries
            _log.debug("source check skipped: %s", exc)
