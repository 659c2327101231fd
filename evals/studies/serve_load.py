"""Load test of `skb serve`: questions per second, latency and memory per replica, for 1 and 2 replicas.

    python -m evals.studies.serve_load --index-dir .skb/hpo                       # 1 and 2 replicas, 1..32 clients
    python -m evals.studies.serve_load --index-dir .skb/hpo --replicas 1 --concurrency 1,16 --seconds 5
    python -m evals.studies.serve_load --index-dir .skb/hpo --same-answers bench/hpo_cases_dev.csv --same-limit 200

Why: replicas exist to use more cores while sharing what can be shared. For each replica count this deploys
`skb serve`'s application (`agent.serving.replicas`) on a local Ray, and for each concurrency runs that many
clients, each sending ``POST /ask`` back to back for ``--seconds`` (questions from the index's node names:
`evals.studies.load_test.make_questions`, after a warm-up). It reports throughput, p50/p95/p99 latency and
errors per level, and each replica's RSS and PSS from ``/proc/PID/smaps_rollup`` (PSS divides shared pages
among the processes that map them: the memory-mapped index counts once across replicas), and the graph
server's. The summary gives the throughput of the most replicas against one at each concurrency and the sum
of their PSS against one replica's. With ``--same-answers BENCH`` it also asks the benchmark's questions through
``POST /ask`` and the MCP ``ask`` tool of the most replicas and counts those whose top k differs from `ask()` in
this process. Writes ``serve-load.json`` and ``README.md`` to ``--out``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

from evals.studies import process_cpu
from evals.studies.load_test import _percentile, make_questions

DEFAULT_OUT = Path("evals/reports/serve")


class Level(BaseModel):
    replicas: int
    concurrency: int
    seconds: float
    calls: int
    errors: int
    qps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    first_error: str | None = None
    cpu_ms_per_question: dict[str, float] = {}
    """CPU milliseconds per answered question by role (replicas, Ray proxy, ..., load generator): `process_cpu`."""
    cores_busy: float | None = None
    """CPU seconds of every process over the level's wall seconds: how many cores the level kept busy."""


class Memory(BaseModel):
    """One process's memory in MB (``/proc/PID/smaps_rollup``)."""

    pid: int
    rss_mb: float
    pss_mb: float
    pss_anon_mb: float
    pss_file_mb: float


class SameAnswers(BaseModel):
    """Questions whose top ``k`` over `skb serve` (``POST /ask``, the MCP ``ask`` tool) equals `ask()`'s here."""

    bench: str
    k: int
    questions: int
    ask_same: int
    mcp_same: int
    first_difference: str | None = None


class ServeLoadReport(BaseModel):
    index_dir: str
    cpus: int
    load_before: list[float]
    seconds_per_level: float
    tracing: bool
    levels: list[Level]
    replica_memory: dict[str, list[Memory]]
    graph_server: Memory | None
    speedup: dict[str, float]
    """Questions per second of the most replicas over one, by concurrency."""
    pss_sum_over_one: float | None
    """Sum of the replicas' PSS with the most replicas over one replica's PSS."""
    same_answers: SameAnswers | None = None


def memory_of(pid: int) -> Memory | None:
    """RSS and PSS of ``pid`` from ``/proc/PID/smaps_rollup`` (None where it cannot be read)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kb: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            kb[name.strip()] = float(parts[0])
    mb = lambda name: round(kb.get(name, 0.0) / 1024, 1)
    return Memory(pid=pid, rss_mb=mb("Rss"), pss_mb=mb("Pss"), pss_anon_mb=mb("Pss_Anon"), pss_file_mb=mb("Pss_File"))


async def _level(url: str, headers: dict[str, str], questions: list[str], clients: int, seconds: float) -> Level:
    import httpx2

    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx2.AsyncClient(timeout=120, headers=headers, limits=limits) as http:

        async def client(n: int) -> None:
            i = n
            while time.monotonic() < deadline:
                question = questions[i % len(questions)]
                i += clients
                t0 = time.perf_counter()
                try:
                    r = await http.post(url + "/ask", json={"question": question})
                    if r.status_code != 200:
                        errors.append(f"{r.status_code}: {r.text[:200]}")
                        continue
                except Exception as exc:  # noqa: BLE001 -- counted, the level goes on
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(clients)))
        elapsed = time.perf_counter() - t0
    ordered = sorted(latencies)
    return Level(
        replicas=0, concurrency=clients, seconds=round(elapsed, 2), calls=len(latencies) + len(errors),
        errors=len(errors), qps=round(len(latencies) / elapsed, 2), p50_ms=round(_percentile(ordered, 50), 1),
        p95_ms=round(_percentile(ordered, 95), 1), p99_ms=round(_percentile(ordered, 99), 1),
        max_ms=round(ordered[-1], 1) if ordered else 0.0, first_error=errors[0] if errors else None,
    )  # fmt: skip


async def _served_top(url: str, questions: list[str], k: int) -> tuple[list[list[str]], list[list[str]]]:
    """Top ``k`` keys of each question from ``POST /ask`` and from the MCP ``ask`` tool."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    over_http: list[list[str]] = []
    over_mcp: list[list[str]] = []
    async with httpx2.AsyncClient(timeout=120) as http:
        for question in questions:
            r = await http.post(url + "/ask", json={"question": question, "k": k})
            over_http.append([c["key"] for c in r.json().get("context", [])][:k] if r.status_code == 200 else [])
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            for question in questions:
                result = await client.call_tool("ask", {"question": question, "k": k})
                context = (result.structured_content or {}).get("context", []) if not result.is_error else []
                over_mcp.append([c["key"] for c in context][:k])
    return over_http, over_mcp


def same_answers(url: str, index_dir: Path, bench: Path, limit: int, k: int = 20) -> SameAnswers:
    from agent.api import ask
    from agent.config import AgentConfig
    from evals.bench import load_bench
    from graphs.bundle import IndexBundle

    questions = [q.query for q in load_bench(bench, limit=limit).questions]
    over_http, over_mcp = asyncio.run(_served_top(url, questions, k))
    ask_same = mcp_same = 0
    first: str | None = None
    with IndexBundle.open(index_dir) as bundle:
        for question, http_keys, mcp_keys in zip(questions, over_http, over_mcp, strict=True):
            local = [c.key for c in ask(question, bundle=bundle, config=AgentConfig(k=k)).context][:k]
            ask_same += http_keys == local
            mcp_same += mcp_keys == local
            if first is None and (http_keys != local or mcp_keys != local):
                first = f"{question[:120]}: ask {local[:5]} /ask {http_keys[:5]} mcp {mcp_keys[:5]}"
    return SameAnswers(bench=str(bench), k=k, questions=len(questions), ask_same=ask_same, mcp_same=mcp_same,
                       first_difference=first)


def run_study(
    index_dir: Path,
    *,
    replica_counts: list[int],
    concurrency: list[int],
    seconds: float,
    port: int,
    replica_cpus: float,
    warmup: int = 8,
    bench: Path | None = None,
    bench_limit: int = 200,
) -> ServeLoadReport:
    import ray
    from ray import serve

    from agent.serving.replicas import Scale, init_ray, replica_pids, start
    from graphs.bundle import IndexBundle

    with IndexBundle.open(index_dir) as bundle:
        questions = make_questions(bundle, 2000)
    load_before = [round(x, 2) for x in os.getloadavg()]
    if not ray.is_initialized():
        init_ray(include_dashboard=False)  # the replicas' machine, not the dashboard's
    levels: list[Level] = []
    memory: dict[str, list[Memory]] = {}
    graph: Memory | None = None
    same: SameAnswers | None = None
    try:
        for count in replica_counts:
            served = start(index_dir, scale=Scale(replicas=count), port=port, replica_cpus=replica_cpus)
            try:
                asyncio.run(_level(served.url, {}, questions[:warmup], min(count * 2, warmup), 1.0))  # warm caches
                for clients in concurrency:
                    before = process_cpu.snapshot()
                    level = asyncio.run(_level(served.url, {}, questions, clients, seconds))
                    used = process_cpu.cpu_by_role(before, process_cpu.snapshot())
                    answered = max(1, level.calls - level.errors)
                    level.cpu_ms_per_question = {role: round(s * 1000 / answered, 1) for role, s in used.items()}
                    level.cores_busy = round(sum(used.values()) / level.seconds, 2) if used else None
                    level.replicas = count
                    levels.append(level)
                    typer.echo(level.model_dump_json(), err=True)
                memory[str(count)] = [m for pid in replica_pids() if (m := memory_of(pid)) is not None]
                server = served.graph_server
                if server is not None and server.pid is not None:
                    graph = memory_of(server.pid)
                if bench is not None and count == max(replica_counts):
                    same = same_answers(served.url, index_dir, bench, bench_limit)
            finally:
                served.stop()
    finally:
        serve.shutdown()
    most, one = max(replica_counts), min(replica_counts)
    speedup: dict[str, float] = {}
    for clients in concurrency:
        by = {lv.replicas: lv.qps for lv in levels if lv.concurrency == clients}
        if most != one and by.get(one):
            speedup[str(clients)] = round(by.get(most, 0.0) / by[one], 2)
    pss_one = sum(m.pss_mb for m in memory.get(str(one), []))
    pss_most = sum(m.pss_mb for m in memory.get(str(most), []))
    from agent.tracing.tracer import tracing_enabled

    return ServeLoadReport(
        index_dir=str(index_dir), cpus=os.cpu_count() or 0, load_before=load_before, seconds_per_level=seconds,
        tracing=tracing_enabled(), levels=levels, replica_memory=memory, graph_server=graph, speedup=speedup,
        pss_sum_over_one=round(pss_most / pss_one, 2) if pss_one and most != one else None, same_answers=same,
    )  # fmt: skip


def markdown(report: ServeLoadReport) -> str:
    lines = [
        "# `skb serve` load test",
        "",
        (f"Index `{report.index_dir}`, {report.cpus} CPUs, load average before {report.load_before}, "
        f"{report.seconds_per_level:g} s per level, tracing {'on' if report.tracing else 'off'}. "
        "Written by `python -m evals.studies.serve_load`."),
        "",
        "| replicas | clients | questions/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv in report.levels:
        lines.append(f"| {lv.replicas} | {lv.concurrency} | {lv.qps:.1f} | {lv.p50_ms:.0f} | {lv.p95_ms:.0f} | "
                     f"{lv.p99_ms:.0f} | {lv.errors} |")
    roles = list(dict.fromkeys(role for lv in report.levels for role in lv.cpu_ms_per_question))
    if roles:
        lines += ["", ("CPU milliseconds per answered question, by process (`/proc/PID/stat`, the whole level), and "
                  "the cores the level kept busy:"), "",
                  "| replicas | clients | " + " | ".join(roles) + " | cores busy |",
                  "|---:|---:|" + "---:|" * (len(roles) + 1)]
        for lv in report.levels:
            cells = " | ".join(f"{lv.cpu_ms_per_question.get(r, 0.0):.1f}" for r in roles)
            lines.append(f"| {lv.replicas} | {lv.concurrency} | {cells} | {lv.cores_busy or 0:.2f} |")
    lines += ["", "Memory per replica (MB, `/proc/PID/smaps_rollup`, after the last level):", "",
              "| replicas | pid | RSS | PSS | PSS anon | PSS file |", "|---:|---:|---:|---:|---:|---:|"]
    for count, mems in report.replica_memory.items():
        for m in mems:
            lines.append(f"| {count} | {m.pid} | {m.rss_mb:.0f} | {m.pss_mb:.0f} | {m.pss_anon_mb:.0f} | "
                         f"{m.pss_file_mb:.0f} |")
    if report.graph_server is not None:
        lines += ["", (f"Graph server (one for all replicas): RSS {report.graph_server.rss_mb:.0f} MB, "
                  f"PSS {report.graph_server.pss_mb:.0f} MB.")]
    if report.speedup:
        lines += ["", "Questions per second, most replicas over one, by clients: "
                  + ", ".join(f"{c}: {s:.2f}x" for c, s in report.speedup.items()) + "."]
    if report.pss_sum_over_one is not None:
        lines += [f"Sum of the replicas' PSS over one replica's: {report.pss_sum_over_one:.2f}x."]
    same = report.same_answers
    if same is not None:
        lines += ["", (f"Same top {same.k} as `ask()` on {same.questions} questions of `{same.bench}`: "
                  f"`POST /ask` {same.ask_same}, MCP `ask` {same.mcp_same}.")]
    return "\n".join(lines) + "\n"


def main(
    index_dir: Annotated[Path, typer.Option("--index-dir", help="index to serve (its traces.sqlite grows)")],
    replicas: Annotated[str, typer.Option("--replicas", help="replica counts, comma-separated")] = "1,2",
    concurrency: Annotated[str, typer.Option("--concurrency", help="clients, comma-separated")] = "1,2,4,8,16,32",
    seconds: Annotated[float, typer.Option("--seconds", min=1.0, max=3600.0, help="seconds per level")] = 20.0,
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8765,
    replica_cpus: Annotated[float, typer.Option("--replica-cpus", min=0.01, help="CPUs reserved per replica")] = 1.0,
    out: Annotated[Path, typer.Option("--out", help="report directory")] = DEFAULT_OUT,
    bench: Annotated[
        Path | None, typer.Option("--same-answers", help="benchmark CSV whose questions must get ask()'s top 20")
    ] = None,
    bench_limit: Annotated[int, typer.Option("--same-limit", min=1, help="questions of --same-answers")] = 200,
) -> None:
    """Serve the index with each replica count and load it at each concurrency; write the report."""
    try:
        counts = sorted({int(x) for x in replicas.split(",") if x.strip()})
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"--replicas and --concurrency take integers separated by commas ({exc})") from exc
    if not counts or not levels or min(counts) < 1 or min(levels) < 1:
        raise typer.BadParameter("--replicas and --concurrency need at least one positive integer each")
    report = run_study(index_dir, replica_counts=counts, concurrency=levels, seconds=seconds, port=port,
                       replica_cpus=replica_cpus, bench=bench, bench_limit=bench_limit)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve-load.json").write_text(json.dumps(report.model_dump(mode="json"), indent=2) + "\n")
    (out / "README.md").write_text(markdown(report))
    typer.echo(markdown(report))


if __name__ == "__main__":
    typer.run(main)
