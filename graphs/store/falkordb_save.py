"""Saving a loading FalkorDB server's graph to dump.rdb, and saying why a save failed.

Why a room of its own: a build's server takes no snapshots of its own (a bulk load of millions of edges
would otherwise start a background save, and Redis refuses SAVE while one runs), so the one save that
makes the dump final is this module's: it waits, bounded, for a background save someone else started, and
a failure quotes the server's own words -- the reply to SAVE, then what the log gained during the save --
never a start-up warning that merely mentions saving.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import redis

SAVE_WAIT_S = float(os.environ.get("SKB_FALKORDB_SAVE_WAIT_S", "600"))
"""How long a build's SAVE waits for a background save in progress before it refuses."""
SAVE_SOCKET_TIMEOUT_S = 3600.0
"""A synchronous SAVE of a large graph takes minutes; the socket waits this long for its reply."""

_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [#*.-] ")
_SAVE_WORDS = ("saving", "save", "rdb", "temp db", "write error")


class BackgroundSaveBusy(redis.RedisError):
    """SAVE was refused because a background save kept running past the wait."""


def strip_log_prefix(line: str) -> str:
    """A redis log line without its ``pid:role date time level`` prefix."""
    return _LOG_PREFIX.sub("", line)


def save_waiting(conn: redis.Redis, wait_s: float) -> None:
    """SAVE on ``conn``; while a background save runs, wait up to ``wait_s`` seconds for it to end, then
    raise `BackgroundSaveBusy` (Redis refuses SAVE until then)."""
    deadline = time.monotonic() + wait_s
    while True:
        if not int(conn.info("persistence").get("rdb_bgsave_in_progress", 0)):
            try:
                conn.save()
                return
            except redis.ResponseError as exc:
                if "in progress" not in str(exc).lower():
                    raise
        if time.monotonic() >= deadline:
            raise BackgroundSaveBusy(
                f"a background save was still running after waiting {wait_s:,.1f} s, and the server "
                f"refuses SAVE until it ends (Background save already in progress)"
            )
        time.sleep(0.05)


def log_since(log_path: Path, offset: int, chars: int = 4000) -> str:
    """What the log gained after byte ``offset`` (at most its last ``chars`` bytes)."""
    try:
        size = log_path.stat().st_size
        with open(log_path, "rb") as fh:
            fh.seek(max(offset, size - chars))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def log_size(log_path: Path) -> int:
    try:
        return log_path.stat().st_size
    except OSError:
        return 0


def save_failure_message(exc: BaseException, log_text: str, data_dir: Path) -> str:
    """Why SAVE into ``data_dir`` failed: the server's reply, then the save lines of ``log_text`` (what the
    log gained since the save began; a failed SAVE often replies a bare ``ERR``), with the free space
    there and what to do. Start-up warnings (``WARNING ...``) are never quoted as the reason."""
    reply = str(exc).strip()
    reply = "" if reply.upper() in ("", "ERR") else reply
    lines = [strip_log_prefix(ln.strip()) for ln in log_text.splitlines() if ln.strip()]
    saving = [ln for ln in lines if not ln.startswith("WARNING") and any(s in ln.lower() for s in _SAVE_WORDS)]
    parts = ([reply] if reply else []) + [ln[:200] for ln in saving[-3:]]
    reason = "; ".join(dict.fromkeys(parts)) or type(exc).__name__
    try:
        free = shutil.disk_usage(data_dir).free
    except OSError:
        free = -1
    full = "no space left" in reason.lower() or "disk quota" in reason.lower() or 0 <= free < (1 << 20)
    where = f"{data_dir} ({free / 1e6:,.1f} MB free)" if free >= 0 else str(data_dir)
    if isinstance(exc, BackgroundSaveBusy):
        fix = ("stop whatever started a background save on this server (or raise SKB_FALKORDB_SAVE_WAIT_S), "
               "then run the build again")
    elif full:
        fix = "the disk is full: free space there (or build the index on another disk) and run the build again"
    else:
        fix = "check that the directory is writable and has free space, then run the build again"
    return f"FalkorDB could not save the graph to {where}: {reason}; {fix}"
