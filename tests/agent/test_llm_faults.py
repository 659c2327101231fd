"""LLM endpoint faults: down, slow, rate-limited forever, garbage replies.

The real ChatOpenAI client talks HTTP to a local server that misbehaves on purpose (the LLM is
the only fake). Each fault must cost a bounded number of requests (tenacity retries, counted
here), then the run degrades to the offline planner and says so in ``AgentResult.degraded``;
with ``degrade_to_offline=False`` it raises PlannerError instead.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent import AgentConfig, ask
from graphs.errors import PlannerError
from tests.openai_stub import completion
from tests.reliability_support import within

pytestmark = pytest.mark.integration

APERT = "Which disease has cutaneous syndactyly of toes and brachyturricephaly?"
Behaviour = Callable[[dict[str, Any], int], tuple[int, dict[str, str], bytes]]
"""(request body, request number) -> (status, headers, raw body)."""


@dataclass
class FaultyLLM:
    url: str
    behaviour: Behaviour = field(default=lambda body, n: (500, {}, b"{}"))
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture()
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyLLM]:
    state = FaultyLLM(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state.requests.append(body)
                n = len(state.requests)
            status, headers, data = state.behaviour(body, n)
            try:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                pass

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-faults")
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


def config(url: str, **overrides: Any) -> AgentConfig:
    base: dict[str, Any] = {
        "planner": "openai",
        "model": "stub-model",
        "base_url": url,
        "policy": "never",
        "llm_attempts": 3,
        "llm_backoff_initial_s": 0.01,
        "llm_backoff_max_s": 0.05,
        "llm_timeout_s": 5.0,
    }
    return AgentConfig.model_validate({**base, **overrides})


def json_reply(status: int, payload: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return status, {}, json.dumps(payload).encode()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: connection refused


def assert_degraded_answer(result: Any, needle: str) -> None:
    notes = " | ".join(result.degraded)
    assert "offline planner" in notes and needle in notes, notes
    assert "OMIM:101200" in [c.key for c in result.context[:3]]  # the offline planner still answers
    assert result.llm_calls == 0


def test_endpoint_down_degrades_to_offline(hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-faults")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(url)))
    assert_degraded_answer(result, "3 times")
    assert "Connection error" in " ".join(result.degraded)


def test_endpoint_down_raises_when_degradation_is_off(hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-faults")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(PlannerError, match="3 times"):
        within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(url, degrade_to_offline=False)))


def test_slow_endpoint_times_out_and_degrades(llm: FaultyLLM, hpo_bundle: Any) -> None:
    def slow(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], bytes]:
        llm.release.wait(30)  # far beyond the client timeout; released at teardown
        return completion(content="{}")[0], {}, json.dumps(completion(content="{}")[1]).encode()

    llm.behaviour = slow
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(llm.url, llm_timeout_s=0.3)))
    assert_degraded_answer(result, "timed out")
    assert "not retried with the same prompt" in " ".join(result.degraded)
    assert len(llm.requests) == 1  # a timeout is not retried with the same prompt; act skips the slow model


def test_rate_limited_forever_costs_bounded_retries(llm: FaultyLLM, hpo_bundle: Any) -> None:
    llm.behaviour = lambda body, n: (
        429,
        {"retry-after-ms": "1"},
        json.dumps({"error": {"message": "rate limited", "type": "rate_limit_exceeded"}}).encode(),
    )
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(llm.url, llm_attempts=4)))
    assert_degraded_answer(result, "4 times")
    assert len(llm.requests) == 4


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        ((200, {}, b"<html>definitely not json</html>"), "planner model call failed"),
        (json_reply(200, {"hello": "world"}), "planner model call failed"),
        ((200, {}, b""), "planner model call failed"),
        ((500, {"Content-Type": "text/html"}, b"<h1>Internal error</h1>"), "3 times"),
        (
            json_reply(400, {"error": {"message": "model not found", "type": "invalid_request_error"}}),
            "model not found",
        ),
    ],
    ids=["html-200", "wrong-schema", "empty-200", "html-500", "400"],
)
def test_garbage_replies_degrade(
    llm: FaultyLLM, hpo_bundle: Any, reply: tuple[int, dict[str, str], bytes], needle: str
) -> None:
    llm.behaviour = lambda body, n: reply
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(llm.url)))
    assert_degraded_answer(result, needle)
    assert 1 <= len(llm.requests) <= 3


def test_failure_after_a_good_plan_switches_to_offline_mid_run(llm: FaultyLLM, hpo_bundle: Any) -> None:
    """The plan call works, then every act call is rate-limited: the LLM plan is kept and the act
    loop continues on the offline planner."""
    plan = {
        "target_type": "Disease",
        "relation_paths": [[{"rel": "HAS_PHENOTYPE", "direction": "in", "to_label": "Disease"}]],
    }

    def behaviour(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], bytes]:
        if n == 1:
            return json_reply(*completion(content=json.dumps(plan)))
        return json_reply(429, {"error": {"message": "slow down", "type": "rate_limit_exceeded"}})

    llm.behaviour = behaviour
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(llm.url)))
    assert result.target_type == "Disease"
    assert any("continued with the offline planner" in note for note in result.degraded)
    assert "OMIM:101200" in [c.key for c in result.context[:3]]
    assert len(llm.requests) == 1 + 3 and result.llm_calls == 1


def test_malformed_tool_calls_forever_end_in_the_fallback(llm: FaultyLLM, hpo_bundle: Any) -> None:
    """A live model that only ever sends unparseable tool arguments: repair rounds are bounded
    (max_repairs), then the hybrid fallback answers."""

    def behaviour(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], bytes]:
        if n == 1:
            return json_reply(*completion(content='{"target_type": null, "relation_paths": []}'))
        return json_reply(*completion(calls=[("search_nodes", "{not json"), ("drop_everything", "{}")]))

    llm.behaviour = behaviour
    started = time.monotonic()
    result = within(120, lambda: ask(APERT, bundle=hpo_bundle, config=config(llm.url, max_repairs=2)))
    assert time.monotonic() - started < 120
    assert result.fallback_used and result.context
    assert any("max_repairs" in note for note in result.degraded)
    assert len(llm.requests) == 1 + 3  # plan + (max_repairs + 1) act rounds
