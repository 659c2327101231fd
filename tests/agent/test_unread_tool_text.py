"""Where no model reads the tools' text (the offline planner), no tokenizer runs for it, and the text still fits
its budget in real tokens; where a model reads it, it is counted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

import graphs.tokens
import tools.results
from agent import AgentConfig, ask
from agent.fake_llm import ScriptedChatModel
from agent.graph import AgentGraph
from tools.results import SemanticHits, budget_measure, estimate_tokens, tool_output, unread_by_model

QUESTION = "Which disease has a skull shape defect and webbed fingers?"


def _no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a tokenizer ran for text no model reads")

    monkeypatch.setattr(graphs.tokens, "raw_count", refuse)
    monkeypatch.setattr(tools.results, "count_tokens_many", refuse)


def test_offline_questions_run_no_tokenizer_and_report_no_tokens_read(
    hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = AgentConfig(tool_output_tokens=200, per_call_k=50)
    _no_tokenizer(monkeypatch)
    result = ask(QUESTION, bundle=hpo_bundle, config=config)
    assert result.context and result.tool_calls > 0
    assert result.tool_output_tokens == 0


def test_offline_round_text_fits_its_budget_in_real_tokens(hpo_bundle: Any) -> None:
    config = AgentConfig(policy="never", tool_output_tokens=200, per_call_k=50)
    graph = AgentGraph(hpo_bundle, config).compile()
    messages = [
        m
        for update in graph.stream({"question": QUESTION}, stream_mode="updates")
        if "run_tools" in update
        for m in update["run_tools"]["round_messages"]
        if isinstance(m, ToolMessage)
    ]
    assert messages
    assert all(estimate_tokens(str(m.content)) <= 200 for m in messages)


def test_a_scripted_model_reads_counted_text(hpo_bundle: Any) -> None:
    calls = [{"name": "semantic_search", "args": {"text": "skull", "k": 50}, "id": "s", "type": "tool_call"}]
    finish = [{"name": "finish", "args": {"keys": ["OMIM:101200"]}, "id": "f", "type": "tool_call"}]
    model = ScriptedChatModel([AIMessage(content="", tool_calls=calls), AIMessage(content="", tool_calls=finish)])
    config = AgentConfig(policy="never", max_entities=0, tool_output_tokens=200, per_call_k=50)
    result = ask("skull", bundle=hpo_bundle, config=config, chat_model=model)
    assert result.tool_output_tokens > 0


def test_unread_fit_is_within_the_bound_and_the_counted_fit_keeps_at_least_as_much() -> None:
    rows = [{"key": f"K:{i}", "label": "Thing", "name": f"name {i}", "score": 1 / (i + 1)} for i in range(80)]
    hits = SemanticHits.model_validate({"provenance": {"tool": "semantic_search", "query": "skull"}, "hits": rows})
    counted, _ = tool_output(hits, 400)
    with unread_by_model():
        unread, _ = tool_output(hits, 400)
        assert budget_measure(unread) <= 400
    assert estimate_tokens(unread) <= 400 and estimate_tokens(counted) <= 400
    kept = len(json.loads(unread)["hits"])
    assert 0 < kept <= len(json.loads(counted)["hits"]) < 80
    assert budget_measure(unread) == estimate_tokens(unread)  # outside the block a budget counts for real


def test_the_setting_reaches_the_tool_pool_threads() -> None:
    import threading
    import time

    from agent.runtime import run_concurrently

    def probe(_: int) -> tuple[bool, str]:
        time.sleep(0.02)  # long enough for the pool's workers to take items too
        return budget_measure("x" * 40) == 40, threading.current_thread().name

    with unread_by_model():
        seen = run_concurrently(probe, list(range(8)), 4)
    assert all(bounded for bounded, _ in seen)
    assert len({name for _, name in seen}) > 1  # not only the calling thread
