"""MCP over HTTP under abuse: session flood, idle expiry, bearer token.

Everything listens on 127.0.0.1 only and every flood is small and bounded. The server is the real
one: `python -m agent.serving.mcp` as a user starts it, or the same ASGI app (`build_http_app`) under
uvicorn in a thread when a test needs small limits; clients are raw HTTP (what an attacker sends)
and the official `mcp` client (what a user runs).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.paths import REPO

PROTOCOL = "2025-06-18"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}
POST_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
DEFAULT_MAX_SESSIONS = 128  # the documented default of `skb mcp --max-sessions`
TOKEN = "t0k3n-" + "x" * 24 + "-Zq9"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SKB_MCP_TOKEN"}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
            "SKB_TRACE_DB": str(tmp / "traces.sqlite"),
            **extra,
        }
    )
    return env


@contextmanager
def _cli_server(
    index_dir: Path, tmp: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Path]]:
    """`python -m agent.serving.mcp --transport http` on a free loopback port; yields (url, log file)."""
    port = _free_port()
    log_path = tmp / f"server-{port}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(index_dir), "--transport", "http",
             "--port", str(port), "--no-ask", *args],
            env=env or _env(tmp), cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, "MCP HTTP server did not start"
                    time.sleep(0.3)
            yield f"http://127.0.0.1:{port}/mcp", log_path
        finally:
            proc.terminate()
            proc.wait(timeout=60)


@contextmanager
def _app_server(hpo_bundle: Any, **limits: Any) -> Iterator[tuple[str, Any]]:
    """`build_http_app` (the app `skb mcp` serves) under uvicorn in a thread; yields (url, session manager)."""
    import uvicorn

    from agent.serving.mcp import build_http_app, build_server
    from agent.serving.toolkit import SKBToolkit

    app = build_http_app(build_server(SKBToolkit(hpo_bundle, callbacks=[], include_ask=False)), **limits)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", app.state.session_manager
    finally:
        server.should_exit = True
        thread.join(timeout=30)


async def _initialize(http: httpx2.AsyncClient, url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    return await http.post(url, json=INIT, headers={**POST_HEADERS, **(headers or {})})


async def _ping(http: httpx2.AsyncClient, url: str, session: str) -> int:
    """Status of a request in ``session``: 200 while it is open, 404 once it was evicted or expired."""
    r = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
        headers={**POST_HEADERS, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL},
    )
    return r.status_code


async def _tool_call(url: str, headers: dict[str, str] | None = None) -> Any:
    """A user's client: initialize, call semantic_search, close."""
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await client.call_tool("semantic_search", {"text": "aortic root aneurysm", "k": 2})


@asynccontextmanager
async def _held_get_stream(http: httpx2.AsyncClient, url: str, session: str) -> AsyncIterator[None]:
    """Keep the session's standalone SSE stream open: a request in flight, so the session is busy."""
    headers = {"Accept": "text/event-stream", "mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    async with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        yield


# -- sessions ---------------------------------------------------------------------------------------


@pytest.mark.integration
def test_initialize_flood_keeps_the_session_table_bounded_and_new_clients_served(
    hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path
) -> None:
    """The server as users start it: a flood of abandoned sessions evicts the oldest idle ones instead
    of filling the table (before: up to 10,000 kept for 30 minutes, then 503 for everyone)."""
    flood = DEFAULT_MAX_SESSIONS + 32

    async def main() -> tuple[list[int], list[int], Any]:
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = [await _initialize(http, url) for _ in range(flood)]
            sessions = [r.headers["mcp-session-id"] for r in opened]
            alive = [await _ping(http, url, s) for s in sessions]
        return [r.status_code for r in opened], alive, await _tool_call(url)

    with _cli_server(hpo_index_dir, tmp_path) as (url, _):
        statuses, alive, hits = asyncio.run(main())
    assert statuses == [200] * flood  # no client is refused
    assert alive.count(200) <= DEFAULT_MAX_SESSIONS, f"{alive.count(200)} sessions open"
    assert alive[:32] == [404] * 32  # the least recently used went first
    assert alive[-DEFAULT_MAX_SESSIONS + 8 :] == [200] * (DEFAULT_MAX_SESSIONS - 8)  # recent ones are kept
    assert hits.is_error is False, hits.content
    assert hits.structured_content["hits"][0]["key"] == "HP:0002616"


def test_eviction_spares_busy_sessions_and_refuses_only_when_all_are_busy(hpo_bundle: Any) -> None:
    from agent.serving.mcp import BoundedSessionManager

    async def main(url: str, manager: BoundedSessionManager) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            a = (await _initialize(http, url)).headers["mcp-session-id"]
            b = (await _initialize(http, url)).headers["mcp-session-id"]
            async with _held_get_stream(http, url, a):
                async with _held_get_stream(http, url, b):
                    refused = await _initialize(http, url)
                    assert refused.status_code == 503, refused.text  # both busy: nothing to evict
                    assert manager.open_sessions == 2
                # b's stream is closed (idle as soon as the server sees the disconnect): the next client
                # evicts b, never the busy a
                deadline = time.monotonic() + 20
                while (c := await _initialize(http, url)).status_code == 503:
                    assert time.monotonic() < deadline, "closing b's stream never made it idle"
                    await asyncio.sleep(0.2)
                assert c.status_code == 200
                assert await _ping(http, url, b) == 404
                assert await _ping(http, url, a) == 200
            assert manager.open_sessions == 2 and manager.evicted == 1

    with _app_server(hpo_bundle, max_sessions=2) as (url, manager):
        asyncio.run(main(url, manager))


def test_idle_sessions_expire(hpo_bundle: Any) -> None:
    async def main(url: str, manager: Any) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            session = (await _initialize(http, url)).headers["mcp-session-id"]
            assert await _ping(http, url, session) == 200
            deadline = time.monotonic() + 30
            while await _ping(http, url, session) != 404:  # each ping restarts the 1 s countdown
                assert time.monotonic() < deadline, "session never expired"
                await asyncio.sleep(1.5)
            assert manager.open_sessions == 0 and manager.evicted == 0  # expired, not evicted
            assert (await _initialize(http, url)).status_code == 200

    with _app_server(hpo_bundle, session_idle_timeout=1.0) as (url, manager):
        asyncio.run(main(url, manager))


def test_http_defaults_are_the_documented_ones() -> None:
    from agent.serving.mcp import DEFAULT_MAX_SESSIONS as default_max
    from agent.serving.mcp import DEFAULT_SESSION_IDLE_TIMEOUT_S, MIN_TOKEN_CHARS, TOKEN_ENV

    assert (default_max, DEFAULT_SESSION_IDLE_TIMEOUT_S) == (DEFAULT_MAX_SESSIONS, 600.0)
    assert (TOKEN_ENV, MIN_TOKEN_CHARS) == ("SKB_MCP_TOKEN", 16)


# -- bearer token -------------------------------------------------------------------------------------


def _mcp_cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m agent.serving.mcp` expected to refuse before opening any index (the dir does not exist)."""
    return subprocess.run(
        [sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(tmp / "no-index"), *args],
        env=_env(tmp, **env), cwd=str(REPO), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _mcp_refusal(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The same command's options read in this process (it refuses before it opens anything, so starting an
    interpreter per case only costs seconds); ``_mcp_cli`` runs one case as its own process."""
    import typer
    from typer.testing import CliRunner

    from agent.serving.mcp import mcp_command

    app = typer.Typer()
    app.command()(mcp_command)
    environ = {k: v for k, v in _env(tmp, **env).items() if k != "PYTHONPATH"}
    unset: dict[str, str | None] = {"SKB_MCP_TOKEN": None} if "SKB_MCP_TOKEN" not in env else {}
    result = CliRunner().invoke(app, ["--index-dir", str(tmp / "no-index"), *args], env={**environ, **unset})
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_binding_beyond_localhost_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.10", "myhost.example"):
        run = _mcp_cli if host == "0.0.0.0" else _mcp_refusal
        result = run(tmp_path, "--transport", "http", "--host", host)
        assert result.returncode == 2, (host, result.stderr)
        assert f"--host {host} would expose the tools" in result.stderr and "SKB_MCP_TOKEN" in result.stderr
        assert "--token-file" in result.stderr and "no index" not in result.stderr


def test_bad_token_sources_are_clear_errors_that_never_echo_the_token(tmp_path: Path) -> None:
    short = "abc123"
    result = _mcp_refusal(tmp_path, "--transport", "http", "--host", "0.0.0.0", SKB_MCP_TOKEN=short)
    assert result.returncode == 2 and "too short" in result.stderr and short not in result.stderr
    empty = _mcp_refusal(tmp_path, "--transport", "http", SKB_MCP_TOKEN="")
    assert empty.returncode == 2 and "$SKB_MCP_TOKEN is empty" in empty.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    both = _mcp_refusal(tmp_path, "--transport", "http", "--token-file", str(token_file), SKB_MCP_TOKEN=TOKEN)
    assert both.returncode == 2 and "give the token one way" in both.stderr and TOKEN not in both.stderr
    missing = _mcp_refusal(tmp_path, "--transport", "http", "--token-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read --token-file" in missing.stderr
    spaced = tmp_path / "spaced"
    spaced.write_text("correct horse battery staple\n")
    bad_chars = _mcp_refusal(tmp_path, "--transport", "http", "--token-file", str(spaced))
    assert bad_chars.returncode == 2 and "printable ASCII without spaces" in bad_chars.stderr
    assert "horse" not in bad_chars.stderr
    stdio = _mcp_refusal(tmp_path, "--token-file", str(token_file))
    assert stdio.returncode == 2 and "--token-file applies to --transport http only" in stdio.stderr


@pytest.mark.integration
def test_with_a_token_every_request_without_it_gets_401(hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)

    async def main(url: str) -> tuple[list[httpx2.Response], Any, Any]:
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = [
                await _initialize(http, url),
                await _initialize(http, url, {"Authorization": f"Bearer {TOKEN}x"}),
                await _initialize(http, url, {"Authorization": f"Bearer {TOKEN[:-1]}"}),
                await _initialize(http, url, {"Authorization": f"Basic {TOKEN}"}),
                await _initialize(http, url, {"Authorization": TOKEN}),
                await http.get(url, headers={"Accept": "text/event-stream"}),
                await http.delete(url, headers={"mcp-session-id": "0" * 32}),
                await http.get(url.removesuffix("/mcp") + "/anything-else"),
            ]
            ok = await _initialize(http, url, {"Authorization": f"Bearer {TOKEN}"})
            session = ok.headers["mcp-session-id"]
            # a session id alone is no credential
            stolen = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                headers={**POST_HEADERS, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL},
            )
            refused.append(stolen)
        without = None
        try:
            await _tool_call(url)
        except Exception as exc:  # noqa: BLE001 -- the official client must fail without the token
            without = exc
        return refused, without, await _tool_call(url, {"Authorization": f"Bearer {TOKEN}"})

    with _cli_server(hpo_index_dir, tmp_path, "--token-file", str(token_file)) as (url, log_path):
        refused, without, hits = asyncio.run(main(url))
        log = log_path.read_text()
    for r in refused:
        assert r.status_code == 401, (r.request.method, r.request.headers.get("authorization"), r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in r.text
    assert without is not None
    assert hits.is_error is False, hits.content
    assert hits.structured_content["hits"][0]["key"] == "HP:0002616"
    assert "bearer token required" in log and TOKEN not in log


def test_token_from_the_environment(tmp_path: Path) -> None:
    from agent.serving.mcp import load_token

    assert load_token(None, {}) is None
    assert load_token(None, {"SKB_MCP_TOKEN": f"  {TOKEN}\n"}) == TOKEN
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert load_token(token_file, {}) == TOKEN
