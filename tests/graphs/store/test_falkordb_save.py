"""The build's SAVE on a real FalkorDB server: no snapshots of its own while loading, a background save in
progress waited for (bounded) or refused by name, and a failed save quoting the server's error, never a
start-up warning from its log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from graphs.errors import StoreError
from graphs.store.falkordb_server import BackgroundSaveBusy, FalkorDBServer
from graphs.store.falkordb_store import FalkorDBStore
from tests.store_fixtures import tiny_skb

pytestmark = pytest.mark.integration

STARTUP_WARNING = (
    "1:M 27 Nov 2026 10:00:00.000 # WARNING Memory overcommit must be enabled! Without it, a background save "
    "or replication may fail under low memory condition.\n"
)


class _SnapshottingServer(FalkorDBServer):
    """A server with Redis's snapshot policy switched on and a slow background save, so a background
    save is running when the load's SAVE comes (as a bulk load of millions of edges makes one run)."""

    def _command(self, port: int) -> list[str]:
        cmd = super()._command(port)
        at = cmd.index("--save")
        cmd[at + 1] = "1 1"
        return [*cmd[:at], "--rdb-key-save-delay", "400000", *cmd[at:]]


def test_a_loading_server_takes_no_snapshots_of_its_own(tmp_path: Path) -> None:
    with FalkorDBServer(tmp_path) as server:
        conn = server.connection()
        try:
            assert conn.config_get("save") == {"save": ""}
        finally:
            conn.close()


def test_a_failed_save_quotes_the_server_error_not_a_startup_warning(tmp_path: Path) -> None:
    data = tmp_path / "fdb"
    data.mkdir()
    (data / "falkordb.log").write_text(STARTUP_WARNING)  # the server appends to it
    store = FalkorDBStore(data)
    try:
        (data / "dump.rdb").mkdir()  # the final rename fails, as a full or read-only disk fails the write
        with pytest.raises(StoreError) as info:
            store.load(tiny_skb())
    finally:
        (data / "dump.rdb").rmdir()
        store.close()
    msg = str(info.value)
    assert "could not save the graph to" in msg, msg
    assert "overcommit" not in msg.lower(), msg
    assert "Is a directory" in msg or "moving" in msg.lower(), msg


def test_save_waits_for_a_background_save_or_refuses_it_by_name(tmp_path: Path) -> None:
    with _SnapshottingServer(tmp_path) as server:
        conn = server.connection()
        try:
            conn.execute_command("GRAPH.QUERY", "g", "CREATE (:A {key: 'x'})")
            deadline = time.monotonic() + 20
            while not int(conn.info("persistence")["rdb_bgsave_in_progress"]):
                assert time.monotonic() < deadline, "the snapshot policy never started a background save"
                time.sleep(0.05)
            with pytest.raises(BackgroundSaveBusy) as info:
                server.save(wait_s=0.1)
            msg = server.save_failure(info.value)
            assert "Background save already in progress" in msg and "waiting 0.1 s" in msg, msg
            server.save(wait_s=60)  # the same save, given time, waits the background save out
            persistence = conn.info("persistence")
            assert int(persistence["rdb_changes_since_last_save"]) == 0
            assert persistence["rdb_last_bgsave_status"] == "ok"
        finally:
            conn.close()
