"""Helpers for the reliability, security and load tests.

Why a thread-based deadline: pytest-timeout is not a dependency, and ``signal.alarm`` only works on
the main thread and cannot interrupt C code; running the call in a daemon thread and joining with a
timeout turns a hang into a test failure that names the call, without killing the interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

CORPUS_PATH = Path(__file__).parent / "data" / "injection_corpus.json"


class Hang(AssertionError):
    """A call did not return within its deadline."""


def within(seconds: float, fn: Callable[[], T], what: str = "call") -> T:
    """``fn()``'s result (or its exception), failing with Hang if it runs past ``seconds``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=f"within:{what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Hang(f"{what} did not return within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def corpus(where: str | None = None) -> list[dict[str, str]]:
    """Entries of tests/data/injection_corpus.json aimed at ``where`` ('question' or 'node'), or all."""
    entries: list[dict[str, str]] = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))["strings"]
    if where is None:
        return entries
    return [e for e in entries if e["where"] in (where, "both")]


def falkordb_children() -> list[int]:
    """Pids of redis-server processes started by this process (FalkorDB runs in its own session,
    so they are found by parent pid, not by process group)."""
    me = os.getpid()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
        except (OSError, ValueError):
            continue
        if fields[0] != "Z" and int(fields[1]) == me and "redis" in comm:
            found.append(int(entry.name))
    return sorted(found)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def copy_index(src: Path, dst: Path) -> Path:
    """A private copy of an index (and its embedding cache) whose FalkorDB server we may kill.

    The live server's state and lock files are left behind so the copy starts its own server.
    """
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("falkordb.json", "falkordb.lock", "*.log", "*.tmp-*"))
    cache = src.parent / ".skb-cache"
    if cache.is_dir() and not (dst.parent / ".skb-cache").exists():
        shutil.copytree(cache, dst.parent / ".skb-cache")
    return dst


def graph_fingerprint(store: Any) -> str:
    """Everything a write could change in a FalkorDB graph: nodes with labels and properties,
    edges with types and properties, and the number of indexes."""
    nodes = store._read("MATCH (n) RETURN labels(n), properties(n) ORDER BY n.key")
    edges = store._read("MATCH (a)-[r]->(b) RETURN a.key, type(r), b.key, properties(r) ORDER BY a.key, type(r), b.key")
    indexes = store._read("CALL db.indexes()")
    blob = json.dumps([nodes, edges, len(indexes)], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
