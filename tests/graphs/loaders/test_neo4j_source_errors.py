"""A Neo4j source at a wrong address gets the project's message alone, exit 2, no traceback.

- ``--uri http(s)://`` (Neo4j's browser port) made the driver import a missing HTTP dependency and
  crash with a traceback; the message now names the Bolt schemes.
- A peer that answers the Bolt handshake and then garbage made the driver print its own log line
  ("Failed to read from defunct connection") before ours.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def garbage_bolt_peer() -> Iterator[str]:
    """A TCP server that accepts Bolt version 4.4 and then sends bytes no Bolt message starts with."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            try:
                conn.settimeout(5)
                conn.recv(1024)
                conn.sendall(b"\x00\x00\x04\x04")
                conn.recv(4096)
                conn.sendall(b"\xff\xfe garbage \x00\x07" * 10)
            except OSError:
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"bolt://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(2)
    server.close()


def _index(uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``skb index`` in a fresh interpreter: what a user sees on stderr (pytest's own log handlers
    would swallow a third-party log line in process)."""
    env = {**os.environ, "NEO4J_PASSWORD": "not-used", "PYTHONPATH": str(REPO)}
    args = ["index", "--dataset", "neo4j", "--uri", uri, "--index-dir", str(tmp_path / "ix")]
    code = f"import sys; sys.argv = ['skb', *{args!r}]; from agent.cli import app; app()"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, done.stderr


@pytest.mark.parametrize("uri", ["http://127.0.0.1:7474", "https://127.0.0.1:7473", "127.0.0.1:7687"])
def test_a_non_bolt_uri_names_the_bolt_schemes(uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, stderr = _index(uri, tmp_path, monkeypatch)
    assert code == 2, stderr
    assert "Traceback" not in stderr and "bolt://" in stderr and "neo4j://" in stderr
    assert stderr.lstrip().startswith("error:")


def test_a_garbage_bolt_peer_prints_only_our_message(garbage_bolt_peer: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, stderr = _index(garbage_bolt_peer, tmp_path, monkeypatch)
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("[load]")]
    assert lines and lines[0].startswith("error:"), stderr
    assert "cannot reach the Bolt server" in stderr and "[#" not in stderr and "Traceback" not in stderr
