"""The served graph server's per-query memory cap (FalkorDB's QUERY_MEM_CAPACITY) is a backstop behind the
static guard: a query that grows past it fails with an error naming the cap, and the same server keeps
answering (the data ceiling, RLIMIT_DATA, would instead abort the whole server). Real FalkorDB servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from graphs.errors import StoreError
from graphs.store.falkordb_server import (
    QUERY_MEM_CAPACITY,
    SERVE_MEMORY_HEADROOM,
    FalkorDBServer,
    per_query_memory_cap,
)
from graphs.store.falkordb_store import FalkorDBStore
from tests.store_fixtures import served_store

pytestmark = pytest.mark.integration

MIB = 1024**2
CAP = 32 * MIB
#: About 100 MB collected across 100,000 rows: every part passes the guard (one range of 100,000, a 1 KB string).
GROWTH = "UNWIND range(1, 100000) AS i WITH collect($s + toString(i)) AS l RETURN size(l) AS n"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBStore]:
    with served_store(
        tmp_path_factory.mktemp("cap") / "falkordb",
        lambda graph: graph.query("CREATE (:A {key: 'k1'})"),
        query_mem_capacity=CAP,
    ) as store:
        yield store


def test_a_served_servers_cap_leaves_its_threads_room_under_the_ceiling(tmp_path: Path) -> None:
    server = FalkorDBServer(tmp_path / "falkordb", persist=False)
    assert server.query_mem_capacity <= QUERY_MEM_CAPACITY
    if SERVE_MEMORY_HEADROOM > 0:
        assert server.query_mem_capacity * (server.thread_count + 1) <= SERVE_MEMORY_HEADROOM
    assert per_query_memory_cap(8, 2048 * MIB) == 2048 * MIB // 9
    assert per_query_memory_cap(2, 2048 * MIB) == QUERY_MEM_CAPACITY
    assert per_query_memory_cap(4, 0) == QUERY_MEM_CAPACITY  # no ceiling: the plain cap


def test_a_query_past_the_cap_fails_with_an_error_and_the_server_stays_up(capped: FalkorDBStore) -> None:
    """The cap is in effect: about 100 MB fails under 32 MiB (it would pass under the default cap)."""
    assert capped.query("RETURN 1 AS x").rows == [[1]]
    pid = capped.server.pid
    with pytest.raises(StoreError, match=r"per-query memory cap \(32 MiB\).*exceeded capacity"):
        capped.query(GROWTH, {"s": "y" * 1000})
    assert capped.query("MATCH (n:A) RETURN n.key AS k").rows == [["k1"]]
    assert capped.server.pid == pid and capped.server.is_running()


def test_the_reproduction_past_the_guard_meets_the_cap(capped: FalkorDBStore) -> None:
    """Sent straight to the server (as if the guard had let it through): the three million elements the
    reported query builds are stopped by the cap, with an error, and the server answers the next call."""
    assert capped.query("RETURN 1 AS x").rows == [[1]]
    pid = capped.server.pid
    graph = capped.server.client(socket_timeout=60).select_graph("skb")
    with pytest.raises(Exception, match="exceeded capacity"):
        graph.ro_query("RETURN size(range(0, 3000000, 1 - 1/2*2)) AS n")
    assert capped.query("RETURN 1 AS x").rows == [[1]]
    assert capped.server.pid == pid
