"""One planner round: its tool calls run concurrently, results keep call order, and every tool result
the planner reads stays within the token budget (scripted model and the OpenAI-compatible HTTP stub)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel

from agent import AgentConfig, ask
from agent.config import AgentConfig as Config
from agent.fake_llm import ScriptedChatModel
from agent.graph import AgentGraph
from agent.runtime import Runtime
from tests.openai_stub import Stub, completion
from tools.results import CHARS_PER_TOKEN, estimate_tokens

pytestmark = pytest.mark.integration


class ProbeArgs(BaseModel):
    n: int


class Probe:
    """A tool that records when each call starts and ends; with a barrier, a call can only finish
    once ``parties`` calls are inside it at the same time (so sequential execution breaks it)."""

    def __init__(self, parties: int | None) -> None:
        self.barrier = threading.Barrier(parties, timeout=30) if parties else None
        self.lock = threading.Lock()
        self.spans: dict[int, tuple[float, float, int]] = {}

    def tool(self) -> BaseTool:
        def run(n: int) -> str:
            start = time.perf_counter()
            if self.barrier is not None:
                self.barrier.wait()  # raises BrokenBarrierError when the others never arrive
            end = time.perf_counter()
            with self.lock:
                self.spans[n] = (start, end, threading.get_ident())
            return json.dumps({"n": n})

        return StructuredTool.from_function(run, name="probe", description="records its span", args_schema=ProbeArgs)


class ProbeRuntime(Runtime):
    def __init__(self, bundle: Any, config: Config, model: Any, probe: Probe) -> None:
        super().__init__(bundle, config, model)
        self.probe = probe

    def tools(self, cfg: Config, question: str) -> dict[str, BaseTool]:
        return {**super().tools(cfg, question), "probe": self.probe.tool()}


def ProbeGraph(bundle: Any, config: Config, model: Any, probe: Probe) -> AgentGraph:
    return AgentGraph(bundle, config, model, runtime=ProbeRuntime(bundle, config, model, probe))


def _probe_round(n: int) -> AIMessage:
    calls = [{"name": "probe", "args": {"n": i}, "id": f"p{i}", "type": "tool_call"} for i in range(n)]
    return AIMessage(content="", tool_calls=calls)  # type: ignore[arg-type]


def _finish() -> AIMessage:
    call = {"name": "finish", "args": {"keys": ["OMIM:101200"]}, "id": "f", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call])  # type: ignore[list-item]


def _run(bundle: Any, probe: Probe, **cfg: Any) -> dict[str, Any]:
    config = Config(policy="never", max_entities=0, **cfg)
    model = ScriptedChatModel([_probe_round(4), _finish()])
    graph = ProbeGraph(bundle, config, model, probe).compile()
    return graph.invoke({"question": "Apert syndrome"})  # type: ignore[no-any-return]


def test_one_rounds_calls_overlap(hpo_bundle: Any) -> None:
    """Four calls of one round meet at a 4-party barrier: they can only all finish if all four were
    running at once. Their spans overlap and they ran on different threads."""
    probe = Probe(parties=4)
    state = _run(hpo_bundle, probe, max_parallel_tools=4)
    assert sorted(probe.spans) == [0, 1, 2, 3]
    starts = [s for s, _, _ in probe.spans.values()]
    ends = [e for _, e, _ in probe.spans.values()]
    assert max(starts) < min(ends)  # every call had started before any finished
    assert len({t for _, _, t in probe.spans.values()}) == 4
    assert not [d for d in state["result"].degraded if "probe" in d]
    assert state["result"].tool_calls == 5


def test_round_results_keep_call_order_and_sequential_mode_does_not_overlap(hpo_bundle: Any) -> None:
    probe = Probe(parties=None)
    config = Config(policy="never", max_entities=0, max_parallel_tools=1)
    graph = ProbeGraph(hpo_bundle, config, ScriptedChatModel([_probe_round(4), _finish()]), probe).compile()
    updates = [u for u in graph.stream({"question": "Apert syndrome"}, stream_mode="updates") if "run_tools" in u]
    messages = updates[0]["run_tools"]["round_messages"]
    assert [m.tool_call_id for m in messages] == ["p0", "p1", "p2", "p3"]
    spans = [probe.spans[i] for i in range(4)]
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(3))  # one after another


def test_a_failing_call_is_reported_and_the_others_still_run(hpo_bundle: Any) -> None:
    """With parties=5 and only 4 calls, every call breaks the barrier: each failure is a typed error
    message (status error) and a degraded note, and the run still finishes."""
    probe = Probe(parties=5)
    probe.barrier = threading.Barrier(5, timeout=0.2)
    state = _run(hpo_bundle, probe, max_parallel_tools=4)
    notes = [d for d in state["result"].degraded if d.startswith("tool probe failed")]
    assert len(notes) == 4 and "BrokenBarrierError" in notes[0]
    assert state["result"].context[0].key == "OMIM:101200"


def test_scripted_run_tool_text_stays_within_the_budget(hpo_bundle: Any) -> None:
    """Big results (50 hits, a hub's neighbours) reach the planner cut to the budget, with a note."""
    calls = [
        {"name": "semantic_search", "args": {"text": "skull", "k": 50}, "id": "s", "type": "tool_call"},
        {
            "name": "search_nodes",
            "args": {"keys": ["HP:0000520", "HP:0010621"], "direction": "both"},
            "id": "n",
            "type": "tool_call",
        },
    ]
    model = ScriptedChatModel([AIMessage(content="", tool_calls=calls), _finish()])  # type: ignore[arg-type]
    config = Config(policy="never", max_entities=0, tool_output_tokens=200, per_call_k=50)
    graph = AgentGraph(hpo_bundle, config, model).compile()
    updates = [u for u in graph.stream({"question": "skull"}, stream_mode="updates") if "run_tools" in u]
    messages: list[ToolMessage] = updates[0]["run_tools"]["round_messages"]
    hits = messages[0]
    assert estimate_tokens(str(hits.content)) <= 200 and len(hits.artifact.hits) == 50
    assert json.loads(str(hits.content))["omitted"] > 0
    assert all(estimate_tokens(str(m.content)) <= 200 for m in messages)


def test_openai_http_prompt_growth_per_round_stays_within_the_budget(openai_stub: Stub, hpo_bundle: Any) -> None:
    """Through the real ChatOpenAI client: each round's tool messages add at most budget x calls
    tokens to the next prompt, although the raw results are many times larger."""
    budget = 250
    openai_stub.replies = [
        completion(content=json.dumps({"target_type": "Disease", "relation_paths": []}), tokens=50),
        completion(
            calls=[
                ("semantic_search", json.dumps({"text": "skull and fingers", "k": 50})),
                ("search_nodes", json.dumps({"keys": ["HP:0000520", "HP:0010621"], "direction": "both"})),
                ("cypher", json.dumps({"query": "MATCH (n) RETURN n.key, n.name LIMIT 200", "max_rows": 200})),
            ]
        ),
        completion(calls=[("semantic_search", json.dumps({"text": "syndactyly", "label": "Phenotype", "k": 50}))]),
        completion(calls=[("finish", json.dumps({"keys": ["OMIM:101200"]}))]),
    ]
    config = AgentConfig(
        planner="openai",
        model="stub-model",
        base_url=openai_stub.url,
        policy="never",
        llm_backoff_initial_s=0.01,
        tool_output_tokens=budget,
        per_call_k=50,
        cypher_max_rows=200,
    )
    result = ask("Which disease has a skull shape defect and webbed fingers?", bundle=hpo_bundle, config=config)
    assert result.context[0].key == "OMIM:101200"
    act = [r["body"]["messages"] for r in openai_stub.requests[1:]]
    assert len(act) == 3
    for before, after in itertools.pairwise(act):
        new_tools = [m for m in after[len(before) :] if m["role"] == "tool"]
        assert new_tools
        for m in new_tools:
            assert estimate_tokens(m["content"]) <= budget
        added = sum(len(m["content"]) for m in new_tools)
        assert added <= budget * CHARS_PER_TOKEN * len(new_tools)
    # the raw results were far larger than what the model read
    assert result.tool_output_tokens <= budget * 5


def test_run_concurrently_caps_parallelism_keeps_order_and_uses_the_calling_thread() -> None:
    from agent.runtime import run_concurrently

    lock = threading.Lock()
    active = {"now": 0, "most": 0}
    threads: set[int] = set()

    def work(i: int) -> int:
        with lock:
            active["now"] += 1
            active["most"] = max(active["most"], active["now"])
            threads.add(threading.get_ident())
        time.sleep(0.02)
        with lock:
            active["now"] -= 1
        return i * i

    assert run_concurrently(work, list(range(8)), 3) == [i * i for i in range(8)]
    assert active["most"] <= 3 and len(threads) >= 2
    assert threading.get_ident() in threads  # the caller did its share
    threads.clear()
    assert run_concurrently(work, [1, 2, 3], 1) == [1, 4, 9]
    assert threads == {threading.get_ident()}


def test_run_concurrently_finishes_when_the_shared_pool_is_busy() -> None:
    """Other questions' calls may hold every pooled thread: the calling thread drains the queue alone."""
    from agent.runtime import TOOL_THREADS, run_concurrently
    from agent.runtime import shared_pool as _shared_pool

    release = threading.Event()
    blockers = [_shared_pool().submit(release.wait, 10) for _ in range(TOOL_THREADS)]
    try:
        assert run_concurrently(lambda i: -i, [1, 2, 3, 4], 4) == [-1, -2, -3, -4]
        assert not any(b.done() for b in blockers)  # it did not wait for a pooled thread to come free
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()


def test_offline_planner_question_vector_is_prefetched_once_and_reused(
    hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With semantic_net=always the offline planner's first round needs the question's vector: the agent
    starts it on the tool pool before the planner's turn, and the tools wait for that one instead of
    computing their own. A planner that does not ask for it (a scripted model here; the offline planner
    with semantic_net=as-needed) gets no prefetch."""
    from tools import common

    calls: list[str] = []
    real = common._embed_and_cache

    def counted(embedder: Any, key: Any, text: str) -> Any:
        calls.append(threading.current_thread().name)
        return real(embedder, key, text)

    monkeypatch.setattr(common, "_embed_and_cache", counted)
    question = "Which disease shows a tower-shaped skull and fused fingers (prefetch test)?"
    graph = AgentGraph(hpo_bundle, Config(policy="never", semantic_net="always")).compile()
    started_before_tools = None
    with hpo_bundle.pinned():
        for update in graph.stream({"question": question}, stream_mode="updates"):
            if "call_planner" in update and started_before_tools is None:
                # the stream pauses here: the first round's tools have not run yet
                with common._query_lock:
                    started_before_tools = any(k[1] == question for k in [*common._pending, *common._query_cache])
            if "finalize" in update:
                result = update["finalize"]["result"]
    assert started_before_tools is True
    assert result.tool_calls >= 2
    assert len(calls) == 1 and calls[0].startswith("skb-tool")  # computed once, in the background

    calls.clear()
    search = {
        "name": "semantic_search",
        "args": {"text": "webbed fingers (prefetch test)"},
        "id": "s",
        "type": "tool_call",
    }
    model = ScriptedChatModel([AIMessage(content="", tool_calls=[search]), _finish()])  # type: ignore[list-item]
    AgentGraph(hpo_bundle, Config(policy="never", max_entities=0), model).compile().invoke({"question": "webbed"})
    assert len(calls) == 1 and not calls[0].startswith("skb-tool")  # computed by the tool itself, on demand

    calls.clear()
    other = "Which disease shows a tower-shaped skull and fused fingers (no prefetch test)?"
    as_needed = AgentGraph(hpo_bundle, Config(policy="never")).compile()
    with hpo_bundle.pinned():
        for update in as_needed.stream({"question": other}, stream_mode="updates"):
            if "call_planner" in update:
                with common._query_lock:
                    assert not any(k[1] == other for k in [*common._pending, *common._query_cache])
                break
