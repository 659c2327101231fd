"""Property-based: random JSON-ish arguments into every tool never crash it.

A model (or an MCP client) can send anything. Each tool must answer with a structured JSON
result, a structured ``{"error": ...}`` payload, or a pydantic ValidationError (which the agent
turns into repair feedback through ``check_tool_calls``, tested here too) -- never another
exception, and never a hang.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from agent.llm.toolcalls import check_tool_calls
from tests.reliability_support import within
from tools import make_tools

pytestmark = pytest.mark.integration

_TEXT = st.text(st.characters(codec=None), max_size=40) | st.sampled_from(
    ["", "\x00", "\ud800", "HP:0001250", "OMIM:101200", "Disease", "ASSOCIATED_WITH", "\u202eevil", "🧬" * 5]
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=True) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)

ARG_NAMES = {
    "semantic_search": ["text", "label", "k"],
    "search_nodes": ["keys", "rel_types", "direction", "target_label", "limit", "rank"],
    "cypher": ["query", "params", "max_rows"],
    "finish": ["keys", "scores", "confidence"],
}


@pytest.fixture(scope="module")
def tools(hpo_bundle: Any) -> dict[str, BaseTool]:
    return {t.name: t for t in make_tools(hpo_bundle, cypher_timeout_ms=1000)}


def args_for(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Known argument names with arbitrary values, plus the odd unknown one."""
    known = st.dictionaries(st.sampled_from(ARG_NAMES[name]), JSONISH, max_size=len(ARG_NAMES[name]))
    extra = st.dictionaries(_TEXT, JSONISH, max_size=2)
    return st.tuples(known, extra, st.booleans()).map(lambda t: {**t[0], **t[1]} if t[2] else t[0])


def well_typed_for(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments of the right types with hostile values: these get past validation and reach the tool body."""
    keys = st.lists(_TEXT, min_size=1, max_size=5)
    if name == "semantic_search":
        return st.fixed_dictionaries({"text": _TEXT.filter(bool)}, optional={"label": _TEXT, "k": st.integers(1, 5000)})
    if name == "search_nodes":
        return st.fixed_dictionaries(
            {"keys": keys},
            optional={
                "rel_types": st.lists(_TEXT, max_size=3),
                "direction": st.sampled_from(["out", "in", "both"]),
                "target_label": _TEXT,
                "limit": st.integers(1, 5000),
                "rank": st.booleans(),
            },
        )
    if name == "cypher":
        query = st.lists(
            st.sampled_from(["MATCH (n)", "(n:Disease)", "RETURN n.key", "WHERE n.key = $k", "LIMIT 2", "-[r]->",
                             "(m)", "CREATE", "'x'", "$k", "count(*)", ",", "UNWIND $l AS x", "RETURN x"]),
            min_size=1, max_size=8,
        ).map(" ".join)  # fmt: skip
        return st.fixed_dictionaries(
            {"query": query},
            optional={"params": st.dictionaries(st.sampled_from(["k", "l", "x"]), JSONISH, max_size=3),
                      "max_rows": st.integers(1, 10000)},
        )  # fmt: skip
    return st.fixed_dictionaries({"keys": st.lists(_TEXT, max_size=5)}, optional={"confidence": st.floats(0, 1)})


def check_outcome(tool: BaseTool, args: dict[str, Any]) -> str:
    """Run the tool under a deadline; returns 'ok', 'error' (structured) or 'invalid' (ValidationError)."""
    try:
        content = within(60, lambda: tool.invoke(args), f"{tool.name}.invoke")
    except ValidationError:
        return "invalid"
    payload = json.loads(content)
    assert isinstance(payload, dict)
    content.encode("utf-8")  # the text the model would receive is valid UTF-8
    if "error" in payload:
        err = payload["error"]
        assert set(err) == {"type", "message", "hint"} and err["message"]
        return "error"
    return "ok"


@pytest.mark.parametrize("name", list(ARG_NAMES))
def test_random_arguments_never_crash(tools: dict[str, BaseTool], name: str) -> None:
    outcomes: list[str] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args_for(name))
    def prop(args: dict[str, Any]) -> None:
        outcomes.append(check_outcome(tools[name], args))
        # the agent's own pre-check never raises, and agrees on what is invalid
        message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "c1", "type": "tool_call"}])
        checked = check_tool_calls(message, tools)
        assert len(checked.valid) + len(checked.errors) == 1

    prop()
    assert "invalid" in outcomes  # the generator does reach validation


@pytest.mark.parametrize("name", list(ARG_NAMES))
def test_well_typed_hostile_arguments_get_a_result_or_a_structured_error(tools: dict[str, BaseTool], name: str) -> None:
    outcomes: list[str] = []

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(well_typed_for(name))
    def prop(args: dict[str, Any]) -> None:
        outcomes.append(check_outcome(tools[name], args))

    prop()
    assert {"ok", "error"} & set(outcomes)  # most calls reach the tool body


def test_check_tool_calls_rejects_what_the_tool_would_reject(tools: dict[str, BaseTool]) -> None:
    bad = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "cypher",
                "args": {"query": "MATCH (n) RETURN n", "params": {"a`b": 1}},
                "id": "1",
                "type": "tool_call",
            },
            {"name": "search_nodes", "args": {"keys": []}, "id": "2", "type": "tool_call"},
            {"name": "semantic_search", "args": {"text": "x", "k": 0}, "id": "3", "type": "tool_call"},
            {"name": "drop_graph", "args": {}, "id": "4", "type": "tool_call"},
            {"name": "finish", "args": {"keys": ["a"], "scores": [1, 2]}, "id": "5", "type": "tool_call"},
        ],
    )
    checked = check_tool_calls(bad, tools)
    assert checked.valid == [] and len(checked.errors) == 5
    assert "unknown tool 'drop_graph'" in str(checked.errors[3].content)
