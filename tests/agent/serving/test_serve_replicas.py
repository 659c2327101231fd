"""`skb serve` on a local Ray Serve with 2 replicas over a small index: both replicas answer, /ask and the MCP
``ask`` tool return `ask()`'s ranking, bad and unauthorised requests get a 4xx while the replicas stay up, a
replica killed with SIGKILL is replaced while the service keeps answering, and a rebuild swapped in under
requests gives no error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.api import ask
from agent.config import AgentConfig
from graphs.bundle import IndexBundle

pytestmark = pytest.mark.integration

TOKEN = "r3plica-" + "z" * 24 + "-Pw4"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUESTIONS = (
    "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?",
    "Which genes are associated with Marfan syndrome?",
    "What are the phenotypes of Crouzon syndrome?",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _call(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _ask(base: str, question: str, **fields: Any) -> tuple[int, Any]:
    return _call(base + "/ask", json.dumps({"question": question, **fields}).encode(), AUTH)


@pytest.fixture(scope="module")
def served(ray_local: None, hpo_mini_skb: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from ray import serve

    from agent.serving.endpoints import token_digest
    from agent.serving.replicas import Scale, start
    from graphs.build import IndexConfig, build_index

    index_dir = tmp_path_factory.mktemp("served") / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo"))
    running = start(index_dir, scale=Scale(replicas=2), port=_free_port(), token_sha256=token_digest(TOKEN),
                    replica_cpus=0.5)
    try:
        yield running
    finally:
        running.stop()
        serve.shutdown()


@pytest.fixture(scope="module")
def local(served: Any) -> Iterator[IndexBundle]:
    """The same index opened in this process (it attaches to the graph server the replicas use)."""
    with IndexBundle.open(served.index_dir) as bundle:
        yield bundle


def _replica_pids_answering(base: str, calls: int = 24) -> set[int]:
    return {int(_call(base + "/health", headers=AUTH)[1]["pid"]) for _ in range(calls)}


def test_two_replicas_answer_and_ask_returns_the_ranking_ask_returns(served: Any, local: IndexBundle) -> None:
    from agent.serving.replicas import replica_pids

    assert _replica_pids_answering(served.url) == set(replica_pids()) and len(replica_pids()) == 2
    for pid in replica_pids():  # each replica's process started with its malloc arenas bounded
        assert b"MALLOC_ARENA_MAX=2" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for question in QUESTIONS:
        status, body = _ask(served.url, question, k=20)
        assert status == 200, body
        expected = ask(question, bundle=local, config=AgentConfig(k=20))
        assert [c["key"] for c in body["context"]] == [c.key for c in expected.context]


def test_the_mcp_ask_tool_over_serve_returns_the_same_ranking(served: Any, local: IndexBundle) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> list[Any]:
        out = []
        async with httpx2.AsyncClient(headers=AUTH, timeout=60) as http:
            for question in QUESTIONS[:2]:  # a new client per question: any replica may answer each
                async with Client(streamable_http_client(served.url + "/mcp", http_client=http)) as client:
                    out.append(await client.call_tool("ask", {"question": question, "k": 20}))
        return out

    for question, result in zip(QUESTIONS[:2], asyncio.run(main()), strict=True):
        assert result.is_error is False, result.content[0].text
        expected = ask(question, bundle=local, config=AgentConfig(k=20))
        assert [c["key"] for c in result.structured_content["context"]] == [c.key for c in expected.context]


def test_refused_and_bad_requests_get_a_4xx_and_the_replicas_stay_up(served: Any) -> None:
    from agent.serving.replicas import replica_pids

    before = replica_pids()
    body = json.dumps({"question": QUESTIONS[0]}).encode()
    assert _call(served.url + "/ask", body)[0] == 401
    assert _call(served.url + "/ask", body, {"Authorization": "Bearer not-the-token-at-all"})[0] == 401
    assert _call(served.url + "/health")[0] == 401
    assert _call(served.url + "/ask", b'{"question": "' + b"x" * (5 * 1024 * 1024) + b'"}', AUTH)[0] == 413
    assert _call(served.url + "/ask", b"{not json", AUTH)[0] == 400
    assert _call(served.url + "/ask", json.dumps({"question": "x", "k": -1}).encode(), AUTH)[0] == 422
    assert _ask(served.url, QUESTIONS[1])[0] == 200
    assert replica_pids() == before


def test_a_replica_killed_with_sigkill_is_replaced_and_the_service_keeps_answering(served: Any) -> None:
    """Eight clients keep both replicas busy while one is killed: the requests it was working on each get the
    proxy's 503 saying the replica died (no bare 500), every other request is answered, and a new replica
    takes the victim's place."""
    from agent.serving.replica_lost import MESSAGE
    from agent.serving.replicas import replica_pids, running_replicas

    victim, survivor = replica_pids()
    results: list[tuple[int, Any]] = []
    stop = threading.Event()

    def client(n: int) -> None:
        while not stop.is_set():
            results.append(_ask(served.url, QUESTIONS[n % 3]))
            n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(results) < 16 and time.monotonic() < deadline:  # both replicas busy
            time.sleep(0.05)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 90
        pids = [victim]
        while time.monotonic() < deadline:
            pids = replica_pids()
            if len(pids) == 2 and victim not in pids and running_replicas() == 2:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert len(pids) == 2 and victim not in pids and survivor in pids, pids
    failed = [(status, body) for status, body in results if status != 200]
    assert failed, "no request was in flight on the killed replica"
    assert len(failed) <= 8, failed  # only what was in flight on the victim (8 clients in all)
    for status, body in failed:
        assert status == 503 and json.loads(body)["error"] == {"status": 503, "message": MESSAGE, "retry": True}
    assert len(results) - len(failed) >= 16
    # the proxies learn of the new replica shortly after the controller reports it running
    deadline = time.monotonic() + 30
    answering = _replica_pids_answering(served.url)
    while answering != set(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
        answering = _replica_pids_answering(served.url)
    assert answering == set(pids)


def test_a_rebuild_swapped_in_under_requests_gives_no_error(served: Any, hpo_mini_skb: Any) -> None:
    from graphs.build import IndexConfig, build_index

    before = _call(served.url + "/health", headers=AUTH)[1]["generation"]
    results: list[tuple[int, str]] = []
    done = threading.Event()

    def client(n: int) -> None:
        while not done.is_set():
            status, body = _ask(served.url, QUESTIONS[n % 3], k=5)
            results.append((status, body["generation"] if status == 200 else str(body)[:300]))
            n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        build_index(hpo_mini_skb, served.index_dir, IndexConfig(dataset="hpo"))
        after = json.loads((served.index_dir / "manifest.json").read_text())["generation"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and [g for s, g in results[-4:]].count(after) < 4:
            time.sleep(0.2)
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    errors = [r for r in results if r[0] != 200]
    assert not errors, errors[:3]
    # requests were answered on both sides of the swap, each from one whole build
    assert after != before and {g for _, g in results} == {before, after} and results[-1][1] == after


def test_the_replicas_options_bound_their_arenas_and_the_routers_back_off() -> None:
    """What the deployment is given (the served fixture runs with these): a request that finds every replica busy
    is tried again within 50 ms, not after the router's default half second, and each replica's process bounds its
    malloc arenas unless the caller's environment says otherwise."""
    from agent.serving.replicas import MAX_ONGOING_REQUESTS, replica_options

    options = replica_options(1.0, environ={})
    assert options["request_router_config"].max_backoff_s <= 0.05
    assert options["max_ongoing_requests"] == MAX_ONGOING_REQUESTS
    assert options["ray_actor_options"]["runtime_env"]["env_vars"] == {"MALLOC_ARENA_MAX": "2"}
    assert replica_options(1.0, environ={"MALLOC_ARENA_MAX": "8"})["ray_actor_options"]["runtime_env"] == {
        "env_vars": {"MALLOC_ARENA_MAX": "8"}}
