"""The model endpoint is the operator's: a run's ``configurable`` cannot send the server's API key elsewhere.

Two real HTTP servers on 127.0.0.1: the operator's (OPENAI_BASE_URL, OPENAI_API_KEY) and another one a
client names in ``base_url``. Each records the Authorization header it receives; the key must never reach
the second unless the operator listed its host in SKB_LLM_ALLOWED_HOSTS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config import ALLOWED_HOSTS_ENV, AgentConfig
from agent.serving.langgraph_app import load_graph
from agent.serving.retriever import SKBRetriever
from graphs.errors import ConfigError
from tests.openai_stub import Stub, completion, serve_stub

pytestmark = pytest.mark.integration


@pytest.fixture()
def attacker() -> Iterator[Stub]:
    with serve_stub() as stub:
        yield stub


def _keys(stub: Stub) -> list[str]:
    return [r["headers"].get("authorization", "") for r in stub.requests]


def _finish(stub: Stub) -> None:
    stub.replies = [completion(calls=[("finish", json.dumps({"keys": [], "confidence": 0.1}))])] * 8


def _run(index_dir: Path, configurable: dict[str, Any]) -> Any:
    return load_graph(index_dir).invoke({"question": "Which genes are associated with Marfan syndrome?"},
                                        {"configurable": configurable})


def test_a_run_cannot_point_the_planner_at_another_host(
    openai_stub: Stub, attacker: Stub, hpo_index_dir: Path
) -> None:
    _finish(attacker)
    with pytest.raises(ConfigError, match=rf"base_url.*127\.0\.0\.1:{attacker.url.split(':')[2].split('/')[0]}.*"
                                          rf"{ALLOWED_HOSTS_ENV}"):
        _run(hpo_index_dir, {"planner": "openai", "base_url": attacker.url, "degrade_to_offline": True})
    with pytest.raises(ConfigError, match="base_url"):
        _run(hpo_index_dir, {"planner": "openai", "base_url": "http://127.0.0.1@" + attacker.url[7:]})
    assert attacker.requests == []
    assert not any("sk-test-stub" in key for key in _keys(attacker))


def test_the_retriever_refuses_the_same_override(openai_stub: Stub, attacker: Stub, hpo_bundle: Any) -> None:
    _finish(attacker)
    retriever = SKBRetriever(hpo_bundle, k=3, policy="never")
    with pytest.raises(ConfigError, match="base_url"):
        retriever.invoke("Marfan syndrome", {"configurable": {"planner": "openai", "base_url": attacker.url}})
    with pytest.raises(ConfigError, match="base_url"):
        retriever.invoke("Marfan syndrome", planner="openai", base_url=attacker.url)
    assert attacker.requests == []


def test_an_allowed_host_and_the_operators_own_endpoint_are_accepted(
    openai_stub: Stub, attacker: Stub, hpo_index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _finish(openai_stub)
    _run(hpo_index_dir, {"planner": "openai", "base_url": openai_stub.url, "policy": "never"})
    assert _keys(openai_stub) and set(_keys(openai_stub)) == {"Bearer sk-test-stub"}

    _finish(attacker)
    host = attacker.url.split("/")[2]  # 127.0.0.1:<port>
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, f"models.internal, {host}")
    _run(hpo_index_dir, {"planner": "openai", "base_url": attacker.url, "policy": "never"})
    assert set(_keys(attacker)) == {"Bearer sk-test-stub"}


def test_the_operator_may_set_any_endpoint_in_the_config_itself(attacker: Stub) -> None:
    """The operator's own settings (constructor, ``skb ask --set``) are not a run's override."""
    config = AgentConfig(planner="openai", base_url=attacker.url)
    assert config.with_overrides({"base_url": attacker.url}).base_url == attacker.url  # unchanged: not an override
    assert config.with_overrides({"base_url": None}).base_url is None  # back to the operator's environment
    assert AgentConfig().with_overrides({"base_url": attacker.url}, trusted=True).base_url == attacker.url
    with pytest.raises(ConfigError, match="base_url"):
        AgentConfig().with_overrides({"base_url": attacker.url})
    with pytest.raises(ConfigError, match="base_url"):
        AgentConfig().with_overrides({"base_url": "file:///etc/passwd"})


def test_an_operator_endpoint_that_is_no_url_breaks_no_offline_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8000")  # no scheme: only an LLM call would fail on it
    config = AgentConfig().with_overrides({"k": 3})
    assert config.k == 3 and config.base_url == "localhost:8000"
    with pytest.raises(ConfigError, match="base_url other.example:80 is not an endpoint the operator configured"):
        config.with_overrides({"base_url": "http://other.example/v1"})
