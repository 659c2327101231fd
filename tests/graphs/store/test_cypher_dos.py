"""Denial of service through the read path, on a real FalkorDB server (issue 15, items 2 and 3).

The attacker's queries from the issue are refused before the server parses them; a query that
slips past the static guard returns to the caller within its timeout plus the client's grace;
one slow model query leaves a server thread for the planner's keyed lookups; and an expression
that allocates without bound meets the served server's memory ceiling (RLIMIT_DATA) instead of
the machine's memory. The server's memory is read from /proc/<pid>/status (VmRSS, VmHWM).

Bounds on time are deliberately generous (the suite runs on loaded 2-core machines); measured
figures are in the README's safety section.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphs.errors import QueryTimeoutError, StoreError
from graphs.store.cypher_guard import QueryTooComplexError
from graphs.store.falkordb_server import SERVE_MEMORY_HEADROOM
from graphs.store.falkordb_store import QUERY_GRACE_S, FalkorDBStore
from tests.store_fixtures import served_store

pytestmark = pytest.mark.integration

NODES = 20_000
MIB = 1024**2

ISSUE_QUERIES = [
    "RETURN " + "-" * 22 + "1 AS x",
    "RETURN " + "(" * 1990 + "1" + ")" * 1990 + " AS x",
    "RETURN size(range(1, 1000000000)) AS n",
    "RETURN size(range(1, 300000000)) AS n",
    "RETURN size(reduce(s='aaaaaaaa', i IN range(1,30) | s + s)) AS n",
    "MATCH (a:A) WITH collect(a.key) AS l RETURN size([x IN l | [y IN l | x + y]]) AS n",
]

# Quadratic work in one expression (no nested iteration, so the guard lets it through): about
# 7 s of server time per `x + '?' IN l` term on 20,000 keys on a loaded 2-core machine.
SLOW_QUERY = (
    "MATCH (a:A) WITH collect(a.key) AS l RETURN size([x IN l WHERE "
    + " OR ".join(f"x + '{c}' IN l" for c in "zyxwvu")
    + "]) AS n"
)

# Five 100,000-element lists of 19 KB strings held in one row: about 9.5 GB if nothing stops it.
# Every part passes the guard (single-level iteration, ranges within bounds, a 19 KB parameter).
MEMORY_BOMB = "RETURN " + ", ".join(f"[x IN range(1, 100000) | $s + toString(x)] AS c{i}" for i in range(5))


def vm(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and VmData of `pid` in bytes."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM", "VmData"):
            out[key] = int(line.split()[1]) * 1024
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBStore]:
    """A served (persist=False) store over 20,000 nodes, with two server threads like a 2-core machine."""
    def fill(graph: Any) -> None:
        graph.query("CREATE INDEX FOR (n:A) ON (n.key)")
        graph.query("UNWIND range(1, $n) AS i CREATE (:A {key: 'k' + toString(i)})", {"n": NODES})
        graph.query("MATCH (a:A {key: 'k1'}), (b:A {key: 'k2'}) CREATE (a)-[:R]->(b)")

    with served_store(tmp_path_factory.mktemp("dos") / "falkordb", fill, thread_count=2) as store:
        yield store


def test_issue_queries_are_refused_before_the_server_sees_them(served: FalkorDBStore) -> None:
    assert served.server.pid is not None
    before = vm(served.server.pid)
    for query in ISSUE_QUERIES:
        started = time.monotonic()
        with pytest.raises(QueryTooComplexError):
            served.query(query)
        assert time.monotonic() - started < 5, query
    after = vm(served.server.pid)
    assert after["VmHWM"] - before["VmHWM"] < 64 * MIB  # the server allocated nothing for them
    assert served.query("MATCH (n:A) RETURN count(n) AS n").rows == [[NODES]]


def test_slow_query_returns_within_timeout_plus_grace_and_lookups_keep_a_thread(served: FalkorDBStore) -> None:
    """Before: the client waited for the server (socket timeout 630 s) and two slow queries took both
    server threads, so keyed lookups queued behind them."""
    outcomes: list[tuple[str, float]] = []

    def slow() -> None:
        started = time.monotonic()
        try:
            served.query(SLOW_QUERY, timeout_ms=1000)
            outcomes.append(("rows", time.monotonic() - started))
        except QueryTimeoutError as exc:
            outcomes.append((str(exc), time.monotonic() - started))

    workers = [threading.Thread(target=slow) for _ in range(2)]
    for worker in workers:
        worker.start()
        time.sleep(0.3)
    started = time.monotonic()
    triples = served.neighbors(["k1"], direction="out")
    lookup_s = time.monotonic() - started
    for worker in workers:
        worker.join(120)
    # FalkorDB cannot cancel an expression that is running: the abandoned query keeps its server
    # thread until it ends. Kill the server so the next test starts idle (the store restarts it).
    served.server.kill()
    print(f"keyed lookup {lookup_s:.2f} s while slow queries ran; slow queries: {outcomes}")
    assert [t.dst for t in triples] == ["k2"]
    assert lookup_s < 10, f"keyed lookup waited {lookup_s:.1f} s behind slow model queries"
    assert len(outcomes) == 2 and all(kind != "rows" for kind, _ in outcomes), outcomes
    assert all(elapsed < 1 + QUERY_GRACE_S + 15 for _, elapsed in outcomes), outcomes
    assert any("already running" in kind for kind, _ in outcomes), outcomes  # the second found no free slot


def test_unbounded_expression_meets_the_memory_ceiling(served: FalkorDBStore) -> None:
    """Runs last: the server aborts at its RLIMIT_DATA and the next call restarts it."""
    assert served.query("RETURN 1 AS x").rows == [[1]]  # (re)started if an earlier test stopped it
    server = served.server
    assert server.pid is not None and server.memory_limit is not None
    pid, limit = server.pid, server.memory_limit
    assert limit - vm(pid)["VmData"] <= SERVE_MEMORY_HEADROOM
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            try:
                rss = vm(pid)["VmRSS"]
            except (OSError, KeyError):
                return
            peak = max(peak, rss)
            if rss > limit + 1024 * MIB:  # the ceiling failed: do not take the machine down with it
                server.kill()
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        with pytest.raises(StoreError) as err:
            served.query(MEMORY_BOMB, {"s": "y" * 19_000}, timeout_ms=5000)
    finally:
        done.set()
        watcher.join(10)
    elapsed = time.monotonic() - started
    print(
        f"memory bomb: {type(err.value).__name__} after {elapsed:.1f} s, RSS peak {peak / MIB:.0f} MiB, "
        f"ceiling {limit / MIB:.0f} MiB"
    )
    assert peak <= limit, f"server RSS peaked at {peak / MIB:.0f} MiB, over its ceiling {limit / MIB:.0f} MiB"
    assert elapsed < 60
    deadline = time.monotonic() + 120
    while server.is_running() and time.monotonic() < deadline:  # the aborted server writing its crash log
        time.sleep(0.1)
    assert served.query("MATCH (n:A) RETURN count(n) AS n").rows == [[NODES]]  # restarted, data intact
    assert served.server.pid != pid and served.server.memory_limit is not None  # it aborted; the new one is capped
