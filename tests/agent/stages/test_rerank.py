"""LLM reranking (issue 14 item 5): each mode with scripted model orders, malformed replies keep the
original order with a note, call and token accounting per stage, and no reranking without an LLM."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agent import AgentConfig, ask
from agent.fake_llm import ScriptedChatModel
from agent.stages.rerank import Candidate, bind_for, rerank

_ids = itertools.count()
USAGE = {"input_tokens": 200, "output_tokens": 8, "total_tokens": 208}


def call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"r{next(_ids)}", "type": "tool_call"}],
                     usage_metadata=USAGE)


def text(content: str) -> AIMessage:
    return AIMessage(content=content, usage_metadata=USAGE)


CANDIDATES = [Candidate(key=k, label="Thing", name=f"name {k}", text=f"text of {k} " * 5) for k in "ABCD"]


def run(mode: Any, replies: list[AIMessage], passes: int = 1, structured: str = "tool") -> tuple[list[str], Any, Any]:
    model = ScriptedChatModel(replies)
    bind = bind_for(model, structured)

    def invoke_for(which: Any) -> Any:
        bound = bind(which)
        return lambda history: bound.invoke(list(history))

    outcome = rerank(mode, "which one?", CANDIDATES, invoke_for, budget_tokens=500, structured=structured, passes=passes)
    assert model.remaining == 0
    return [CANDIDATES[i].key for i in outcome.order], outcome, model


def test_listwise_applies_the_model_order() -> None:
    order, outcome, model = run("listwise", [call("order_candidates", {"order": [3, 1, 4, 2]})])
    assert order == ["C", "A", "D", "B"] and outcome.calls == 1 and outcome.changed and not outcome.notes
    prompt = str(model.calls[0][-1].content)
    assert all(f"[{i}]" in prompt for i in range(1, 5))
    assert model.bound_tools[0]["function"]["name"] == "order_candidates"


def test_pointwise_sorts_by_score_one_call_each() -> None:
    replies = [call("score_candidate", {"score": s}) for s in (2, 9, 5, 9)]
    order, outcome, _ = run("pointwise", replies)
    assert order == ["B", "D", "C", "A"] and outcome.calls == 4  # ties keep the original order


def test_pairwise_bottom_up_pass() -> None:
    """One pass over A B C D, bottom-up: (C,D) -> B=D wins, swap -> A B D C; (B,D) -> A=B stays;
    (A,B) -> B wins, swap -> B A D C. Three calls."""
    replies = [call("choose_candidate", {"better": b}) for b in ("B", "A", "B")]
    order, outcome, model = run("pairwise", replies)
    assert order == ["B", "A", "D", "C"] and outcome.calls == 3
    first = str(model.calls[0][-1].content)
    assert "A: " in first and "name C" in first and "name D" in first


def test_pairwise_second_pass_stops_when_nothing_moves() -> None:
    replies = [call("choose_candidate", {"better": b}) for b in ("B", "A", "B", "A", "A", "A")]
    order, outcome, _ = run("pairwise", replies, passes=3)
    assert order == ["B", "A", "D", "C"] and outcome.calls == 6


@pytest.mark.parametrize(
    ("mode", "replies", "order", "note"),
    [
        ("listwise", [text("Sorry, I cannot rank these.")], "ABCD", "no candidate numbers"),
        ("listwise", [text("[2] > [9] > [2]")], "BACD", "ignored unknown or repeated numbers [9, 2]"),
        ("listwise", [text('{"order": [4, 2,]]')], "DBAC", "not ranked by the model"),  # near-JSON, 2 left out
        ("pointwise", [call("score_candidate", {"score": 3}), text("very relevant!"), text("7"), text("1")],
         "ABCD", "no usable score for ['B']"),
        # (C,D) unreadable: no swap; (B,C) -> C; (A,C) -> A
        ("pairwise", [text("both"), text("B"), call("choose_candidate", {"better": "A"})], "ACBD",
         "1 comparison(s) unreadable"),
    ],
)
def test_malformed_output_keeps_the_original_order_with_a_note(
    mode: Any, replies: list[AIMessage], order: str, note: str
) -> None:
    got, outcome, _ = run(mode, replies)
    assert "".join(got) == order
    assert any(note in n for n in outcome.notes), outcome.notes


@pytest.mark.parametrize(("mode", "reply"), [
    ("listwise", call("order_candidates", {"order": [1, 2, 3, 4]})),
    ("pointwise", call("score_candidate", {"score": 5})),
    ("pairwise", call("choose_candidate", {"better": "A"})),
])
def test_every_prompt_fits_its_budget_in_real_tokens(mode: Any, reply: AIMessage) -> None:
    """Long candidate texts (JSON-dense, where characters / 4 undercounts) are cut so that each prompt
    stays within the budget as the real tokenizer counts it, and the budget is used, not wasted."""
    from graphs.tokens import count_tokens

    dense = '{"id": "X:0001", "values": [1, 2, 3], "note": "é∂ƒ"} ' * 200
    long = [Candidate(key=k, label="Item", name=f"name {k}", text=dense) for k in "ABCD"]
    model = ScriptedChatModel([reply] * 4)
    bind = bind_for(model, "tool")
    budget = 600
    rerank(mode, "which one?", long, lambda which: lambda h: bind(which).invoke(list(h)), budget_tokens=budget)
    assert model.calls
    for prompt in model.calls:
        size = sum(count_tokens(str(m.content)) for m in prompt)
        assert 0.8 * budget <= size <= budget, size
        assert "\u2026" in str(prompt[-1].content)


def test_text_mode_reads_json_from_the_reply() -> None:
    order, _, model = run("listwise", [text('```json\n{"order": [2, 1, 3, 4]}\n```')], structured="text")
    assert order == ["B", "A", "C", "D"] and model.bound_tools == []


def finish(keys: list[str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "finish", "args": {"keys": keys}, "id": f"f{next(_ids)}",
                                               "type": "tool_call"}],
                     usage_metadata={"input_tokens": 100, "output_tokens": 5, "total_tokens": 105})


KEYS = ["OMIM:154700", "OMIM:101200", "OMIM:123500"]


def test_agent_rerank_stage_accounts_calls_and_tokens(hpo_bundle: Any) -> None:
    model = ScriptedChatModel([finish(KEYS), call("order_candidates", {"order": [3, 1, 2]})])
    cfg = AgentConfig(policy="never", k=3, rerank="listwise")
    result = ask("Which disease?", bundle=hpo_bundle, config=cfg, chat_model=model)
    assert [i.key for i in result.context] == [KEYS[2], KEYS[0], KEYS[1]]
    scores = [i.score for i in result.context]
    assert scores == sorted(scores, reverse=True)
    assert result.usage_by_stage["rerank"].llm_calls == 1 and result.usage_by_stage["rerank"].prompt_tokens == 200
    assert result.llm_calls == 2 and "rerank" in result.timings_ms
    assert result.rerank is not None and result.rerank["changed"] and result.rerank["order"][0] == KEYS[2]


def test_agent_rerank_per_call_through_configurable(hpo_bundle: Any) -> None:
    from agent.api import build_agent

    model = ScriptedChatModel([finish(KEYS)] + [call("score_candidate", {"score": s}) for s in (1, 2, 3)])
    agent = build_agent(AgentConfig(policy="never", k=3), bundle=hpo_bundle, chat_model=model)
    state = agent.invoke({"question": "Which disease?"}, {"configurable": {"rerank": "pointwise"}})
    result = state["result"]
    assert [i.key for i in result.context] == list(reversed(KEYS))
    assert result.usage_by_stage["rerank"].llm_calls == 3


def test_agent_rerank_failure_keeps_order(hpo_bundle: Any) -> None:
    model = ScriptedChatModel([finish(KEYS), text("no idea")])
    result = ask("Which disease?", bundle=hpo_bundle, config=AgentConfig(policy="never", k=3, rerank="listwise"),
                 chat_model=model)
    assert [i.key for i in result.context] == KEYS
    assert result.rerank is not None and not result.rerank["changed"]
    assert "kept the original order" in result.rerank["notes"][0]


def test_offline_planner_never_reranks(hpo_bundle: Any) -> None:
    result = ask("Which disease has craniosynostosis?", bundle=hpo_bundle,
                 config=AgentConfig(policy="never", k=3, rerank="listwise"))
    assert result.llm_calls == 0 and result.rerank is not None and result.rerank["calls"] == 0
    assert "needs an LLM" in result.rerank["notes"][0]
    default = ask("Which disease has craniosynostosis?", bundle=hpo_bundle, config=AgentConfig(policy="never", k=3))
    assert default.rerank is None and "rerank" not in default.timings_ms


def test_eval_methods_switch_the_stages_on(hpo_bundle: Any) -> None:
    from evals.methods import make_method, method_names
    from graphs.errors import ConfigError

    assert {"agent+constraints", "agent+rerank:pointwise", "agent+rerank:listwise", "agent+rerank:pairwise",
            "hybrid-dice"} <= set(method_names())
    constraints = make_method("agent+constraints", hpo_bundle, k=5)
    assert constraints.config["agent_config"]["constraints"] is True
    assert constraints.config["agent_config"]["policy"] == "never"
    listwise = make_method("agent+rerank:listwise", hpo_bundle, rerank_top=5)
    assert listwise.config["agent_config"]["rerank"] == "listwise"
    assert listwise.config["agent_config"]["rerank_top"] == 5
    with pytest.raises(ConfigError, match="fixes rerank='listwise'"):
        make_method("agent+rerank:listwise", hpo_bundle, rerank="pairwise")
    ranked = constraints.retrieve("Which disease has craniosynostosis and brachyturricephaly?").ranked
    assert ranked and ranked[0][0].startswith(("OMIM:", "ORPHA:"))


def test_plan_once_constraints_and_listwise_over_http(openai_stub: Any, hpo_bundle: Any) -> None:
    """The real OpenAI client against the HTTP stub: plan-once (1 call), the constraint extraction as a
    forced submit_constraints call, then one listwise call; each stage's calls and tokens counted."""
    import json

    from tests.openai_stub import completion

    plan = {"target_type": "Disease", "relation_paths": [[{"rel": "HAS_PHENOTYPE", "direction": "in",
                                                             "to_label": "Disease"}]],
            "sources": [], "search_text": "craniosynostosis syndactyly"}
    constraints = {"target_type": "Disease", "triplets": [
        {"entity": "craniosynostosis", "relation": "HAS_PHENOTYPE", "direction": "out", "confidence": 0.9},
        {"entity": "cutaneous syndactyly of toes", "relation": "HAS_PHENOTYPE", "direction": "out",
         "confidence": 0.8}]}

    def reverse(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        numbers = [int(n) for n in __import__("re").findall(r"^\[(\d+)\]", body["messages"][-1]["content"], 8)]
        return completion(calls=[("order_candidates", json.dumps({"order": list(reversed(numbers))}))], tokens=300)

    openai_stub.replies = [
        completion(calls=[("submit_plan", json.dumps(plan))], tokens=400),
        completion(calls=[("submit_constraints", json.dumps(constraints))], tokens=250),
        reverse,
    ]
    cfg = AgentConfig(planner="openai", planner_mode="plan-once", model="stub", base_url=openai_stub.url,
                      policy="never", k=4, rerank_top=3, constraints=True, rerank="listwise",
                      llm_backoff_initial_s=0.01)
    result = ask("Which disease has craniosynostosis and cutaneous syndactyly of toes?", bundle=hpo_bundle,
                 config=cfg)
    assert len(openai_stub.requests) == 3, (result.plan, result.degraded)
    tools = [r["body"].get("tool_choice") for r in openai_stub.requests]
    assert [t["function"]["name"] for t in tools] == ["submit_plan", "submit_constraints", "order_candidates"]
    assert result.constraints is not None and result.constraints["source"] == "llm"
    assert result.constraints["extraction"]["valid_first_try"]
    usage = result.usage_by_stage
    assert (usage["plan"].prompt_tokens, usage["constraints"].prompt_tokens, usage["rerank"].prompt_tokens) == (
        400, 250, 300)
    assert result.rerank is not None and result.rerank["calls"] == 1
    order = result.rerank["order"]
    assert [i.key for i in result.context[:3]] == order and len(order) == 3


def test_offline_plan_with_the_llm_only_in_the_stages_over_http(openai_stub: Any, hpo_bundle: Any) -> None:
    """stage_llm="openai": the offline planner plans (no plan call), the configured OpenAI-compatible model
    extracts the constraints and reranks; only those two calls reach the endpoint and the result counts
    exactly them; each stage's report keeps the seed order it found (``before``)."""
    import json

    from tests.openai_stub import completion

    constraints = {"target_type": "Disease", "triplets": [
        {"entity": "craniosynostosis", "relation": "HAS_PHENOTYPE", "direction": "out", "confidence": 0.9},
        {"entity": "cutaneous syndactyly of toes", "relation": "HAS_PHENOTYPE", "direction": "out",
         "confidence": 0.8}]}

    def reverse(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        numbers = [int(n) for n in __import__("re").findall(r"^\[(\d+)\]", body["messages"][-1]["content"], 8)]
        return completion(calls=[("order_candidates", json.dumps({"order": list(reversed(numbers))}))], tokens=300)

    openai_stub.replies = [completion(calls=[("submit_constraints", json.dumps(constraints))], tokens=250), reverse]
    question = "Which disease has craniosynostosis and cutaneous syndactyly of toes?"
    settings = {"policy": "never", "k": 4, "rerank_top": 3, "constraints": True, "rerank": "listwise",
                "model": "stub", "base_url": openai_stub.url, "llm_backoff_initial_s": 0.01}
    result = ask(question, bundle=hpo_bundle, config=AgentConfig(stage_llm="openai", **settings))
    tools = [r["body"]["tool_choice"]["function"]["name"] for r in openai_stub.requests]
    assert tools == ["submit_constraints", "order_candidates"], result.degraded
    assert result.plan is None and "plan" not in result.usage_by_stage
    assert (result.llm_calls, result.prompt_tokens) == (2, 550)
    assert result.constraints is not None and result.constraints["source"] == "llm"
    assert result.rerank is not None and result.rerank["valid_calls"] == 1
    before = result.rerank["before"]
    assert len(before) == 3 and result.rerank["order"] == list(reversed(before))
    assert [i.key for i in result.context[:3]] == result.rerank["order"]
    assert result.constraints["before"] and set(result.constraints["before"]) <= {
        k for k in hpo_bundle.skb.nodes if hpo_bundle.skb.nodes[k].label == "Disease"}
    # the default (the planner's model): the offline planner has none, the endpoint is not called
    plain = ask(question, bundle=hpo_bundle, config=AgentConfig(**settings))
    assert len(openai_stub.requests) == 2 and plain.llm_calls == 0
    assert plain.rerank is not None and "needs an LLM" in plain.rerank["notes"][0]


def test_a_model_that_failed_for_good_is_not_asked_again(hpo_bundle: Any) -> None:
    """The planner model fails (transient errors until llm_attempts is spent) and the run continues
    with the offline planner: the constraint and rerank stages do not call it again."""
    cfg = AgentConfig(policy="never", k=3, constraints=True, rerank="listwise", llm_attempts=2,
                      llm_backoff_initial_s=0.01)
    model = ScriptedChatModel([ConnectionError("down"), ConnectionError("down")])
    result = ask("Which disease has craniosynostosis and brachyturricephaly?", bundle=hpo_bundle, config=cfg,
                 chat_model=model)
    assert model.remaining == 0 and len(model.calls) == 2
    assert any("offline planner" in d for d in result.degraded)
    assert result.constraints is not None and result.constraints["source"] == "plan"
    assert result.rerank is not None and "needs an LLM" in result.rerank["notes"][0]


def test_trace_counts_the_rerank_stage(hpo_bundle: Any, tmp_path: Any) -> None:
    from agent.api import build_agent
    from agent.tracing.tracer import LocalTracer

    model = ScriptedChatModel([finish(KEYS), call("order_candidates", {"order": [2, 1, 3]})])
    tracer = LocalTracer(tmp_path / "t.sqlite")
    agent = build_agent(AgentConfig(policy="never", k=3, rerank="listwise"), bundle=hpo_bundle, chat_model=model)
    state = agent.invoke({"question": "Which disease?"}, {"callbacks": [tracer]})
    tracer.flush()
    assert tracer.usage_by_stage()["rerank"].llm_calls == 1
    assert tracer.usage_by_stage()["rerank"].prompt_tokens == 200 == state["result"].usage_by_stage["rerank"].prompt_tokens
