"""A model endpoint that drips its reply (chunked, one space at a time) cannot hold a question.

httpx's timeouts are per read, so a reply that keeps arriving never trips them; the planner's client
has a total deadline per call (``agent.llm.deadline``), and ``max_wall_s`` ends the question
within 5 s of its deadline in every planner mode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agent import AgentConfig, ask
from agent.llm.client import invoke_with_retry
from agent.runtime import make_chat_model
from graphs.errors import PlannerTimeoutError
from tests.reliability_support import within

pytestmark = pytest.mark.integration


@pytest.fixture()
def dripping_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An OpenAI-compatible URL whose every reply is a 200 whose body arrives one space per 0.2 s, forever."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while not stop.is_set():
                    self.wfile.write(b"1\r\n \r\n")
                    self.wfile.flush()
                    stop.wait(0.2)
            except OSError:
                return

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-drip")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    yield url
    stop.set()
    server.shutdown()
    server.server_close()


def _config(url: str, **overrides: Any) -> AgentConfig:
    base = {"planner": "openai", "model": "stub-model", "base_url": url, "policy": "never", "llm_backoff_initial_s": 0.01}
    return AgentConfig.model_validate({**base, **overrides})


def test_a_dripping_reply_is_cut_at_the_call_timeout(dripping_endpoint: str, hpo_bundle: Any) -> None:
    cfg = _config(dripping_endpoint, llm_timeout_s=1.5)
    model = make_chat_model(cfg, hpo_bundle)
    start = time.monotonic()
    with pytest.raises(PlannerTimeoutError, match="timed out after 1.5 s"):
        within(20, lambda: invoke_with_retry(model, [HumanMessage("hello")], cfg), "dripping call")
    assert time.monotonic() - start < 4


@pytest.mark.parametrize("mode", ["loop", "plan-once"])
def test_max_wall_s_ends_a_question_on_a_dripping_endpoint(dripping_endpoint: str, hpo_bundle: Any, mode: str) -> None:
    cfg = _config(dripping_endpoint, planner_mode=mode, max_wall_s=3, llm_timeout_s=60, degrade_to_offline=True)
    start = time.monotonic()
    result = within(30, lambda: ask("Which disease has arachnodactyly?", bundle=hpo_bundle, config=cfg), f"{mode} ask")
    took = time.monotonic() - start
    assert took < 3 + 5, f"{mode}: the question ran {took:.1f} s with max_wall_s=3"
    assert result.stopped_by_budget == "wall_time" or any("wall" in d for d in result.degraded)
