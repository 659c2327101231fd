"""Readers during updates: MCP HTTP clients asking while the index is updated in place, round after round.

Why: an update publishes a new generation of the index beside the one a server is reading; the server must switch
at a question boundary, with every part (graph store, vectors, BM25, phrases, tables) of one generation, never
half of each, and must not keep the replaced generation's files or memory. This serves a generated graph with
``skb mcp --transport http``, runs ``--clients`` MCP sessions that call tools without pause, and meanwhile changes the
data ``--rounds`` times and re-runs ``skb index`` on it (which applies the difference as an update).

Each round edits 1 % of the nodes' texts, deletes 0.5 % (with their edges), adds 1 % with edges, and moves a marker:
the node ``marker-<r>`` (one per generation, named with a word no other node has) replaces ``marker-<r-1>``. So
every generation holds exactly one marker, and an answer from a half-applied index shows: the ``cypher`` tool
counting markers in the store, and ``semantic_search`` and ``ask`` for the marker word, must each see at most one
marker key, and a marker key a search returns must be in the store in the same call's generation. After each
round the report records the server's open descriptors and RSS; ``--control SECONDS`` runs the same load with a
wait in place of each update, to tell what the updates cost from what the questions do.

    python -m evals.studies.update_under_load --nodes 3000 --clients 8 --rounds 20 --out evals/reports/updates/readers.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evals.studies.mcp_flood import _free_port, _wait_for_port, rss_mb
from evals.studies.output import emit
from evals.studies.scale.generate import generate
from graphs.loaders.jsonl import load_jsonl, write_jsonl
from graphs.skb.model import SKB, Edge, Node

MARKER_WORD = "zyxquorb"
_CYPHER = "MATCH (n) WHERE n.key STARTS WITH 'marker-' RETURN n.key AS key"


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def changed(skb: SKB, r: int, rng: random.Random) -> SKB:
    """The next round's graph: 1 % edited, 0.5 % deleted, 1 % added, and the marker moved to ``marker-<r>``."""
    plain = [k for k in skb.nodes if not k.startswith("marker-")]
    n = len(plain)
    deleted = set(rng.sample(plain, max(1, n // 200))) | {f"marker-{r - 1}"}
    edited = set(rng.sample([k for k in plain if k not in deleted], max(1, n // 100)))
    out = SKB(skb.name, skb.node_types.values())
    for key, node in skb.nodes.items():
        if key in deleted:
            continue
        props = dict(node.props)
        if key in edited:
            props["description"] = f"{props.get('description', '')} revised in round {r}".strip()
        out.add_node(Node(key, node.label, props))
    concepts = [k for k, node in out.nodes.items() if node.label == "Concept"]
    for i in range(max(1, n // 100)):
        key = f"u{r}-{i}"
        out.add_node(Node(key, "Concept", {"name": f"Added concept {r} {i}", "description": f"added in round {r}"}))
        out.add_edge(Edge(key, "BROADER", rng.choice(concepts)))
    out.add_node(Node(f"marker-{r}", "Concept", {"name": f"{MARKER_WORD.title()} {r}",
                                                 "description": f"the {MARKER_WORD} marker of round {r}"}))  # fmt: skip
    out.add_edge(Edge(f"marker-{r}", "BROADER", rng.choice(concepts)))
    for edge in skb.edges:
        if edge.src in out.nodes and edge.dst in out.nodes:
            out.add_edge(edge)
    return out


def _markers(value: Any) -> set[str]:
    """Marker keys anywhere in a tool's structured result."""
    text = json.dumps(value)
    return {f"marker-{part.split(chr(34))[0]}" for part in text.split('"marker-')[1:] if part.split(chr(34))[0].isdigit()}


async def _client(url: str, stop: asyncio.Event, tally: dict[str, Any]) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    calls: list[tuple[str, dict[str, Any]]] = [("cypher", {"query": _CYPHER}), ("semantic_search", {"text": f"{MARKER_WORD} marker", "k": 10}),
             ("ask", {"question": f"Which concept is the {MARKER_WORD} marker?"})]  # fmt: skip
    async with httpx2.AsyncClient(timeout=120) as http, Client(streamable_http_client(url, http_client=http)) as client:
        i = 0
        while not stop.is_set():
            name, args = calls[i % len(calls)]
            i += 1
            try:
                result = await client.call_tool(name, args)
            except Exception as exc:  # noqa: BLE001 -- counted, the run goes on
                tally["errors"].append(f"{name}: {type(exc).__name__}: {exc}"[:300])
                continue
            tally["calls"] += 1
            if result.is_error:
                tally["errors"].append(f"{name}: {str(result.content)[:300]}")
                continue
            seen = _markers(result.structured_content or {})
            if name == "cypher" and len(seen) != 1:
                tally["mixed"].append(f"cypher saw {sorted(seen)}")
            elif len(seen) > 1:
                tally["mixed"].append(f"{name} saw {sorted(seen)}")
            tally["markers_seen"] += bool(seen)


async def _load(url: str, clients: int, stop: asyncio.Event, tally: dict[str, Any]) -> None:
    await asyncio.gather(*(_client(url, stop, tally) for _ in range(clients)))


def _index(data: Path, index_dir: Path) -> tuple[float, str]:
    cmd = [sys.executable, "-c", "from agent.cli import app; app()", "index", "--dataset", "jsonl", "--data", str(data),
           "--index-dir", str(index_dir), "--embedder", "hash:64"]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"skb index failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return time.perf_counter() - started, done.stdout + done.stderr


def run(nodes: int, clients: int, rounds: int, seed: int, work: Path, control_s: float = 0.0) -> dict[str, Any]:
    data, index_dir = work / "data", work / "index"
    generate(nodes, data, seed=seed)
    rng = random.Random(seed)
    skb = changed(load_jsonl(data), 0, rng)
    write_jsonl(skb, data)
    _index(data, index_dir)
    port = _free_port()
    log = (work / "server.log").open("w", encoding="utf-8")
    server = subprocess.Popen([sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(index_dir), "--transport",
                               "http", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    tally: dict[str, Any] = {"calls": 0, "errors": [], "mixed": [], "markers_seen": 0}
    samples: list[dict[str, Any]] = []
    try:
        try:
            _wait_for_port(port, server)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(work / 'server.log').read_text(encoding='utf-8')[-1500:]}") from None
        url = f"http://127.0.0.1:{port}/mcp"

        async def drive() -> None:
            stop = asyncio.Event()
            load = asyncio.create_task(_load(url, clients, stop, tally))
            await asyncio.sleep(5)
            samples.append({"round": 0, "fds": fd_count(server.pid), "rss_mb": rss_mb(server.pid), "calls": tally["calls"]})
            nonlocal skb
            for r in range(1, rounds + 1):
                if control_s:  # the control: the same load, no update
                    await asyncio.sleep(control_s)
                    seconds, out = control_s, "as an update"
                else:
                    skb = changed(skb, r, rng)
                    write_jsonl(skb, data)
                    seconds, out = await asyncio.to_thread(_index, data, index_dir)
                await asyncio.sleep(2)  # questions on the new generation
                samples.append({"round": r, "seconds": round(seconds, 1), "update": "as an update" in out,
                                "fds": fd_count(server.pid), "rss_mb": rss_mb(server.pid), "calls": tally["calls"],
                                "errors": len(tally["errors"]), "mixed": len(tally["mixed"])})  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
            stop.set()
            await load

        asyncio.run(drive())
    finally:
        server.terminate()
        server.wait(timeout=120)
        log.close()
    first, last = samples[1], samples[-1]
    return {"nodes": nodes, "clients": clients, "rounds": rounds, "calls": tally["calls"],
            "errors": len(tally["errors"]), "first_errors": tally["errors"][:5], "half_applied": len(tally["mixed"]),
            "first_half_applied": tally["mixed"][:5], "answers_with_a_marker": tally["markers_seen"],
            "all_updates_in_place": all(s.get("update", True) for s in samples),
            "fds_after_round_1_and_last": [first["fds"], last["fds"]], "fds_max": max(s["fds"] or 0 for s in samples),
            "rss_mb_after_round_1_and_last": [first["rss_mb"], last["rss_mb"]], "samples": samples}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--control", type=float, default=0.0, metavar="SECONDS",
                        help="the control run: wait this long per round instead of updating")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="skb-update-load-") as tmp:
        result = run(args.nodes, args.clients, args.rounds, args.seed, Path(tmp), args.control)
    emit(result, args.out)
    return 0 if result["errors"] == 0 and result["half_applied"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
