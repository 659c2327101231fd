"""`SKBToolkit`: our tools for other agents, on the real index fixture (offline planner behind `ask`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from agent.config import AgentConfig
from agent.serving.toolkit import SKBToolkit, tool_input_schema
from agent.tracing.tracer import LocalTracer
from graphs.errors import ConfigError
from tools.results import SemanticHits, estimate_tokens


@pytest.fixture(scope="module")
def tools(hpo_bundle: Any) -> dict[str, BaseTool]:
    return {t.name: t for t in SKBToolkit(hpo_bundle, callbacks=[]).get_tools()}


def test_tools_in_stable_order_with_model_facing_schemas(tools: dict[str, BaseTool]) -> None:
    assert list(tools) == ["ask", "semantic_search", "search_nodes", "cypher"]
    for tool in tools.values():
        schema = tool_input_schema(tool)
        assert schema["type"] == "object" and "title" not in schema
        assert not {"step", "question"} & set(schema["properties"]) or tool.name == "ask"
    assert tool_input_schema(tools["ask"])["required"] == ["question"]
    assert tool_input_schema(tools["cypher"])["required"] == ["query"]


def test_tools_answer_as_a_langchain_agent_would_call_them(tools: dict[str, BaseTool]) -> None:
    # a tool call (what a LangChain agent sends) returns a ToolMessage carrying compact JSON text for the
    # model and the typed result as the artifact
    message = tools["semantic_search"].invoke(
        {"type": "tool_call", "id": "1", "name": "semantic_search", "args": {"text": "aortic root aneurysm", "k": 3}}
    )
    assert isinstance(message, ToolMessage)
    assert isinstance(message.artifact, SemanticHits)
    assert message.artifact.hits[0].key == "HP:0002616"
    assert [h["key"] for h in json.loads(message.content)["hits"]] == message.artifact.found_keys()
    neighbors = json.loads(
        tools["search_nodes"].invoke({"keys": ["OMIM:154700"], "rel_types": ["ASSOCIATED_WITH"], "direction": "both"})
    )["neighbors"]
    assert "FBN1" in {n["key"] for n in neighbors}


def test_toolkit_tools_use_the_configured_budget(hpo_bundle: Any) -> None:
    toolkit = SKBToolkit(hpo_bundle, agent_config=AgentConfig(tool_output_tokens=100), include_ask=False)
    tool = {t.name: t for t in toolkit.get_tools()}["semantic_search"]
    text = tool.invoke({"text": "aortic root aneurysm", "k": 50})
    assert estimate_tokens(text) <= 100 and json.loads(text)["omitted"] > 0


def test_ask_tool_runs_the_whole_agent_and_traces_it(hpo_bundle: Any, tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")
    toolkit = SKBToolkit(hpo_bundle, callbacks=[tracer])
    ask = {t.name: t for t in toolkit.get_tools()}["ask"]
    message = ask.invoke(
        {"type": "tool_call", "id": "1", "name": "ask", "args": {"question": "Which genes are associated with Marfan syndrome?", "k": 3}}
    )
    assert json.loads(message.content)["top_answer"] == "FBN1"
    result = message.artifact  # the whole AgentResult
    assert result["context"][0]["key"] == "FBN1"
    assert len([c for c in result["context"] if c["origin"] != "sage"]) <= 3
    tracer.flush()
    [trace] = tracer.store.list_traces()
    assert trace.name == "skb-agent.ask" and trace.tool_calls >= 1
    assert toolkit.graph() is toolkit.graph()  # compiled once


def test_selecting_tools_and_rejecting_unknown_names(hpo_bundle: Any) -> None:
    only = SKBToolkit(hpo_bundle, tool_names=("cypher",), include_ask=False).get_tools()
    assert [t.name for t in only] == ["cypher"]
    with pytest.raises(ConfigError, match="unknown tool name"):
        SKBToolkit(hpo_bundle, tool_names=("teleport",)).get_tools()


def test_index_without_store_leaves_cypher_out(hpo_mini_skb: Any, hpo_index_dir: Path) -> None:
    from graphs.build import IndexConfig, build_index

    # beside the session index so the embedding cache (one level up) is reused
    index_dir = hpo_index_dir.parent / "no_store"
    if not (index_dir / "manifest.json").exists():
        build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo", store="none"))
    with SKBToolkit(index_dir, include_ask=False) as toolkit:
        names = [t.name for t in toolkit.get_tools()]
    assert names == ["semantic_search", "search_nodes"]
