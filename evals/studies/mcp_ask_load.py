"""Concurrent `ask` load against `skb mcp --transport http`: the server's memory per round.

    python -m evals.studies.mcp_ask_load --index-dir .skb/hpo --clients 16 --calls 25 --rounds 6
    python -m evals.studies.mcp_ask_load --index-dir .skb/hpo --server-env SKB_TRACING=0      # tracing off, to compare

Why: a long-running server must plateau. With tracing on, the tracer's writer queue once grew
without bound under concurrent questions (RSS 0.4 -> 4 GB in six rounds of 16 x 25 calls). Each
round runs ``clients`` MCP sessions at once, each calling ``ask`` ``calls`` times on questions built
from the index's node names (`evals.studies.load_test.make_questions`); after each round the report records
the server's RSS, errors, latency and the trace database's size. Bounded in time (--max-seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

from evals.studies.mcp_flood import _free_port, _wait_for_port, rss_mb


class Round(BaseModel):
    round: int
    calls: int
    errors: int
    seconds: float
    p50_ms: float
    p95_ms: float
    rss_mb: float | None
    trace_db_mb: float | None


class AskLoadReport(BaseModel):
    clients: int
    calls_per_client: int
    server_env: dict[str, str]
    rss_start_mb: float | None
    rounds: list[Round]
    rss_last_over_first_round: float | None
    first_error: str | None = None


def _questions(index_dir: Path, n: int) -> list[str]:
    from evals.studies.load_test import make_questions
    from graphs.bundle import IndexBundle

    with IndexBundle.open(index_dir) as bundle:
        return make_questions(bundle, n)


async def _client(url: str, questions: list[str], latencies: list[float], errors: list[str]) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(timeout=300) as http, Client(streamable_http_client(url, http_client=http)) as client:
        for question in questions:
            t0 = time.perf_counter()
            try:
                result = await client.call_tool("ask", {"question": question})
                if result.is_error:
                    errors.append(str(result.content)[:300])
            except Exception as exc:  # noqa: BLE001 -- counted, the round goes on
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            latencies.append((time.perf_counter() - t0) * 1000)


async def _round(url: str, batches: list[list[str]]) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    await asyncio.gather(*(_client(url, batch, latencies, errors) for batch in batches))
    return latencies, errors


def _size_mb(path: Path) -> float | None:
    sizes = [p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists()]
    return round(sum(sizes) / 1e6, 1) if sizes else None


def main(
    index_dir: Annotated[Path, typer.Option("--index-dir", help="index to serve (its traces.sqlite grows: use a copy)")],
    clients: Annotated[int, typer.Option("--clients", min=1, max=256)] = 16,
    calls: Annotated[int, typer.Option("--calls", min=1, max=10_000, help="ask calls per client per round")] = 25,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=100)] = 6,
    max_seconds: Annotated[float, typer.Option("--max-seconds", min=10, max=86_400)] = 3600,
    server_env: Annotated[list[str] | None, typer.Option("--server-env", help="KEY=VALUE for the server")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="also write the JSON report here")] = None,
) -> None:
    """Run rounds of concurrent `ask` calls and report the server's RSS after each."""
    env_extra = dict(item.split("=", 1) for item in server_env or [])
    questions = _questions(index_dir, clients * calls * rounds)
    port = _free_port()
    cmd = [sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(index_dir), "--transport", "http",
           "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env_extra})
    url = f"http://127.0.0.1:{port}/mcp"
    report_rounds: list[Round] = []
    first_error: str | None = None
    deadline = time.monotonic() + max_seconds
    try:
        _wait_for_port(port, proc)
        start = rss_mb(proc.pid)
        trace_db = Path(env_extra.get("SKB_TRACE_DB") or index_dir / "traces.sqlite")
        for r in range(rounds):
            if time.monotonic() > deadline:
                break
            chunk = questions[r * clients * calls : (r + 1) * clients * calls]
            batches = [chunk[i * calls : (i + 1) * calls] for i in range(clients)]
            t0 = time.perf_counter()
            latencies, errors = asyncio.run(_round(url, batches))
            ordered = sorted(latencies) or [0.0]
            first_error = first_error or (errors[0] if errors else None)
            report_rounds.append(Round(
                round=r + 1, calls=len(latencies), errors=len(errors), seconds=round(time.perf_counter() - t0, 1),
                p50_ms=round(ordered[len(ordered) // 2], 1),
                p95_ms=round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 1),
                rss_mb=rss_mb(proc.pid), trace_db_mb=_size_mb(trace_db),
            ))  # fmt: skip
            typer.echo(report_rounds[-1].model_dump_json(), err=True)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    first, last = (report_rounds[0].rss_mb, report_rounds[-1].rss_mb) if report_rounds else (None, None)
    report = AskLoadReport(
        clients=clients, calls_per_client=calls, server_env=env_extra, rss_start_mb=start if report_rounds else None,
        rounds=report_rounds, rss_last_over_first_round=round(last / first, 2) if first and last else None,
        first_error=first_error,
    )  # fmt: skip
    text = json.dumps(report.model_dump(mode="json"), indent=2)
    if out is not None:
        out.write_text(text + "\n")
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
