"""Graph store faults: FalkorDB killed between calls and mid-query, restarts refused, Neo4j unreachable.

Every fault must surface as a clear, structured tool error (or be repaired transparently), the
FalkorDB child must come back on the next call (auto_restart), and no server process may leak.
Each test runs on a private copy of the fixture index so killing its server hurts nobody else.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tools.search_nodes as search_nodes_module
from agent import AgentConfig, ask
from graphs.bundle import IndexBundle
from graphs.errors import ConfigError, StoreUnavailableError
from graphs.store.falkordb_server import FalkorDBServer
from graphs.store.falkordb_store import FalkorDBStore
from graphs.store.neo4j_store import Neo4jStore
from tests.reliability_support import copy_index, falkordb_children, within
from tests.store_fixtures import free_port
from tools import make_tools

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def store_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """search_nodes sends its aggregates to the store (it reads the SKB when the store is its embedded copy)."""
    monkeypatch.setattr(search_nodes_module, "READ_SKB", False)


@pytest.fixture()
def private(hpo_index_dir: Path, tmp_path: Path) -> Iterator[IndexBundle]:
    bundle = IndexBundle.open(copy_index(hpo_index_dir, tmp_path / "index"))
    yield bundle
    bundle.close()


def tool(bundle: IndexBundle, name: str) -> Any:
    return {t.name: t for t in make_tools(bundle, cypher_timeout_ms=60_000)}[name]


def expand(bundle: IndexBundle) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        within(60, lambda: tool(bundle, "search_nodes").invoke({"keys": ["OMIM:101200"], "question": "skull"}))
    )
    return out


def test_killed_between_calls_restarts_on_the_next_search_nodes(private: IndexBundle) -> None:
    baseline = len(falkordb_children())
    first = expand(private)
    assert first["neighbors"]
    server = private.store.server  # type: ignore[attr-defined]
    old_pid = server.pid
    assert len(falkordb_children()) == baseline + 1
    server.kill()
    assert len(falkordb_children()) == baseline
    again = expand(private)
    assert again["neighbors"] == first["neighbors"]
    assert server.pid != old_pid and server.is_running()
    assert len(falkordb_children()) == baseline + 1  # restarted once, nothing leaked
    private.close()
    assert len(falkordb_children()) == baseline


def _wait_for_running_query(server: FalkorDBServer, deadline_s: float = 30.0) -> None:
    """Block until the server reports a query in flight (GRAPH.INFO RunningQueries)."""
    conn = server.connection()
    try:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            _header, running = conn.execute_command("GRAPH.INFO", "RunningQueries")
            if running:
                return
            time.sleep(0.01)
        raise AssertionError("the long query never showed up in GRAPH.INFO RunningQueries")
    finally:
        conn.close()


def test_killed_mid_query_gives_a_clear_error_then_recovers(private: IndexBundle) -> None:
    baseline = len(falkordb_children())
    assert expand(private)["neighbors"]
    server = private.store.server  # type: ignore[attr-defined]
    box: dict[str, Any] = {}
    # streamed rows (two bounded UNWINDs): long-running without a huge list, which the guard refuses
    long_query = "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y WITH x WHERE (x + y) % 7 = 0 RETURN count(x)"

    def run() -> None:
        box["out"] = json.loads(tool(private, "cypher").invoke({"query": long_query}))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    _wait_for_running_query(server)
    server.kill()
    worker.join(60)
    assert not worker.is_alive(), "the cypher tool hung after its server died"
    err = box["out"]["error"]
    assert err["type"] == "store_unavailable" and "unreachable" in err["message"] and "restart" in err["hint"]
    assert expand(private)["neighbors"]  # the next call restarted the server
    assert len(falkordb_children()) == baseline + 1


def test_without_auto_restart_the_tool_reports_the_outage(private: IndexBundle) -> None:
    store = FalkorDBStore(private.index_dir / "falkordb", auto_restart=False)
    private._store = store  # the bundle's store, replaced by one that may not restart
    try:
        assert expand(private)["neighbors"]
        store.server.kill()
        out = expand(private)
        assert out["error"]["type"] == "store_unavailable"
        assert "not running" in out["error"]["message"] and "auto_restart" in out["error"]["message"]
        result = within(120, lambda: ask("Which genes cause Apert syndrome?", bundle=private, config=AgentConfig()))
        assert result.context  # the agent still answers (semantic search, fallback)
        assert any("graph store unavailable" in note for note in result.degraded)
    finally:
        store.close()
        private._store = None


def test_neo4j_unreachable_names_the_uri_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{port}")
    monkeypatch.setenv("NEO4J_USER", "neo4j")
    monkeypatch.setenv("NEO4J_PASSWORD", "secret")
    with pytest.raises(StoreUnavailableError) as info:
        within(60, lambda: Neo4jStore.from_env(connection_timeout_s=2.0))
    message = str(info.value)
    assert f"bolt://127.0.0.1:{port}" in message and "NEO4J_URI" in message and "NEO4J_PASSWORD" in message
    assert "secret" not in message  # never echo the password


def test_neo4j_missing_settings_are_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NEO4J_URI", "NEO4J_USER", "NEO4J_USERNAME", "NEO4J_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="NEO4J_URI.*NEO4J_USER.*NEO4J_PASSWORD"):
        Neo4jStore.from_env()


def test_neo4j_unreachable_through_the_tools(private: IndexBundle, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{port}")
    monkeypatch.setenv("NEO4J_USER", "neo4j")
    monkeypatch.setenv("NEO4J_PASSWORD", "secret")
    with IndexBundle.open(private.index_dir, store="neo4j") as bundle:
        out = expand(bundle)
        assert out["error"]["type"] == "store_unavailable" and f"127.0.0.1:{port}" in out["error"]["message"]
        out = json.loads(within(60, lambda: tool(bundle, "cypher").invoke({"query": "MATCH (n) RETURN count(n)"})))
        assert out["error"]["type"] == "store_unavailable"
