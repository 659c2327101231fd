"""Initialize flood against `skb mcp --transport http`: what many opened-and-abandoned sessions cost.

    python -m evals.studies.mcp_flood --index-dir .skb/hpo --requests 10050 --concurrency 50
    python -m evals.studies.mcp_flood --url http://127.0.0.1:8765/mcp --pid 1234      # a server already running

Why: every `initialize` without a session id opens a stateful session that the server keeps until the
client deletes it or it expires. A client that never comes back (or an attacker) can fill the session
table. This sends N initialize requests from 127.0.0.1 only, then measures what a new client sees
(status, latency of initialize and of one tool call) and the server's resident memory before, right
after, and after an optional wait. Bounded in count (--requests) and time (--max-seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import httpx2
import typer
from pydantic import BaseModel

_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "0"}},
}
_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Probe(BaseModel):
    """What a new, well-behaved client sees at one moment."""

    initialize_status: int
    initialize_ms: float
    tool_call_ok: bool
    tool_call_ms: float | None
    rss_mb: float | None


class FloodReport(BaseModel):
    requests: int
    concurrency: int
    seconds: float
    statuses: dict[str, int]
    initialize_p50_ms: float
    initialize_p95_ms: float
    initialize_max_ms: float
    server_args: list[str]
    before: Probe
    after_flood: Probe
    after_wait: Probe | None = None
    wait_seconds: float = 0.0


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process (Linux /proc), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def _probe(url: str, pid: int | None, headers: dict[str, str]) -> Probe:
    """Initialize a fresh session, then call one tool through the official client (same credentials)."""
    async with httpx2.AsyncClient(timeout=60) as http:
        t0 = time.perf_counter()
        r = await http.post(url, json=_INIT, headers={**_HEADERS, **headers})
        init_ms = (time.perf_counter() - t0) * 1000
        session = r.headers.get("mcp-session-id")
        if session:
            await http.delete(url, headers={**headers, "mcp-session-id": session})
    ok, tool_ms = False, None
    if r.status_code == 200:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        t0 = time.perf_counter()
        try:
            async with httpx2.AsyncClient(headers=headers, timeout=60) as client_http:
                transport = streamable_http_client(url, http_client=client_http)
                async with Client(transport) as client:
                    result = await client.call_tool("semantic_search", {"text": "abnormal heart", "k": 3})
                    ok = not result.is_error
        except Exception:  # noqa: BLE001 -- the probe reports failure rather than stopping the benchmark
            ok = False
        tool_ms = (time.perf_counter() - t0) * 1000
    return Probe(
        initialize_status=r.status_code,
        initialize_ms=round(init_ms, 1),
        tool_call_ok=ok,
        tool_call_ms=None if tool_ms is None else round(tool_ms, 1),
        rss_mb=None if pid is None else round(rss_mb(pid) or 0.0, 1),
    )


async def _flood(
    url: str, n: int, concurrency: int, max_seconds: float, headers: dict[str, str]
) -> tuple[Counter[str], list[float]]:
    """Status counts and per-request latencies (ms) of ``n`` initialize requests, ``concurrency`` at a time."""
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    deadline = time.monotonic() + max_seconds
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:

        async def worker() -> None:
            while time.monotonic() < deadline:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                try:
                    r = await http.post(url, json=_INIT, headers={**_HEADERS, **headers})
                    statuses[str(r.status_code)] += 1
                except httpx2.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                latencies.append((time.perf_counter() - t0) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses, latencies


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start") from None
            time.sleep(0.3)


def main(
    index_dir: Annotated[Path | None, typer.Option("--index-dir", help="start a server on this index")] = None,
    url: Annotated[str | None, typer.Option("--url", help="flood a running server instead (127.0.0.1 only)")] = None,
    pid: Annotated[int | None, typer.Option("--pid", help="that server's pid, for its memory")] = None,
    requests: Annotated[int, typer.Option("--requests", min=1, max=50_000)] = 10_050,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=500)] = 50,
    max_seconds: Annotated[float, typer.Option("--max-seconds", min=1, max=900)] = 300,
    wait: Annotated[float, typer.Option("--wait", min=0, max=3600, help="then wait, probe again")] = 0.0,
    server_arg: Annotated[
        list[str] | None, typer.Option("--server-arg", help="extra `skb mcp` argument (repeatable)")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="also write the JSON report here")] = None,
) -> None:
    """Flood with initialize requests and report what a new client sees and the server's memory."""
    token = os.environ.get("SKB_MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    extra = list(server_arg or [])
    proc: subprocess.Popen[bytes] | None = None
    if url is None:
        if index_dir is None:
            raise typer.BadParameter("give --index-dir (start a server) or --url (use a running one)")
        port = _free_port()
        cmd = [sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(index_dir), "--transport", "http",
               "--port", str(port), "--no-ask", *extra]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_port(port, proc)
        url, pid = f"http://127.0.0.1:{port}/mcp", proc.pid
    host = httpx2.URL(url).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise typer.BadParameter(f"--url must be on this machine (127.0.0.1), not {host}")
    try:
        asyncio.run(_probe(url, pid, headers))  # warm-up: the embedder's first call loads the model
        before = asyncio.run(_probe(url, pid, headers))
        t0 = time.perf_counter()
        statuses, latencies = asyncio.run(_flood(url, requests, concurrency, max_seconds, headers))
        seconds = time.perf_counter() - t0
        after = asyncio.run(_probe(url, pid, headers))
        later = None
        if wait:
            time.sleep(wait)
            later = asyncio.run(_probe(url, pid, headers))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    ordered = sorted(latencies) or [0.0]
    report = FloodReport(
        requests=requests, concurrency=concurrency, seconds=round(seconds, 1), statuses=dict(statuses),
        initialize_p50_ms=round(ordered[len(ordered) // 2], 1),
        initialize_p95_ms=round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 1),
        initialize_max_ms=round(ordered[-1], 1),
        server_args=extra, before=before, after_flood=after, after_wait=later, wait_seconds=wait,
    )  # fmt: skip
    text = json.dumps(report.model_dump(mode="json"), indent=2)
    if out is not None:
        out.write_text(text + "\n")
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
