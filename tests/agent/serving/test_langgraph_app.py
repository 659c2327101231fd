"""The agent as a chat assistant: SQLite memory per thread, streaming, the langgraph.json factory.

All on the real index fixture with the offline planner. The `langgraph dev` round trip runs only
where `langgraph-cli[inmem]` is installed (it is not a project dependency; see README.md).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agent.results import AgentResult
from agent.serving.langgraph_app import chat_graph, load_graph, make_graph
from tests.paths import REPO

Q1 = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"
Q2 = "Which genes are associated with Marfan syndrome?"
Q3 = "What is aortic root aneurysm?"


def _thread(tid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": tid}}


def test_second_turn_sees_the_first_and_memory_survives_a_restart(hpo_bundle: Any, tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    graph = chat_graph(bundle=hpo_bundle, threads_db=db, tracing=False)
    first = graph.invoke({"messages": [HumanMessage(Q1)]}, _thread("a"))
    assert first["result"].question == Q1 and first["result"].context[0].key in {"OMIM:101200", "ORPHA:87"}

    second = graph.invoke({"messages": [HumanMessage(Q2)]}, _thread("a"))
    texts = [(m.type, str(m.content)) for m in second["messages"]]
    assert [t for t, _ in texts] == ["human", "ai", "human", "ai"]
    assert texts[0][1] == Q1 and texts[2][1] == Q2
    assert second["result"].question == Q2  # the newest human message, not the stored question
    assert second["result"].context[0].key == "FBN1"

    # a new graph on the same file (a new process would do the same) continues the thread;
    # a {"question": ...} turn is appended to the conversation too
    reopened = chat_graph(bundle=hpo_bundle, threads_db=db, tracing=False)
    before = reopened.get_state(_thread("a")).values
    assert len(before["messages"]) == 4 and isinstance(before["result"], AgentResult)
    third = reopened.invoke({"question": Q3}, _thread("a"))
    assert [str(m.content) for m in third["messages"] if m.type == "human"] == [Q1, Q2, Q3]
    assert third["result"].question == Q3

    other = reopened.invoke({"messages": [HumanMessage(Q2)]}, _thread("b"))
    assert len(other["messages"]) == 2  # threads are isolated


def test_stream_updates_and_answer_messages(hpo_bundle: Any, tmp_path: Path) -> None:
    graph = chat_graph(bundle=hpo_bundle, threads_db=tmp_path / "threads.sqlite", tracing=False)
    steps: list[str] = []
    answer_parts: list[str] = []
    for mode, chunk in graph.stream(
        {"messages": [HumanMessage(Q1)]}, _thread("s"), stream_mode=["updates", "messages"]
    ):
        if mode == "updates":
            steps.extend(chunk)
        else:
            message, metadata = chunk
            if metadata.get("langgraph_node") == "finalize" and isinstance(message, AIMessage):
                answer_parts.append(str(message.content))
    assert steps[:3] == ["link_entities", "plan", "call_planner"] and steps[-1] == "finalize"
    final = graph.get_state(_thread("s")).values["result"]
    assert "".join(answer_parts) == final.answer and "Apert syndrome" in final.answer


def test_example_chat_client_runs_two_turns(
    hpo_bundle: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        chat_memory = importlib.import_module("chat_memory")
    finally:
        sys.path.remove(str(REPO / "examples"))
    graph = chat_graph(bundle=hpo_bundle, threads_db=tmp_path / "threads.sqlite", tracing=False)
    a1 = chat_memory.turn(graph, "ex", Q1)
    a2 = chat_memory.turn(graph, "ex", Q2)
    out = capsys.readouterr().out
    assert "step: link_entities" in out and "Apert syndrome" in a1 and "FBN1" in a2
    assert len(graph.get_state(_thread("ex")).values["messages"]) == 4


def test_chat_graph_traces_by_default(hpo_bundle: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.tracing.tracer import TraceStore, tracer_for

    monkeypatch.setenv("SKB_TRACE_DB", str(tmp_path / "traces.sqlite"))
    monkeypatch.delenv("SKB_TRACING", raising=False)
    graph = chat_graph(bundle=hpo_bundle, threads_db=tmp_path / "threads.sqlite")
    graph.invoke({"messages": [HumanMessage(Q2)]}, _thread("t"))
    tracer_for(None).flush()
    traces = TraceStore(tmp_path / "traces.sqlite", read_only=True).list_traces()
    assert len(traces) == 1 and traces[0].preview == Q2


def test_langgraph_json_points_at_the_factory(hpo_index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = json.loads((REPO / "langgraph.json").read_text())
    assert config["dependencies"] == ["."]
    path, _, attr = config["graphs"]["skb_agent"].partition(":")
    assert (REPO / path).exists()
    module = importlib.import_module(path.removeprefix("./").removesuffix(".py").replace("/", "."))
    factory = getattr(module, attr)
    assert factory is make_graph
    monkeypatch.setenv("SKB_INDEX_DIR", str(hpo_index_dir))
    monkeypatch.setenv("SKB_TRACING", "0")
    graph = asyncio.run(factory({"configurable": {}}))
    assert graph.checkpointer is None  # LangGraph Server brings its own persistence
    assert graph is load_graph(hpo_index_dir)  # built once per index, shared by runs
    state = graph.invoke({"messages": [HumanMessage(Q2)]}, {"configurable": {"k": 2, "k_prime": 0}})
    assert [c.key for c in state["result"].context][:1] == ["FBN1"] and len(state["result"].context) <= 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
@pytest.mark.skipif(
    importlib.util.find_spec("langgraph_api") is None or importlib.util.find_spec("langgraph_cli") is None,
    reason="langgraph-cli[inmem] not installed (optional: pip install 'langgraph-cli[inmem]')",
)
def test_langgraph_dev_serves_the_agent_to_the_sdk(hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path) -> None:
    port = _free_port()
    env = dict(os.environ, SKB_INDEX_DIR=str(hpo_index_dir), LANGGRAPH_CLI_NO_ANALYTICS="1",
               LANGSMITH_TRACING="false", SKB_TRACE_DB=str(tmp_path / "traces.sqlite"))  # fmt: skip
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_cli", "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
         "--port", str(port)],
        cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        import httpx

        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "langgraph dev did not start"
            time.sleep(0.5)
        sys.path.insert(0, str(REPO / "examples"))
        try:
            client = importlib.import_module("langgraph_sdk_client")
        finally:
            sys.path.remove(str(REPO / "examples"))
        messages = client.chat(f"http://127.0.0.1:{port}", [Q1, Q2])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert [m["type"] for m in messages] == ["human", "ai", "human", "ai"]
    assert "Apert syndrome" in messages[1]["content"] and "FBN1" in messages[3]["content"]
