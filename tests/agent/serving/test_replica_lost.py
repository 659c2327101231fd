"""The proxies' middleware: a request that ends with no response (its replica died) gets a 503 that says so and
may be retried; requests that were answered, or whose answer had begun, pass through untouched.

In process, without Ray: the Ray test (`test_serve_replicas`) kills a real replica under load."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from agent.serving.replica_lost import MESSAGE, ReplicaLostMiddleware


async def _no_response(scope: Scope, receive: Receive, send: Send) -> None:
    """What Ray's proxy does when the replica dies: logs it and returns without a response."""


async def _fails_before_answering(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("actor died")


async def _answers(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _dies_mid_stream(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"part", "more_body": True})
    raise RuntimeError("actor died mid-stream")


@pytest.mark.parametrize("app", [_no_response, _fails_before_answering])
def test_a_request_left_without_a_response_gets_a_503_saying_the_replica_died(app: Any) -> None:
    response = TestClient(ReplicaLostMiddleware(app)).post("/ask", json={"question": "q"})
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json() == {"error": {"status": 503, "message": MESSAGE, "retry": True}}


def test_answered_and_started_responses_pass_through() -> None:
    response = TestClient(ReplicaLostMiddleware(_answers)).get("/health")
    assert (response.status_code, response.text) == (200, "ok")
    with pytest.raises(RuntimeError, match="mid-stream"):  # the stream is cut short: no second status line
        TestClient(ReplicaLostMiddleware(_dies_mid_stream)).get("/mcp")
