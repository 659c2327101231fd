"""The FalkorDB child dies with its owner, however the owner ends (issue 15, item 6).

A SIGTERM to `skb mcp` (stdio and HTTP) used to leave the redis-server child running with
parent pid 1: the stdio server dies by the default action (no atexit), the HTTP server's
uvicorn re-raises SIGTERM after its graceful shutdown, and the store is opened from a worker
thread where no signal handler can be set. The children are looked up through /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from graphs.store.falkordb_server import STATE_FILE, pid_alive
from tests.paths import REPO
from tests.reliability_support import copy_index

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")]

ROOT = REPO


def _servers_of(data_dir: Path) -> list[int]:
    """Live redis-server processes working in `data_dir`, whoever their parent is (orphans included)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if "redis" not in stat[stat.index("(") + 1 : stat.rindex(")")]:
                continue
            if (entry / "cwd").resolve(strict=True) == data_dir.resolve() and pid_alive(int(entry.name)):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return sorted(found)


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _wait_until_gone(data_dir: Path, deadline_s: float = 30.0) -> list[int]:
    end = time.monotonic() + deadline_s
    while (left := _servers_of(data_dir)) and time.monotonic() < end:
        time.sleep(0.05)
    return left


def _kill_all(pids: list[int]) -> None:
    """Never leave a server behind when a test fails."""
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _env() -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def _skb() -> list[str]:
    """The `skb` console script's entry point, run from this checkout (the installed script may not be)."""
    return [sys.executable, "-c", "from agent.cli.main import app; app()"]


@pytest.fixture()
def index(hpo_index_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy: a server another test started for the shared index would be attached, not owned."""
    copy = copy_index(hpo_index_dir, tmp_path / "index")
    yield copy
    _kill_all(_servers_of(copy / "falkordb"))


def _send(stream: IO[str], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def test_sigterm_to_skb_mcp_stdio_stops_its_falkordb_child(index: Path) -> None:
    proc = subprocess.Popen(
        [*_skb(), "mcp", "--index-dir", str(index), "--no-ask"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=_env(),
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None
        _send(proc.stdin, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})  # fmt: skip
        assert json.loads(proc.stdout.readline())["id"] == 1
        _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(proc.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "cypher", "arguments": {"query": "MATCH (n) RETURN count(n) AS c"}}})  # fmt: skip
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 2 and not reply["result"].get("isError"), reply
        servers = _servers_of(index / "falkordb")
        assert len(servers) == 1 and _parent_of(servers[0]) == proc.pid  # the store started its own child
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM
        assert _wait_until_gone(index / "falkordb") == [], "the FalkorDB child outlived `skb mcp` (stdio)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_to_skb_mcp_http_stops_its_falkordb_child(index: Path) -> None:
    from mcp import Client

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [*_skb(), "mcp", "--index-dir", str(index), "--transport", "http", "--port", str(port), "--no-ask"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "MCP HTTP server did not start"
                time.sleep(0.2)

        async def call() -> Any:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return await client.call_tool("cypher", {"query": "MATCH (n) RETURN count(n) AS c"})

        assert not asyncio.run(call()).is_error
        servers = _servers_of(index / "falkordb")
        assert len(servers) == 1 and _parent_of(servers[0]) == proc.pid
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert _wait_until_gone(index / "falkordb") == [], "the FalkorDB child outlived `skb mcp` (http)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _owner(tmp_path: Path, body: str) -> tuple[subprocess.Popen[str], int]:
    """A Python process that starts a FalkorDBServer for tmp_path as `body` says and prints its pid."""
    script = (
        "import signal, sys, threading, time\n"
        "from pathlib import Path\n"
        "from graphs.store.falkordb_server import FalkorDBServer\n"
        "data = Path(sys.argv[1])\n" + body + "print(srv.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=_env()
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_a_server_started_from_a_finished_thread_lives_on_then_dies_with_a_killed_owner(tmp_path: Path) -> None:
    """Parent-death signals follow the forking *thread*: a worker thread that ends must not take
    the server with it, and a SIGKILLed owner (no handler, no atexit) must."""
    proc, server_pid = _owner(
        tmp_path,
        "box = {}\n"
        "worker = threading.Thread(target=lambda: box.update(srv=FalkorDBServer(data).start()))\n"
        "worker.start(); worker.join()\n"
        "srv = box['srv']\n"
        "time.sleep(0.5)\n"  # give a wrongly tied parent-death signal time to arrive
        "assert srv.is_running(), 'the server died with the thread that started it'\n",
    )
    try:
        assert pid_alive(server_pid)
        proc.kill()
        proc.wait(timeout=30)
        assert _wait_until_gone(tmp_path) == [], "the FalkorDB child outlived its SIGKILLed owner"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_all([server_pid])


def test_sigterm_runs_the_applications_own_handler_after_stopping_the_server(tmp_path: Path) -> None:
    """Our hook chains to a handler the application set before the server started (here one that
    ends the process at once, so no atexit handler could stop the server afterwards)."""
    proc, server_pid = _owner(
        tmp_path,
        "import os\n"
        "def graceful(signum, frame):\n"
        "    print('graceful', flush=True)\n"
        "    os._exit(0)\n"
        "signal.signal(signal.SIGTERM, graceful)\n"
        "srv = FalkorDBServer(data).start()\n",
    )
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "graceful"
        assert _wait_until_gone(tmp_path) == []
        assert not (tmp_path / STATE_FILE).exists()  # stopped cleanly by our hook, not just killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_all([server_pid])
