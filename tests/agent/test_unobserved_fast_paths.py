"""The question path skips LangChain's callback machinery only where nothing observes it, with the same results.

Three shortcuts of the offline question path, each held to the ordinary path on real components (a neutral
graph of trees, birds and nests; FalkorDB store; the real offline planner):

- a tool call with no callback handler runs without ``BaseTool.run``'s events and returns the same
  ``ToolMessage`` (content, artifact, status), errors included; with a handler it goes through ``BaseTool.run``;
- the offline planner's turn with no handler, cache or rate limiter is ``next_message`` itself, the same
  message ``invoke`` returns (less the run id); otherwise the model is invoked;
- a round whose calls all run on the process's own data (``SKBTool.in_process``) runs on the calling thread;
  a call that may wait on the store keeps the round concurrent.

And end to end: the agent's answers are the same with a callback handler attached (every ordinary path) and
without (every shortcut).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.tracers.context import collect_runs
from pydantic import ValidationError

import agent.planning.offline as offline_module
import tools.cypher as cypher_module
import tools.search_nodes as search_nodes_module
from agent import AgentConfig, ask
from agent.nodes.act import all_in_process
from agent.planning.offline import OfflinePlanner
from graphs.bundle import IndexBundle
from graphs.store.aggregate import path_walk_query
from tools import make_tools

pytestmark = pytest.mark.integration

QUESTION = "which birds nest in the tree oak?"


class Recorder(BaseCallbackHandler):
    """A handler that notes which events it saw."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.events.append("tool_start")

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.events.append("chat_model_start")


@pytest.fixture(scope="module")
def bundle(orchard: IndexBundle) -> IndexBundle:
    """The shared orchard index (``tests/conftest.py``)."""
    return orchard


@pytest.fixture(scope="module")
def tools(bundle: IndexBundle) -> dict[str, BaseTool]:
    return {t.name: t for t in make_tools(bundle, lambda: QUESTION)}


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("search_nodes", {"keys": ["oak", "Oak-2"], "direction": "in", "limit": 5}),
    ("search_nodes", {"keys": ["oak"], "target_label": "NoSuchLabel"}),  # a tool error, as a result
    ("search_nodes", {"keys": ["oak"], "include_triples": True}),
    ("semantic_search", {"text": "old oak tree", "k": 3}),
    ("cypher", {"query": "MATCH (b:Bird)-[:NESTS_IN]->(t:Tree {key: 'oak'}) RETURN b.key AS key ORDER BY key"}),
    ("cypher", {"query": "MATCH (n) DELETE n"}),  # refused by the read-only guard
    ("finish", {"keys": ["w00", "w03"], "scores": [2.0, 1.0]}),
]


def _same(a: ToolMessage, b: ToolMessage) -> None:
    assert (a.content, a.status, a.name, a.tool_call_id) == (b.content, b.status, b.name, b.tool_call_id)
    dump = lambda m: m.artifact.model_dump() if hasattr(m.artifact, "model_dump") else m.artifact
    assert dump(a) == dump(b)


@pytest.mark.parametrize(("name", "args"), CALLS)
def test_a_tool_call_returns_the_same_message_observed_or_not(
    tools: dict[str, BaseTool], monkeypatch: pytest.MonkeyPatch, name: str, args: dict[str, Any]
) -> None:
    ordinary_runs: list[str] = []
    ordinary = BaseTool.run

    def counted(self: BaseTool, *a: Any, **k: Any) -> Any:
        ordinary_runs.append(self.name)
        return ordinary(self, *a, **k)

    monkeypatch.setattr(BaseTool, "run", counted)
    call = {"type": "tool_call", "id": "c1", "name": name, "args": {**args, "question": QUESTION}}
    quiet = tools[name].invoke(call)
    assert ordinary_runs == []  # nothing observed the call: BaseTool.run's events were skipped
    recorder = Recorder()
    observed = tools[name].invoke(call, config={"callbacks": [recorder]})
    assert ordinary_runs == [name] and recorder.events == ["tool_start"]
    assert isinstance(quiet, ToolMessage) and isinstance(observed, ToolMessage)
    _same(quiet, observed)


def test_a_bad_argument_fails_the_same_way_observed_or_not(tools: dict[str, BaseTool]) -> None:
    call = {"type": "tool_call", "id": "c1", "name": "search_nodes", "args": {"keys": ["oak"], "limit": -3}}
    with pytest.raises(ValidationError) as quiet:
        tools["search_nodes"].invoke(call)
    with pytest.raises(ValidationError) as observed:
        tools["search_nodes"].invoke(call, config={"callbacks": [Recorder()]})
    assert quiet.value.errors() == observed.value.errors()


def _planner_turns(bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch) -> list[list[BaseMessage]]:
    """The message lists the offline planner answered while the agent answered QUESTION."""
    seen: list[list[BaseMessage]] = []
    ordinary = OfflinePlanner.next_message

    def spy(self: OfflinePlanner, messages: Any) -> AIMessage:
        seen.append(list(messages))
        return ordinary(self, messages)

    monkeypatch.setattr(OfflinePlanner, "next_message", spy)
    ask(QUESTION, bundle=bundle, config=AgentConfig())
    monkeypatch.setattr(OfflinePlanner, "next_message", ordinary)
    return seen


def test_the_offline_planners_turn_is_the_message_invoke_returns(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = _planner_turns(bundle, monkeypatch)
    assert len(turns) >= 2  # at least a round of tool calls and the finish
    planner = OfflinePlanner(bundle)
    for messages in turns:
        direct = planner.unobserved_reply(messages, {})
        invoked = planner.invoke(messages)
        assert direct is not None and isinstance(invoked, AIMessage)
        assert direct.model_dump(exclude={"id"}) == invoked.model_dump(exclude={"id"})
    messages = turns[0]
    recorder = Recorder()
    assert planner.unobserved_reply(messages, {"callbacks": [recorder]}) is None  # observed: invoke it
    assert OfflinePlanner(bundle, cache=InMemoryCache()).unobserved_reply(messages, {}) is None
    assert planner.unobserved_reply([], {}) is None  # no plan: the ordinary call raises the planner's error


def test_the_agent_answers_the_same_with_or_without_an_observer(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet_turns: list[str] = []
    ordinary = offline_module.OfflinePlanner.unobserved_reply

    def counted(self: OfflinePlanner, messages: Any, config: Any) -> AIMessage | None:
        reply = ordinary(self, messages, config)
        quiet_turns.append("direct" if reply is not None else "invoked")
        return reply

    monkeypatch.setattr(offline_module.OfflinePlanner, "unobserved_reply", counted)
    quiet = ask(QUESTION, bundle=bundle)
    assert quiet_turns and set(quiet_turns) == {"direct"}
    quiet_turns.clear()
    recorder = Recorder()
    observed = ask(QUESTION, bundle=bundle, run_config={"callbacks": [recorder]})
    assert quiet_turns and set(quiet_turns) == {"invoked"}
    assert "tool_start" in recorder.events and "chat_model_start" in recorder.events
    assert [(c.key, c.score) for c in quiet.context] == [(c.key, c.score) for c in observed.context]
    assert quiet.context  # the question has an answer to compare


def test_a_round_runs_on_the_calling_thread_only_when_no_call_can_wait(
    bundle: IndexBundle, tools: dict[str, BaseTool], monkeypatch: pytest.MonkeyPatch
) -> None:
    local = [
        {"name": "search_nodes", "id": "a", "args": {"keys": ["oak", "Oak-2"]}},
        {"name": "search_nodes", "id": "b", "args": {"keys": ["w00"], "among": ["oak"]}},
    ]
    assert all_in_process(tools, local)
    assert all_in_process(tools, [])
    triples = {"name": "search_nodes", "id": "c", "args": {"keys": ["oak"], "include_triples": True}}
    assert not all_in_process(tools, [*local, triples])  # raw edges come from the store
    store = {"name": "cypher", "id": "d", "args": {"query": "MATCH (n) RETURN n.key AS key"}}
    assert not all_in_process(tools, [*local, store])  # a tool that says nothing may wait
    assert not all_in_process(tools, [{"name": "no_such_tool", "id": "e", "args": {}}])
    walk = {"name": "cypher", "id": "f", "args": {
        "query": path_walk_query("Tree", [("NESTS_IN", "in"), ("VISITS", "out")], 20), "params": {"key": "oak"}}}
    assert all_in_process(tools, [*local, walk])  # a relation-path walk is read from the SKB
    monkeypatch.setattr(cypher_module, "READ_SKB", False)
    assert not all_in_process(tools, [walk])
    monkeypatch.setattr(search_nodes_module, "HUB_EDGES", 2)  # oak is now a hub, sampled on the store
    assert not all_in_process(tools, local[:1])
    assert all_in_process(tools, local[1:])  # a membership check samples nothing


def test_a_fused_node_leaves_the_state_its_steps_would_leave() -> None:
    """Three nodes as three LangGraph steps and as one fused step, on the agent's own state (its reducers:
    messages, appended lists, merged timings, last values): the same final state, message ids aside."""
    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, StateGraph

    from agent.graph import fused
    from agent.state import AgentState

    def first(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return {"scratchpad": [AIMessage(content="a")], "degraded": ["one"], "timings_ms": {"x": 1.0}, "step": 1}

    def second(state: Any, config: RunnableConfig) -> dict[str, Any]:
        # reads what the first wrote, through the reducers
        seen = [m.content for m in state["scratchpad"]]
        return {"scratchpad": [HumanMessage(content=f"saw {seen}")], "degraded": [f"step {state['step']}"],
                "timings_ms": {"x": 2.0, "y": 3.0}, "step": state["step"] + 1, "observations": [{"n": len(seen)}]}

    def third(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return {"degraded": list(state["degraded"]), "done": True, "candidates": {"k": {"score": float(state["step"])}}}

    def run(shape: str) -> dict[str, Any]:
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(AgentState)
        if shape == "steps":
            graph.add_node("first", first)
            graph.add_node("second", second)
            graph.add_node("third", third)
            graph.add_edge(START, "first")
            graph.add_edge("first", "second")
            graph.add_edge("second", "third")
            graph.add_edge("third", END)
        else:
            graph.add_node("all", fused(first, second, third))
            graph.add_edge(START, "all")
            graph.add_edge("all", END)
        start = {"question": "q", "scratchpad": [HumanMessage(content="plan", id="p")], "degraded": ["before"]}
        return dict(graph.compile().invoke(start))

    steps, one = run("steps"), run("fused")
    content = lambda s: [(type(m).__name__, m.content) for m in s["scratchpad"]]
    assert content(steps) == content(one) == [("HumanMessage", "plan"), ("AIMessage", "a"), ("HumanMessage", "saw ['plan', 'a']")]
    assert all(m.id for m in one["scratchpad"]) and len({m.id for m in one["scratchpad"]}) == 3
    drop = lambda s: {k: v for k, v in s.items() if k != "scratchpad"}
    assert drop(steps) == drop(one)
    assert one["degraded"] == ["before", "one", "step 1", "before", "one", "step 1"]
    assert one["timings_ms"] == {"x": 2.0, "y": 3.0} and one["step"] == 2


@pytest.mark.parametrize(
    ("settings", "stage"),
    [
        ({"k": 5}, "expand"),
        ({"k": 5, "fallback_fill": True, "policy": "always"}, "fallback"),  # a short list: fallback, then expansion
        ({"k": 3, "constraints": True}, "constraints"),  # the constraint stage runs offline, in its own step
        ({"k": 5, "rerank": "listwise"}, "rerank"),  # without a model the rerank stage notes why it did nothing
        ({"k": 5, "max_rounds": 1}, "fallback"),
    ],
)
def test_an_unobserved_ask_takes_the_graph_of_fewer_steps_with_the_same_result(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], stage: str
) -> None:
    from agent import api
    from agent.graph import AgentGraph

    shapes: list[str] = []
    ordinary_compile, fewer_compile = AgentGraph.compile, AgentGraph.compile_unobserved

    def compile_spy(self: AgentGraph, **kwargs: Any) -> Any:
        shapes.append("steps")
        return ordinary_compile(self, **kwargs)

    def fewer_spy(self: AgentGraph) -> Any:
        shapes.append("fewer")
        return fewer_compile(self)

    monkeypatch.setattr(AgentGraph, "compile", compile_spy)
    monkeypatch.setattr(AgentGraph, "compile_unobserved", fewer_spy)
    monkeypatch.setattr(api, "_CACHE", type(api._CACHE)())
    cfg = AgentConfig(**settings)
    questions = [QUESTION, "which trees does bird w01 visit?", "what shades the oak?", "nest one"]
    ran: set[str] = set()
    for q in questions:
        quiet = ask(q, bundle=bundle, config=cfg)
        observed = ask(q, bundle=bundle, config=cfg, run_config={"tags": ["observed"]})
        a, b = quiet.model_dump(mode="json"), observed.model_dump(mode="json")
        a.pop("timings_ms"), b.pop("timings_ms")
        assert a == b, q
        assert set(quiet.timings_ms) == set(observed.timings_ms)  # every node ran in both shapes
        ran |= set(quiet.timings_ms)
    assert stage in ran  # the path under test was taken
    assert shapes == ["fewer", "steps"]  # compiled once each, then cached
    with collect_runs():  # a tracer from the context (as tracing_v2_enabled or LANGSMITH_TRACING adds one)
        assert not api._unobserved(cfg, None, None)
    assert api._unobserved(cfg, None, None)
    assert not api._unobserved(cfg.model_copy(update={"planner": "openai"}), None, None)
