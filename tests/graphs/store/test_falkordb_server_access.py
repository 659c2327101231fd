"""The managed FalkorDB server is closed to other local clients (issue 15, item 4).

Any local process can connect to 127.0.0.1:<port> (the port is in falkordb.json), so the
server must refuse clients without our password, keep that password out of world-readable
places (state file, command line), and refuse admin commands even to our own user. Our
own attach path (a second process on the same index) must keep working.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from graphs.errors import StoreUnavailableError
from graphs.store.falkordb_access import _no_retry
from graphs.store.falkordb_server import (
    ACL_FILE,
    SECRET_FILE,
    STATE_FILE,
    USERNAME,
    FalkorDBServer,
    pid_alive,
    stop_server_for,
)
from graphs.store.falkordb_store import FalkorDBStore
from tests.paths import REPO
from tests.store_fixtures import tiny_skb

pytestmark = pytest.mark.integration

ROOT = REPO


@pytest.fixture()
def loaded(tmp_path: Path) -> Iterator[FalkorDBStore]:
    store = FalkorDBStore(tmp_path / "falkordb")
    store.load(tiny_skb())
    yield store
    store.close()


def _port(data_dir: Path) -> int:
    return int(json.loads((data_dir / STATE_FILE).read_text())["port"])


def test_a_client_without_the_password_can_neither_write_nor_reconfigure(loaded: FalkorDBStore) -> None:
    port = _port(loaded.data_dir)
    before = loaded.count_nodes()
    intruder = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, retry=_no_retry())  # refused: at once
    try:
        with pytest.raises(redis.AuthenticationError):
            intruder.execute_command("GRAPH.QUERY", loaded.graph_name, "CREATE (:Intruder {key: 'x'})")
        with pytest.raises(redis.AuthenticationError):
            intruder.config_set("save", "1 1")
        with pytest.raises(redis.AuthenticationError):
            intruder.execute_command("GRAPH.RO_QUERY", loaded.graph_name, "MATCH (n) RETURN count(n)")
    finally:
        intruder.close()
    for user, password in (("default", ""), ("default", "guess"), (USERNAME, "guess")):
        guesser = redis.Redis(host="127.0.0.1", port=port, username=user, password=password, socket_timeout=5,
                               retry=_no_retry())
        try:
            with pytest.raises(redis.AuthenticationError):
                guesser.ping()
        finally:
            guesser.close()
    assert loaded.count_nodes() == before
    conn = loaded.server.connection()
    try:
        assert conn.config_get("save")["save"] == ""  # CONFIG SET save "1 1" did not happen
    finally:
        conn.close()


def test_our_own_user_is_refused_admin_commands(loaded: FalkorDBStore) -> None:
    """Even with the password: no reconfiguring, flushing, module loading, replication or UDF code."""
    conn = loaded.server.connection()
    try:
        refused = [
            ("CONFIG", "SET", "save", ""),
            ("FLUSHALL",),
            ("FLUSHDB",),
            ("MODULE", "LIST"),
            ("REPLICAOF", "127.0.0.1", "1"),
            ("KEYS", "*"),
            ("BGSAVE",),
            ("CLIENT", "LIST"),
            ("ACL", "LIST"),
            ("EVAL", "return 1", "0"),
            ("SET", "k", "v"),
            ("GRAPH.UDF", "LIST"),
            ("GRAPH.COPY", loaded.graph_name, "stolen"),
        ]
        for command in refused:
            with pytest.raises(redis.exceptions.NoPermissionError):
                conn.execute_command(*command)
        with pytest.raises(redis.ResponseError, match="DEBUG command not allowed"):  # redis's own switch
            conn.execute_command("DEBUG", "SLEEP", "0")
        # what the package itself needs still works
        assert conn.ping()
        assert conn.config_get("dir")["dir"] == str(loaded.data_dir.resolve())
    finally:
        conn.close()
    assert loaded.count_nodes() == len(tiny_skb().nodes)


def test_the_password_stays_out_of_world_readable_places(loaded: FalkorDBStore) -> None:
    data_dir = loaded.data_dir
    password = (data_dir / SECRET_FILE).read_text().strip()
    assert len(password) >= 32
    for name in (SECRET_FILE, ACL_FILE):
        assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600, name
    assert password not in (data_dir / ACL_FILE).read_text()  # only its SHA-256
    assert password not in (data_dir / STATE_FILE).read_text()
    assert loaded.server.pid is not None
    cmdline = Path(f"/proc/{loaded.server.pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline


def test_each_start_gets_a_fresh_password(tmp_path: Path) -> None:
    with FalkorDBServer(tmp_path) as server:
        first = (tmp_path / SECRET_FILE).read_text()
        assert server.connection().ping()
    with FalkorDBServer(tmp_path) as server:
        assert (tmp_path / SECRET_FILE).read_text() != first
        stale = redis.Redis(host="127.0.0.1", port=server.port or 0, username=USERNAME, password=first, retry=_no_retry())
        with pytest.raises(redis.AuthenticationError):
            stale.ping()
        stale.close()


def test_a_second_process_attaches_with_the_password(loaded: FalkorDBStore) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from graphs.store.falkordb_store import FalkorDBStore\n"
        "st = FalkorDBStore(Path(sys.argv[1]), graph_name=sys.argv[2])\n"
        "print(st.server.owned, st.server.pid, st.count_nodes(), flush=True)\n"
        "st.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(loaded.data_dir), loaded.graph_name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == ["False", str(loaded.server.pid), str(len(tiny_skb().nodes))]
    assert loaded.server.is_running()  # the attached process detached without stopping it


def test_a_live_server_that_refuses_our_credentials_is_not_doubled(loaded: FalkorDBStore) -> None:
    """Starting a second server on the same dump.rdb would corrupt it: say what to do instead."""
    secret = loaded.data_dir / SECRET_FILE
    real = secret.read_text()
    secret.write_text("not-the-password")
    try:
        other = FalkorDBServer(loaded.data_dir)
        with pytest.raises(StoreUnavailableError, match=rf"refused our credentials.*kill {loaded.server.pid}"):
            other.start()
        assert other.pid is None
    finally:
        secret.write_text(real)
    assert loaded.count_nodes() == len(tiny_skb().nodes)


def test_the_build_can_still_stop_a_replaced_index_server(tmp_path: Path) -> None:
    """graphs.build stops the previous index's server with SHUTDOWN: that needs the password too."""
    server = FalkorDBServer(tmp_path / "falkordb").start()
    pid = server.pid
    assert pid is not None
    try:
        stop_server_for(tmp_path / "falkordb")
        deadline = time.monotonic() + 30
        while server.is_running() and time.monotonic() < deadline:  # is_running() also reaps our child
            time.sleep(0.05)
        assert not server.is_running() and not pid_alive(pid)
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        server.stop()
