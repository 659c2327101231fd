"""The real ChatOpenAI planner path, end to end over HTTP against a local OpenAI-compatible openai_stub.

The stub (http.server in a thread) answers /v1/chat/completions with scripted replies in
OpenAI's JSON, including a 429 (tenacity must retry it) and malformed tool-call arguments
(the agent must feed the error back and let the model repair).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent import AgentConfig, ask
from graphs.errors import PlannerError
from tests.openai_stub import RATE_LIMITED, UNAVAILABLE, Stub, completion

pytestmark = pytest.mark.integration

def openai_config(openai_stub: Stub, **overrides: Any) -> AgentConfig:
    base = {"planner": "openai", "model": "stub-model", "base_url": openai_stub.url, "policy": "never", "llm_backoff_initial_s": 0.01}
    return AgentConfig.model_validate({**base, **overrides})


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


def test_openai_planner_over_http(openai_stub: Stub, hpo_bundle: Any) -> None:
    plan = {"target_type": "Disease", "relation_paths": [[{"rel": "HAS_PHENOTYPE", "direction": "in", "to_label": "Disease"}]]}

    def finish_with_search_hits(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        results = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool" and "hits" in m["content"]]
        keys = [h["key"] for h in results[-1]["hits"]]
        return completion(calls=[("finish", json.dumps({"keys": keys, "confidence": 0.9}))])

    openai_stub.replies = [
        completion(content=json.dumps(plan), tokens=50),
        RATE_LIMITED,
        completion(calls=[("semantic_search", json.dumps({"text": "Marfan syndrome", "label": "Disease", "k": 2}))]),
        completion(calls=[("search_nodes", '{"keys": ["OMIM:154700"')]),  # truncated JSON: invalid_tool_calls
        finish_with_search_hits,
    ]
    question = "Which disease has arachnodactyly, like Marfan syndrome?"
    result = ask(question, bundle=hpo_bundle, config=openai_config(openai_stub))

    assert result.context[0].key == "OMIM:154700"
    assert result.target_type == "Disease"
    assert result.relation_paths == [["<-[HAS_PHENOTYPE]-Disease"]]
    assert result.degraded == [] or all("plan" not in d for d in result.degraded)
    assert result.llm_calls == 4  # the 429 is retried, not counted
    assert result.prompt_tokens == 50 + 3 * 100 and result.completion_tokens == 4 * 7
    assert result.usage_by_stage["plan"].llm_calls == 1 and result.usage_by_stage["act"].llm_calls == 3

    paths = {r["path"] for r in openai_stub.requests}
    assert paths == {"/v1/chat/completions"}
    assert len(openai_stub.requests) == 5
    plan_request, first_act = openai_stub.requests[0]["body"], openai_stub.requests[1]["body"]
    # the plan comes through a forced tool call (structured output), not free text
    assert [t["function"]["name"] for t in plan_request["tools"]] == ["submit_plan"]
    assert plan_request["tool_choice"] == {"type": "function", "function": {"name": "submit_plan"}}
    assert [t["function"]["name"] for t in first_act["tools"]] == ["semantic_search", "search_nodes", "cypher", "finish"]
    assert "step" not in first_act["tools"][0]["function"]["parameters"]["properties"]
    assert openai_stub.requests[2]["body"] == first_act  # the retried request is the same request
    repair_feedback = tool_messages(openai_stub.requests[4])[-1]
    assert "malformed call to 'search_nodes'" in repair_feedback["content"]


def test_invalid_llm_plan_falls_back_to_heuristic_plan(openai_stub: Stub, hpo_bundle: Any) -> None:
    """Invalid, then still invalid after the one repair round: the heuristic plan, with a note."""
    bad = '{"target_type": "Illness", "relation_paths": []}'
    openai_stub.replies = [
        completion(content=bad),
        completion(calls=[("submit_plan", bad)]),
        completion(calls=[("finish", json.dumps({"keys": ["OMIM:154700"]}))]),
    ]
    result = ask("Marfan syndrome", bundle=hpo_bundle, config=openai_config(openai_stub))
    assert any("LLM plan failed" in note and "Illness" in note and "2 attempt" in note for note in result.degraded)
    assert result.target_type == "Disease"  # the heuristic plan's
    assert result.plan is not None and not result.plan["valid"] and result.plan["attempts"] == 2
    assert result.context[0].key == "OMIM:154700"
    assert result.llm_calls == 3
    repair = openai_stub.requests[1]["body"]["messages"]
    assert "unknown label 'Illness'" in repair[-1]["content"]  # the validation error, quoted to the model


def test_persistent_server_errors_raise_planner_error(openai_stub: Stub, hpo_bundle: Any) -> None:
    openai_stub.replies = [completion(content='{"target_type": null, "relation_paths": []}'), UNAVAILABLE, UNAVAILABLE, UNAVAILABLE]
    with pytest.raises(PlannerError, match="3 times"):
        ask(
            "Marfan syndrome",
            bundle=hpo_bundle,
            config=openai_config(openai_stub, llm_attempts=3, degrade_to_offline=False),
        )
    assert len(openai_stub.requests) == 4


def test_missing_api_key_is_a_config_error(openai_stub: Stub, hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.errors import ConfigError

    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        ask("Marfan syndrome", bundle=hpo_bundle, config=openai_config(openai_stub))
    assert openai_stub.requests == []
