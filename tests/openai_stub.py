"""A local OpenAI-compatible chat-completions server for tests (the LLM is the only fake).

``openai_stub`` (a pytest fixture, registered in conftest.py) starts it on a free port, sets
OPENAI_API_KEY and OPENAI_BASE_URL, and plays back ``stub.replies`` in order: (status, json)
pairs or callables that build one from the request body. Every request is kept in ``stub.requests``
(path, body and headers, names lowercased: a test can see which API key reached which server). ``serve_stub`` starts
another one without touching the environment (a host the operator did not configure).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = tuple[int, dict[str, Any]] | Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


@dataclass
class Stub:
    url: str
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


def completion(*, content: str | None = None, calls: Sequence[tuple[str, str]] = (), tokens: int = 100) -> tuple[int, dict[str, Any]]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    body = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 7, "total_tokens": tokens + 7},
    }
    return 200, body


RATE_LIMITED = (429, {"error": {"message": "rate limited, slow down", "type": "rate_limit_exceeded", "code": None}})
UNAVAILABLE = (503, {"error": {"message": "overloaded", "type": "server_error", "code": None}})


@contextlib.contextmanager
def serve_stub() -> Iterator[Stub]:
    """A stub server on 127.0.0.1 (a free port) for as long as the block runs."""
    state = Stub(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state.requests.append({"path": self.path, "body": body, "headers": {k.lower(): v for k, v in self.headers.items()}})
                reply = state.replies.pop(0) if state.replies else (500, {"error": {"message": "script exhausted"}})
            status, payload = reply(body) if callable(reply) else reply
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("retry-after-ms", "1")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def openai_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    """A stub server configured as the operator's endpoint (OPENAI_BASE_URL, OPENAI_API_KEY)."""
    with serve_stub() as state:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-stub")
        monkeypatch.setenv("OPENAI_BASE_URL", state.url)
        yield state
