"""Local tracing: run trees in the LangSmith run schema, stored in SQLite, on real agent runs.

The agent runs use the real index fixture (FalkorDB, HNSW, BM25, MiniLM) with the offline planner;
token accounting uses a fake chat model (the only fake allowed: the LLM).
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import BaseModel
from typer.testing import CliRunner

from agent.api import build_agent
from agent.cli.trace import trace_app
from agent.results import StageUsage
from agent.tracing.tracer import (
    MAX_PAYLOAD_CHARS,
    LocalTracer,
    TraceNotFoundError,
    TraceStore,
    _dump_payload,
    callbacks_for,
    to_jsonable,
    tracer_for,
)

QUESTION = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"


# -- serialisation -------------------------------------------------------------------------------


class _Model(BaseModel):
    name: str
    score: float


def test_to_jsonable_handles_messages_models_arrays_cycles_and_huge_strings() -> None:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    value = {
        "msg": AIMessage("hi", tool_calls=[{"name": "t", "args": {"x": 1}, "id": "c1"}]),
        "tool": ToolMessage('{"hits": []}', tool_call_id="c1", artifact={"hits": []}),
        "model": _Model(name="n", score=0.5),
        "array": np.arange(3, dtype=np.float32),
        "path": Path("/tmp/x"),
        "huge": "x" * 50_000,
        "nan": float("nan"),
        "cyclic": cyclic,
        "obj": object(),
    }
    out = to_jsonable(value)
    json.dumps(out)  # must be JSON-safe
    assert out["msg"]["type"] == "ai" and out["msg"]["tool_calls"][0]["name"] == "t"
    assert out["tool"]["artifact"] == {"hits": []} and out["tool"]["tool_call_id"] == "c1"
    assert out["model"] == {"name": "n", "score": 0.5}
    assert out["array"] == [0.0, 1.0, 2.0]
    assert out["path"] == "/tmp/x"
    assert len(out["huge"]) < 10_000 and "truncated" in out["huge"]
    assert out["nan"] == "nan"
    assert out["cyclic"]["self"].startswith("<cycle")
    assert out["obj"].startswith("<object object")


def test_dump_payload_caps_total_size() -> None:
    text = _dump_payload({"rows": [["y" * 5000] for _ in range(150)]})
    assert text is not None and len(text) <= MAX_PAYLOAD_CHARS
    assert json.loads(text)["_truncated"] is True


def test_dump_payload_falls_back_on_what_the_fast_encoder_refuses() -> None:
    """Integers beyond 64 bits, tuple keys and lone surrogates leave the fast path; the text is still JSON."""
    text = _dump_payload({"big": 2**70, (1, 2): "tuple key", "arr": np.arange(2, dtype=np.int64)})
    assert text is not None
    out = json.loads(text)
    assert out["big"] == 2**70 and out["arr"] == [0, 1] and "tuple key" in out.values()
    surrogate = _dump_payload({"text": "a\ud800b"})
    assert surrogate is not None and json.loads(surrogate)["text"] == "a\ud800b"


def test_a_message_is_encoded_once_and_what_changes_it_is_encoded_again() -> None:
    """A state's messages recur in every node's inputs: each is encoded once and spliced in, with the same text
    the whole encoding gives; a message given new content, and what the fast encoder refuses, are not reused."""
    from agent.tracing import serialise

    cache = serialise._EncodedMessages(4, serialise._fragment)
    original, serialise._MESSAGES = serialise._MESSAGES, cache
    try:
        tool = ToolMessage("result", tool_call_id="c1", artifact={"hits": [{"key": "n1", "score": 0.5}]})
        call = AIMessage("", tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1"}])
        first = _dump_payload({"scratchpad": [call, tool], "step": 1})
        second = _dump_payload({"scratchpad": [call, tool], "step": 2})
        assert first is not None and second is not None
        assert json.loads(first)["scratchpad"] == to_jsonable([call, tool])
        assert json.loads(second)["scratchpad"] == json.loads(first)["scratchpad"]
        if serialise._fragment is not None:  # orjson splices encoded messages; the stdlib has no way to
            assert len(cache._entries) == 2
        tool.content = "changed"
        changed = _dump_payload({"scratchpad": [tool]})
        assert changed is not None and json.loads(changed)["scratchpad"][0]["content"] == "changed"
        huge = ToolMessage("big", tool_call_id="c2", artifact={"n": 2**70})
        out = _dump_payload({"scratchpad": [huge]})
        assert out is not None and json.loads(out)["scratchpad"][0]["artifact"] == {"n": 2**70}
        for i in range(10):
            _dump_payload({"m": HumanMessage(f"q{i}")})
        assert len(cache._entries) <= 4
    finally:
        serialise._MESSAGES = original


def test_a_runs_end_row_keeps_the_inputs_it_started_with_unless_new_ones_arrive(tmp_path: Path) -> None:
    """Inputs are encoded once, at the start: a step that changes its input dict in place is recorded with what
    it saw; inputs handed over with the end (LangChain replaces ``run.inputs``) are recorded as given."""
    from uuid import uuid4

    tracer = LocalTracer(tmp_path / "t.sqlite")
    seen = {"items": [1]}
    kept, replaced = uuid4(), uuid4()
    tracer.on_chain_start({}, seen, run_id=kept, name="kept")
    seen["items"].append(2)
    tracer.on_chain_end({"out": 1}, run_id=kept)
    tracer.on_chain_start({}, {"input": ""}, run_id=replaced, name="replaced")
    tracer.on_chain_end({"out": 2}, run_id=replaced, inputs={"input": "streamed"})
    tracer.flush()
    runs = {r.name: r for summary in tracer.store.list_traces() for _, r in tracer.store.get_tree(summary.id).walk()}
    assert runs["kept"].status == "success" and runs["kept"].inputs == {"items": [1]}
    assert runs["kept"].outputs == {"out": 1}
    assert runs["replaced"].inputs == {"input": "streamed"}
    assert not tracer._inputs_text  # nothing kept once the runs ended


def test_the_writer_stores_one_row_per_run_of_a_batch_the_latest_parents_first() -> None:
    from agent.tracing.tracer import _latest_rows

    batch = [{"id": "parent", "status": "running"}, {"id": "child", "status": "running"},
             {"id": "child", "status": "success"}, None, {"id": "parent", "status": "error"}]
    assert _latest_rows(batch) == [{"id": "parent", "status": "error"}, {"id": "child", "status": "success"}]


# -- token accounting per stage (fake LLM) ---------------------------------------------------------


def _tiny_graph(responses: list[AIMessage]) -> Any:
    model = GenericFakeChatModel(messages=iter(responses))

    def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def act(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("plan", plan)
    graph.add_node("act", act)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "act")
    graph.add_edge("act", END)
    return graph.compile()


def _usage(p: int, c: int) -> dict[str, int]:
    return {"input_tokens": p, "output_tokens": c, "total_tokens": p + c}


def test_tokens_and_llm_calls_are_counted_per_langgraph_node(tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")
    graph = _tiny_graph([AIMessage("a", usage_metadata=_usage(10, 3)), AIMessage("b", usage_metadata=_usage(20, 5))])
    graph.invoke({"messages": [HumanMessage("q")]}, {"callbacks": [tracer]})
    tracer.flush()
    assert tracer.errors == []
    assert tracer.usage_by_stage() == {
        "plan": StageUsage(llm_calls=1, prompt_tokens=10, completion_tokens=3),
        "act": StageUsage(llm_calls=1, prompt_tokens=20, completion_tokens=5),
    }
    assert tracer.last_trace_id is not None
    assert tracer.store.usage_by_stage(tracer.last_trace_id) == tracer.usage_by_stage()
    [summary] = tracer.store.list_traces()
    assert (summary.llm_calls, summary.prompt_tokens, summary.completion_tokens, summary.total_tokens) == (2, 30, 8, 38)
    tree = tracer.store.get_tree(summary.id)
    llm_runs = [r for _, r in tree.walk() if r.run_type == "llm"]
    assert [(r.stage, r.total_tokens) for r in llm_runs] == [("plan", 13), ("act", 25)]
    assert llm_runs[0].inputs["messages"][0][0] == {"type": "human", "content": "q"}


def test_explicit_stage_metadata_wins_over_node_name(tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite", background=False)
    model = GenericFakeChatModel(messages=iter([AIMessage("x", usage_metadata=_usage(7, 1))]))
    model.invoke("hello", {"callbacks": [tracer], "metadata": {"stage": "answer"}})
    assert tracer.usage_by_stage() == {"answer": StageUsage(llm_calls=1, prompt_tokens=7, completion_tokens=1)}


# -- real agent runs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_graph(hpo_bundle: Any) -> Any:
    return build_agent(bundle=hpo_bundle)


def test_agent_run_is_recorded_as_a_langsmith_shaped_tree(agent_graph: Any, tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "traces.sqlite")
    state = agent_graph.invoke({"question": QUESTION}, {"callbacks": [tracer]})
    tracer.flush()
    assert tracer.errors == []
    [summary] = tracer.store.list_traces()
    assert summary.status == "success" and summary.preview.startswith("Which disease")
    assert summary.tool_calls >= 1
    assert summary.llm_calls == 0  # the offline planner is traced but is not an LLM call
    tree = tracer.store.get_tree(summary.id)
    assert tree.parent_run_id is None and tree.trace_id == tree.id
    runs = [r for _, r in tree.walk()]
    assert len(runs) == summary.runs
    by_id = {r.id: r for r in runs}
    for run in runs[1:]:
        parent = by_id[run.parent_run_id or ""]
        assert run.trace_id == tree.id
        assert run.dotted_order.startswith(parent.dotted_order + ".")
        assert run.start_time >= parent.start_time and run.end_time is not None
    node_names = [c.name for c in tree.child_runs]
    # one planner round is call_planner -> run_tools -> observe, all three counted as the act stage
    assert node_names[:5] == ["link_entities", "plan", "call_planner", "run_tools", "observe"]
    assert node_names[-1] == "finalize"
    assert {c.stage for c in tree.child_runs} >= {"link_entities", "plan", "act", "finalize"}
    tools = [r for r in runs if r.run_type == "tool"]
    assert {t.name for t in tools} <= {"semantic_search", "search_nodes", "cypher", "finish"}
    assert all(t.stage == "act" for t in tools)
    assert any(r.run_type == "llm" and r.name == "OfflinePlanner" for r in runs)
    # a planner run holds what the model read: the tool results' text, not their artifacts
    read = [m for r in runs if r.run_type == "llm" for batch in r.inputs["messages"] for m in batch]
    tool_results = [m for m in read if m["type"] == "tool"]
    assert tool_results and all(m["content"] and m["tool_call_id"] and "artifact" not in m for m in tool_results)
    assert any(m["type"] == "ai" and m.get("tool_calls") for m in read)
    # the tool output carries the JSON payload (artifact) the agent saw
    finish = [t for t in tools if t.name == "finish"][-1]
    assert finish.outputs["output"]["artifact"]["keys"][0] == state["result"].context[0].key
    # the root's outputs hold the AgentResult (stored compressed: node payloads carry the whole state)
    assert tree.outputs["result"]["context"][0]["key"] == state["result"].context[0].key
    import sqlite3

    with sqlite3.connect(tmp_path / "traces.sqlite") as conn:
        kinds = dict(conn.execute("SELECT typeof(outputs), COUNT(*) FROM runs GROUP BY 1").fetchall())
    assert kinds.get("blob", 0) >= 1 and kinds.get("text", 0) >= 1


def test_tool_error_is_recorded_with_status_and_message(tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")

    def boom(_: Any) -> Any:
        raise ValueError("store exploded")

    chain = RunnableLambda(lambda x: x, name="outer") | RunnableLambda(boom, name="inner")
    with pytest.raises(ValueError):
        chain.invoke({"q": 1}, {"callbacks": [tracer]})
    tracer.flush()
    [summary] = tracer.store.list_traces()
    assert summary.status == "error" and "store exploded" in (summary.error or "")
    tree = tracer.store.get_tree(summary.id)
    failed = [r for _, r in tree.walk() if r.name == "inner"]
    assert failed and failed[0].status == "error" and "ValueError" in (failed[0].error or "")


def test_a_long_lived_tracer_keeps_nothing_of_the_runs_that_ended(agent_graph: Any, tmp_path: Path) -> None:
    """A server's tracer sees every question it answers: what it holds per run must go when the run ends."""
    tracer = LocalTracer(tmp_path / "t.sqlite")
    for _ in range(3):
        agent_graph.invoke({"question": QUESTION}, {"callbacks": [tracer]})
    tracer.flush()
    traces = tracer.store.list_traces(limit=10)
    assert len(traces) == 3 and all(len(list(tracer.store.get_tree(t.id).walk())) == t.runs > 3 for t in traces)
    assert tracer.order_map == {} and tracer.run_map == {} and not tracer._inputs_text and not tracer._usage


def test_concurrent_questions_share_one_tracer(agent_graph: Any, tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")
    questions = [QUESTION, "Which genes are associated with Marfan syndrome?", "What causes dural ectasia?"] * 2
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda q: agent_graph.invoke({"question": q}, {"callbacks": [tracer]}), questions))
    tracer.flush()
    assert tracer.errors == []
    traces = tracer.store.list_traces(limit=50)
    assert len(traces) == len(questions) and all(t.status == "success" for t in traces)
    assert sorted(t.preview for t in traces) == sorted(q[:79] + "…" if len(q) > 80 else q for q in questions)
    for t in traces:  # no run leaked into another trace
        tree = tracer.store.get_tree(t.id)
        assert len(list(tree.walk())) == t.runs
    assert len(results) == len(questions)


def test_async_runs_are_traced(agent_graph: Any, tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")
    state = asyncio.run(agent_graph.ainvoke({"question": QUESTION}, {"callbacks": [tracer]}))
    tracer.flush()
    [summary] = tracer.store.list_traces()
    tree = tracer.store.get_tree(summary.id)
    assert summary.status == "success" and state["result"].context
    assert [c.name for c in tree.child_runs][:2] == ["link_entities", "plan"]


def test_tracer_for_defaults_to_the_index_dir_and_callbacks_respect_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKB_TRACE_DB", raising=False)
    tracer = tracer_for(tmp_path)
    assert tracer.store.path == tmp_path / "traces.sqlite" and tracer_for(tmp_path) is tracer
    assert callbacks_for(tmp_path) == [tracer]
    assert callbacks_for(tmp_path, enabled=False) == []
    monkeypatch.setenv("SKB_TRACING", "0")
    assert callbacks_for(tmp_path) == []
    monkeypatch.setenv("SKB_TRACE_DB", str(tmp_path / "elsewhere.sqlite"))
    monkeypatch.setenv("SKB_TRACING", "1")
    assert callbacks_for(tmp_path)[0].store.path == tmp_path / "elsewhere.sqlite"  # type: ignore[attr-defined]


def test_run_ids_resolve_by_prefix_or_suffix_and_bad_ids_are_clear(tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "t.sqlite")
    graph = _tiny_graph([AIMessage("a"), AIMessage("b")])
    graph.invoke({"messages": [HumanMessage("q")]}, {"callbacks": [tracer]})
    tracer.flush()
    store = TraceStore(tmp_path / "t.sqlite", read_only=True)
    root = store.list_traces()[0].id
    assert store.resolve_id(root) == root
    assert store.resolve_id(root[:13]) == root  # shared UUIDv7 time prefix: the unique root wins
    assert store.resolve_id(root[-10:]) == root
    with pytest.raises(TraceNotFoundError, match="no run"):
        store.resolve_id("ffffffff-dead")
    with pytest.raises(TraceNotFoundError, match="no trace database"):
        TraceStore(tmp_path / "missing.sqlite", read_only=True)


# -- CLI ------------------------------------------------------------------------------------------


def test_trace_cli_list_show_html(agent_graph: Any, tmp_path: Path) -> None:
    tracer = LocalTracer(tmp_path / "traces.sqlite")
    agent_graph.invoke({"question": QUESTION}, {"callbacks": [tracer]})
    tracer.flush()
    runner = CliRunner()
    env = {"COLUMNS": "200", "SKB_TRACE_DB": ""}
    listed = runner.invoke(trace_app, ["list", "--index-dir", str(tmp_path)], env=env)
    assert listed.exit_code == 0, listed.output
    root = tracer.store.list_traces()[0].id
    assert root in listed.output and "Which disease" in listed.output
    as_json = runner.invoke(trace_app, ["list", "--db", str(tmp_path / "traces.sqlite"), "--json"], env=env)
    assert json.loads(as_json.output.splitlines()[0])["id"] == root

    shown = runner.invoke(trace_app, ["show", root[-12:], "--index-dir", str(tmp_path)], env=env)
    assert shown.exit_code == 0, shown.output
    for text in ("link_entities", "plan", "call_planner", "run_tools", "finalize", "OfflinePlanner", "tool", "nodes"):
        assert text in shown.output
    out = tmp_path / "page.html"
    made = runner.invoke(trace_app, ["html", root, "-o", str(out), "--index-dir", str(tmp_path)], env=env)
    assert made.exit_code == 0, made.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")

    missing = runner.invoke(trace_app, ["show", "nope", "--index-dir", str(tmp_path)], env=env)
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output
    no_db = runner.invoke(trace_app, ["list", "--index-dir", str(tmp_path / "none")], env=env)
    assert no_db.exit_code == 2 and "no trace database" in no_db.output


# -- LangSmith keeps working next to the local tracer -------------------------------------------------


class _Capture(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def _reply(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        type(self).bodies.append(self.path.encode() + b" " + body)
        payload = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = _reply

    def log_message(self, *args: Any) -> None:
        return None


def test_langsmith_env_tracing_still_posts_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LANGSMITH_TRACING set, LangChain's own tracer still sends the runs (to a local stand-in
    for the LangSmith API here), alongside ours."""
    from langchain_core.tracers.langchain import wait_for_all_tracers

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Capture.bodies = []
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2_test_key")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("LANGSMITH_PROJECT", "skb-test")
    try:
        import langsmith.utils

        langsmith.utils.get_env_var.cache_clear()
        tracer = LocalTracer(tmp_path / "t.sqlite")
        graph = _tiny_graph([AIMessage("a"), AIMessage("b")])
        graph.invoke({"messages": [HumanMessage("langsmith-probe-question")]}, {"callbacks": [tracer]})
        wait_for_all_tracers()
        tracer.flush()
    finally:
        server.shutdown()
        import langsmith.utils

        langsmith.utils.get_env_var.cache_clear()
    sent = b"\n".join(_Capture.bodies)
    assert b"/runs" in sent and b"langsmith-probe-question" in sent
    assert tracer.store.list_traces()[0].preview == "langsmith-probe-question"
