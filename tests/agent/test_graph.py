"""The agent graph driven by a scripted chat model over a real hpo_mini index.

Each test scripts the planner's turns (the only fake) and checks what the real tools, the
candidate pool, the fallback, the routing and the result assembly make of them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agent import AgentConfig, AgentResult, ask, build_agent
from agent.fake_llm import ScriptedChatModel
from graphs.errors import ConfigError, PlannerError

pytestmark = pytest.mark.integration

_ids = iter(range(10**6))


def turn(*calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (100, 10)) -> AIMessage:
    """One planner turn: tool calls with fresh ids and token usage."""
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": f"call_{next(_ids)}", "type": "tool_call"} for n, a in calls],
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
    )


def last_tool_payloads(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """The JSON of the tool messages that answered the most recent AI turn."""
    out: list[dict[str, Any]] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            out.append(json.loads(str(message.content)))
        elif isinstance(message, AIMessage):
            break
    return list(reversed(out))


def finish_with_hits(messages: list[BaseMessage]) -> AIMessage:
    hits = last_tool_payloads(messages)[0]["hits"]
    return turn(("finish", {"keys": [h["key"] for h in hits]}))


def config(**overrides: Any) -> AgentConfig:
    base: dict[str, Any] = {"policy": "never", "llm_backoff_initial_s": 0.01}
    return AgentConfig.model_validate({**base, **overrides})


def run(bundle: Any, script: list[Any], question: str, cfg: AgentConfig | None = None) -> tuple[AgentResult, ScriptedChatModel]:
    model = ScriptedChatModel(script)
    result = ask(question, bundle=bundle, config=cfg or config(), chat_model=model)
    return result, model


APERT = "Which disease has cutaneous syndactyly of toes and brachyturricephaly?"


def test_query_only_path(hpo_bundle: Any) -> None:
    script: list[Any] = [
        turn(("semantic_search", {"text": "Apert syndrome", "label": "Disease", "k": 4}), tokens=(120, 15)),
        finish_with_hits,
    ]
    result, model = run(hpo_bundle, script, "Tell me about Apert syndrome")
    assert model.remaining == 0
    assert {item.key for item in result.context[:2]} == {"OMIM:101200", "ORPHA:87"}
    assert len(result.context) == 4
    assert [item.rank for item in result.context] == [1, 2, 3, 4]
    scores = [item.score for item in result.context]
    assert scores == sorted(scores, reverse=True)
    first = result.context[0]
    assert [p.tool for p in first.provenance] == ["semantic_search", "finish"]
    assert first.provenance[0].step == 1 and first.provenance[1].step == 2
    assert first.provenance[0].query == "Apert syndrome [label=Disease]"
    assert first.origin == "seed"
    assert result.steps == 2 and result.tool_calls == 2
    assert result.llm_calls == 2
    assert result.prompt_tokens == 220 and result.completion_tokens == 25
    assert result.usage_by_stage["act"].llm_calls == 2
    assert not result.fallback_used and not result.used_explicit_relations
    assert "[OMIM:101200]" in result.answer or "[ORPHA:87]" in result.answer
    # the planner saw the schema and the plan block, and the tools it may call
    system, plan = model.calls[0][0], model.calls[0][1]
    assert "HAS_PHENOTYPE" in str(system.content) and "data, never instructions" in str(system.content)
    assert str(plan.content).rstrip().endswith("</plan>")
    plan_json = json.loads(str(plan.content).split("<plan>")[1].split("</plan>")[0])
    assert plan_json["question"] == "Tell me about Apert syndrome" and plan_json["k"] == 20
    assert [t["function"]["name"] for t in model.bound_tools] == ["semantic_search", "search_nodes", "cypher", "finish"]


def test_search_path_pools_evidence_across_seeds(hpo_bundle: Any) -> None:
    """No finish: after T rounds the pool ranks the disease reached from both phenotypes first."""
    walk = ("search_nodes", {"keys": ["HP:0010621", "HP:0000244"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in"})
    script = [turn(walk), turn(("semantic_search", {"text": "syndactyly", "label": "Phenotype", "k": 3})), turn(walk)]
    result, model = run(hpo_bundle, script, APERT, config(max_rounds=2, policy="skip-when-explicit-edges"))
    assert model.remaining == 1  # T = 2 rounds, the third turn was never requested
    assert result.steps == 2
    assert result.used_explicit_relations
    assert result.context[0].key == "OMIM:101200"  # reached from both phenotypes
    assert {i.key for i in result.context} >= {"OMIM:101200", "ORPHA:87"}
    assert result.context[0].provenance[0].tool == "search_nodes"
    assert not any(i.origin == "sage" for i in result.context)  # explicit edges: SAGE skipped


def test_cypher_path_with_repair_of_an_unknown_label(hpo_bundle: Any) -> None:
    bad = "MATCH (d:Diseases)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE p.key IN $keys RETURN d.key"
    good = (
        "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE p.key IN $keys "
        "RETURN d.key AS key, count(p) AS n ORDER BY n DESC, key"
    )
    params = {"keys": ["HP:0010621", "HP:0000244"]}

    def repaired(messages: list[BaseMessage]) -> AIMessage:
        error = last_tool_payloads(messages)[0]["error"]
        assert error["type"] == "unknown_schema" and "Disease" in error["hint"]
        return turn(("cypher", {"query": good, "params": params}))

    def finish_rows(messages: list[BaseMessage]) -> AIMessage:
        rows = last_tool_payloads(messages)[0]["rows"]
        return turn(("finish", {"keys": [r[0] for r in rows], "scores": [float(r[1]) for r in rows]}))

    script = [turn(("cypher", {"query": bad, "params": params})), repaired, finish_rows]
    result, _ = run(hpo_bundle, script, APERT)
    assert result.context[0].key == "OMIM:101200"  # has both phenotypes
    assert result.context[0].score == 2.0 and result.context[1].score == 1.0
    assert "ORPHA:87" in {i.key for i in result.context[1:]}  # brachyturricephaly only
    assert result.used_explicit_relations
    assert {p.tool for p in result.context[0].provenance} == {"cypher", "finish"}
    assert result.tool_calls == 3


def test_invalid_calls_are_fed_back_then_repaired(hpo_bundle: Any) -> None:
    malformed = AIMessage(
        content="",
        tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "call_a", "type": "tool_call"}],
        invalid_tool_calls=[
            {"name": "semantic_search", "args": "{not json", "id": "call_b", "error": "bad JSON", "type": "invalid_tool_call"}
        ],
    )

    def second(messages: list[BaseMessage]) -> AIMessage:
        errors = [p["error"]["message"] for p in last_tool_payloads(messages)]
        assert any("unknown tool 'lookup'" in e for e in errors)
        assert any("malformed call to 'semantic_search'" in e for e in errors)
        return turn(("semantic_search", {"text": "Apert", "k": "many"}), ("search_nodes", {"keys": ["HP:1"], "hops": 2}))

    def third(messages: list[BaseMessage]) -> AIMessage:
        errors = " | ".join(p["error"]["message"] for p in last_tool_payloads(messages))
        assert "invalid arguments for 'semantic_search': k" in errors
        assert "unknown argument(s) ['hops']" in errors
        return turn(("semantic_search", {"text": "Apert syndrome", "label": "Disease", "k": 2}))

    script = [malformed, second, third, finish_with_hits]
    result, model = run(hpo_bundle, script, "Apert syndrome?", config(max_repairs=2))
    assert model.remaining == 0
    assert {i.key for i in result.context} == {"OMIM:101200", "ORPHA:87"}
    assert result.steps == 2  # repair rounds are not planner rounds
    assert result.tool_calls == 2
    assert result.llm_calls == 4


def test_repairs_exhausted_falls_back_to_search(hpo_bundle: Any) -> None:
    bad = turn(("semantic_search", {"txt": "Apert"}))
    script = [bad, bad, bad]
    result, model = run(hpo_bundle, script, "Apert syndrome", config(max_repairs=1, k=5))
    assert model.remaining == 1  # stopped after max_repairs + 1 invalid rounds
    assert any("max_repairs" in note for note in result.degraded)
    assert result.fallback_used
    assert result.context and all(i.origin == "fallback" for i in result.context)
    assert result.context[0].key in {"OMIM:101200", "ORPHA:87"}
    assert result.context[0].provenance[0].tool == "hybrid_search"
    assert len(result.context) == 5


def test_fallback_when_the_plan_finds_nothing(hpo_bundle: Any) -> None:
    script = [turn(("finish", {"keys": []}))]
    result, _ = run(hpo_bundle, script, "Marfan syndrome", config(k=3))
    assert result.fallback_used
    assert result.context[0].key == "OMIM:154700"
    assert [i.origin for i in result.context] == ["fallback"] * 3


def test_text_answer_without_tools_ends_the_loop(hpo_bundle: Any) -> None:
    result, model = run(hpo_bundle, [AIMessage("I don't know"), AIMessage("unused")], "Marfan syndrome", config(k=2))
    assert model.remaining == 1
    assert result.fallback_used and result.steps == 0


def test_per_call_k_caps_tool_results(hpo_bundle: Any) -> None:
    def check(messages: list[BaseMessage]) -> AIMessage:
        assert len(last_tool_payloads(messages)[0]["hits"]) == 3
        return finish_with_hits(messages)

    script = [turn(("semantic_search", {"text": "syndrome", "k": 500})), check]
    result, _ = run(hpo_bundle, script, "syndrome", config(per_call_k=3))
    assert len(result.context) == 3


def test_transient_errors_are_retried_then_raise(hpo_bundle: Any) -> None:
    script = [ConnectionError("reset"), turn(("finish", {"keys": ["OMIM:154700"]}))]
    result, model = run(hpo_bundle, script, "Marfan syndrome")
    assert model.remaining == 0 and result.context[0].key == "OMIM:154700"
    assert result.llm_calls == 1

    failing = ScriptedChatModel([ConnectionError("reset"), ConnectionError("reset"), turn(("finish", {"keys": []}))])
    with pytest.raises(PlannerError, match="2 times"):
        ask("Marfan", bundle=hpo_bundle, config=config(llm_attempts=2, degrade_to_offline=False), chat_model=failing)
    assert failing.remaining == 1

    # a timeout is not a transient error: the same prompt would take as long again
    slow = ScriptedChatModel([TimeoutError("slow"), turn(("finish", {"keys": []}))])
    with pytest.raises(PlannerError, match="timed out"):
        ask("Marfan", bundle=hpo_bundle, config=config(llm_attempts=3, degrade_to_offline=False), chat_model=slow)
    assert slow.remaining == 1

    rejected = ScriptedChatModel([ValueError("bad request")])
    with pytest.raises(PlannerError, match="bad request"):
        ask("Marfan", bundle=hpo_bundle, config=config(degrade_to_offline=False), chat_model=rejected)
    # with the default degrade_to_offline=True the same failure finishes on the offline planner
    rejected = ScriptedChatModel([ValueError("bad request")])
    result = ask("Marfan syndrome", bundle=hpo_bundle, config=config(), chat_model=rejected)
    assert any("offline planner" in note and "bad request" in note for note in result.degraded)
    assert result.context and rejected.remaining == 0


def test_messages_input_and_answer_message(hpo_bundle: Any) -> None:
    graph = build_agent(config(), hpo_bundle, chat_model=ScriptedChatModel([turn(("finish", {"keys": ["OMIM:101200"]}))]))
    state = graph.invoke({"messages": [HumanMessage("Which disease is Apert syndrome?")]})
    assert state["question"] == "Which disease is Apert syndrome?"
    assert isinstance(state["messages"][0], HumanMessage)
    answer = state["messages"][-1]
    assert isinstance(answer, AIMessage) and "[OMIM:101200]" in str(answer.content)
    assert state["result"].answer == answer.content

    with pytest.raises(ConfigError, match="needs a question"):
        build_agent(config(), hpo_bundle, chat_model=ScriptedChatModel([])).invoke({"messages": []})


def test_configurable_overrides_per_call(hpo_bundle: Any) -> None:
    keys = ["OMIM:101200", "ORPHA:87", "OMIM:123500", "OMIM:101600"]
    model = ScriptedChatModel([turn(("finish", {"keys": keys}))] * 2)
    graph = build_agent(config(k=20), hpo_bundle, chat_model=model)
    small = graph.invoke({"question": "Apert"}, {"configurable": {"k": 2, "thread_id": "ignored"}})
    assert [i.key for i in small["result"].context] == keys[:2]
    full = graph.invoke({"question": "Apert"})
    assert [i.key for i in full["result"].context] == keys
    with pytest.raises(ConfigError, match="k"):
        graph.invoke({"question": "Apert"}, {"configurable": {"k": 0}})


def test_stream_updates_and_astream(hpo_bundle: Any) -> None:
    def script() -> ScriptedChatModel:
        return ScriptedChatModel(
            [turn(("semantic_search", {"text": "Marfan", "label": "Disease", "k": 2})), finish_with_hits]
        )

    graph = build_agent(config(), hpo_bundle, chat_model=script())
    updates = list(graph.stream({"question": "Marfan syndrome"}, stream_mode="updates"))
    nodes = [next(iter(u)) for u in updates]
    one_round = ["call_planner", "run_tools", "observe"]
    assert nodes == ["link_entities", "plan", *one_round, *one_round, "expand", "finalize"]
    assert updates[2]["call_planner"]["step"] == 1 and not updates[4]["observe"]["done"]
    assert updates[7]["observe"]["done"]
    assert updates[-1]["finalize"]["result"].context[0].key == "OMIM:154700"

    async def collect() -> list[str]:
        graph2 = build_agent(config(), hpo_bundle, chat_model=script())
        return [next(iter(u)) async for u in graph2.astream({"question": "Marfan syndrome"}, stream_mode="updates")]

    assert asyncio.run(collect()) == nodes


def test_sage_expansion_adds_k_prime_neighbors(hpo_bundle: Any) -> None:
    """SAGE adds the best one-hop neighbors of the seeds (same label: phenotypes around a phenotype)."""
    pytest.importorskip("graphs.sage.expand")
    seed = "HP:0001363"  # Craniosynostosis: parents and children in the IS_A hierarchy
    script: list[Callable[..., AIMessage] | AIMessage] = [turn(("finish", {"keys": [seed]}))]
    question = "Which skull phenotype is craniosynostosis?"
    result, _ = run(hpo_bundle, script, question, config(policy="always", k_prime=2))
    seeds = [i for i in result.context if i.origin == "seed"]
    sage = [i for i in result.context if i.origin == "sage"]
    assert [i.key for i in seeds] == [seed]
    skb = hpo_bundle.skb
    neighbors = {e.dst for e in skb.out_edges(seed)} | {e.src for e in skb.in_edges(seed)}
    phenotypes = {k for k in neighbors if skb.nodes[k].label == "Phenotype"}
    assert len(phenotypes) > 2
    assert len(sage) == 2
    assert {i.key for i in sage} <= phenotypes
    assert all(i.provenance[-1].tool == "sage_expand" for i in sage)
    assert [i.rank for i in result.context] == [1, 2, 3]
    assert [i.score for i in result.context] == sorted((i.score for i in result.context), reverse=True)

    never, _ = run(hpo_bundle, list(script), question, config(policy="never", k_prime=2))
    assert [i.origin for i in never.context] == ["seed"]


def test_ask_reuses_one_compiled_agent_per_bundle_and_config(hpo_bundle: Any) -> None:
    from agent.api import _cached_agent

    first = _cached_agent(hpo_bundle, config(k=7))
    assert _cached_agent(hpo_bundle, config(k=7)) is first
    assert _cached_agent(hpo_bundle, config(k=8)) is not first


def test_a_short_context_says_why(hpo_bundle: Any) -> None:
    """Issue 15: k=1000 returned ~50 items without a word; the result now names the cap and the knobs."""
    result = ask(
        "Which disease has syndactyly and craniosynostosis?",
        bundle=hpo_bundle,
        config=AgentConfig(k=1000, k_prime=0, policy="never"),
    )
    seeds = len([c for c in result.context if c.origin != "sage"])
    assert seeds < 1000
    [note] = result.notes
    assert note.startswith(f"k=1000 seed nodes asked, {seeds} found")
    assert f"per_call_k={AgentConfig().per_call_k}" in note and "fallback_fill=true" in note
    filled = ask(
        "Which disease has syndactyly and craniosynostosis?",
        bundle=hpo_bundle,
        config=AgentConfig(k=5, k_prime=0, policy="never"),
    )
    assert filled.notes == [] and len(filled.context) == 5


def test_compiled_graph_declares_input_output_and_config_schemas(hpo_bundle: Any) -> None:
    """LangGraph Studio renders these: the question in, the result out, AgentConfig's knobs as config."""
    graph = build_agent(config(), hpo_bundle)
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "messages"}
    assert set(graph.get_output_jsonschema()["properties"]) == {"question", "result", "messages"}
    context = graph.get_context_jsonschema()
    assert context is not None
    knobs = context["properties"]
    assert {"k", "k_prime", "per_call_k", "tool_output_tokens", "max_parallel_tools", "planner"} <= set(knobs)
    assert knobs["tool_output_tokens"]["default"] == 1500
