"""What Ray Serve's HTTP proxy answers when the replica working on a request dies: a 503 that says so.

Why: a replica killed mid-request (SIGKILL, the out-of-memory killer, a lost machine) cannot answer; Ray's proxy
then logs the actor's death and ends the request with no response at all, which the HTTP server turns into a bare
``500 Internal Server Error``. A client cannot tell that from a bug. This middleware runs inside the proxy (Ray
Serve imports the list ``middlewares`` from the module named by ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, which
`agent.serving.replicas` sets before it starts Ray) and answers such a request with 503, ``Retry-After: 1`` and the
JSON error body the replicas use, saying that the replica died and the request may be sent again: asking a
question changes nothing, and Ray Serve restarts the replica while the others keep answering.

A request whose response had started (a streamed MCP reply) can only be cut short; the client sees the stream end.
This module is imported by every proxy, so it imports nothing of the agent.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The environment variable Ray Serve's proxy reads at start for a callable returning its middlewares.
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "agent.serving.replica_lost:middlewares"
STATUS = 503
MESSAGE = (
    "the replica working on this request stopped before it answered (it died; Ray Serve restarts it and the other "
    "replicas keep answering): nothing was changed, send the request again"
)


class ReplicaLostMiddleware:
    """ASGI middleware for the proxy: an HTTP request that ends with no response gets `STATUS` and `MESSAGE`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            if started:
                raise
        if not started:
            with contextlib.suppress(Exception):  # the client may be gone as well
                await _send_lost(send)


async def _send_lost(send: Send) -> None:
    body = json.dumps({"error": {"status": STATUS, "message": MESSAGE, "retry": True}}).encode("utf-8")
    await send({
        "type": "http.response.start", "status": STATUS,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"1")],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def middlewares() -> list[Any]:
    """What Ray Serve's proxy calls (through `PROXY_CALLBACK_ENV`) for its middlewares."""
    return [Middleware(ReplicaLostMiddleware)]


__all__ = ["MESSAGE", "PROXY_CALLBACK", "PROXY_CALLBACK_ENV", "STATUS", "ReplicaLostMiddleware", "middlewares"]
