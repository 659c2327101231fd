"""Guided loop mode over HTTP (the real ChatOpenAI path against the local stub), on a graph with its own
labels and relations (recipes), so nothing here depends on one dataset.

What is proved: each round's tool schemas offer only keys, relations and labels that exist; the model sees
a bounded state block (two messages, the same system text), never a growing history; token counts are
read from the endpoint's ``usage`` and calibrate the estimate; a prompt-token budget stops a question on
those real counts; a call naming something not offered is repaired once with the error quoted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent import AgentConfig, ask
from graphs.bundle import IndexBundle
from graphs.tokens import calibration, count_tokens, reset_calibration
from tests.openai_stub import Stub, completion
from tests.small_graphs import recipe_skb

pytestmark = pytest.mark.integration

QUESTION = "Which recipe uses garlic and lemon?"


@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index

    index_dir = tmp_path_factory.mktemp("guided") / "index"
    build_index(recipe_skb(), index_dir, IndexConfig(dataset="recipes"))
    bundle = IndexBundle.open(index_dir)
    yield bundle
    bundle.close()


@pytest.fixture(autouse=True)
def _fresh_calibration() -> Iterator[None]:
    reset_calibration()
    yield
    reset_calibration()


def config(stub: Stub, **overrides: Any) -> AgentConfig:
    base = {"planner": "openai", "planner_mode": "guided", "model": "stub-model", "base_url": stub.url,
            "policy": "never", "llm_backoff_initial_s": 0.01, "max_rounds": 3}
    return AgentConfig.model_validate({**base, **overrides})


def functions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools") or []}


def enums(params: dict[str, Any], name: str) -> list[Any]:
    prop = params["properties"][name]
    return list((prop.get("items") or prop)["enum"])


def pick_then_finish(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    tools = functions(body)
    if "finish" in tools:
        return completion(calls=[("finish", json.dumps({"keys": enums(tools["finish"], "keys")[:2]}))], tokens=300)
    return completion(calls=[("pick", json.dumps({"option": 1}))], tokens=300)


def test_round_schemas_offer_only_what_exists(openai_stub: Stub, recipes: IndexBundle) -> None:
    openai_stub.replies = [pick_then_finish] * 3
    result = ask(QUESTION, bundle=recipes, config=config(openai_stub, guided_tools="all"))

    skb = recipes.skb
    keys = set(skb.nodes)
    schema = recipes.schema()
    rels, labels = set(schema.relation_names()), set(schema.label_names())
    assert len(openai_stub.requests) >= 2
    for request in openai_stub.requests:
        body = request["body"]
        assert body["tool_choice"] == "required"
        tools = functions(body)
        assert set(tools) <= {"pick", "search_nodes", "semantic_search", "finish"}
        if "search_nodes" in tools:
            offered = enums(tools["search_nodes"], "keys")
            assert offered and set(offered) <= keys
            assert set(enums(tools["search_nodes"], "rel_types")) <= rels
            reach = set(enums(tools["search_nodes"], "target_label"))
            assert reach and reach <= labels  # labels one hop from the offered keys' labels only
            key_labels = {skb.nodes[k].label for k in offered}
            assert all(any({r.src_label, r.dst_label} >= {lab, kl} or (lab == kl and r.src_label == r.dst_label == lab)
                           for r in schema.relations for kl in key_labels) for lab in reach)
        if "finish" in tools:
            finish_keys = enums(tools["finish"], "keys")
            assert finish_keys and set(finish_keys) <= keys
            assert all(skb.nodes[k].label == "Recipe" for k in finish_keys)  # the plan's answer label
        assert set(enums(tools["semantic_search"], "label")) == labels
        if "pick" in tools:
            assert enums(tools["pick"], "option")[0] == 1
    assert result.target_type == "Recipe"
    assert result.context and result.context[0].key in {"R1", "R3"}  # the recipes with both
    assert result.guided and all(r["valid_first_try"] for r in result.guided)
    assert result.guided[0]["choice"] == "pick:1" and result.guided[-1]["choice"] == "finish"


def test_history_is_a_bounded_state_block(openai_stub: Stub, recipes: IndexBundle) -> None:
    # an endpoint that reports no usage: the estimate stays uncalibrated, as count_tokens counts below
    openai_stub.replies = [completion(calls=[("pick", json.dumps({"option": 1}))], tokens=0)] * 3
    cfg = config(openai_stub, guided_state_tokens=250, max_rounds=3)
    ask(QUESTION, bundle=recipes, config=cfg)

    assert len(openai_stub.requests) == 3
    systems = set()
    for request in openai_stub.requests:
        messages = request["body"]["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]  # no tool messages, no earlier turns
        assert set(functions(request["body"])) <= {"pick", "finish"}  # guided_tools="menu" (default): choose only
        systems.add(messages[0]["content"])
        assert count_tokens(messages[1]["content"]) <= 250
    assert len(systems) == 1  # the same system text every round: servers reuse its cached prefix
    last = openai_stub.requests[-1]["body"]["messages"][1]["content"]
    assert "Round 3 of 3" in last and "Earlier steps:" in last and "-> " in last


def test_counts_come_from_usage_and_calibrate_the_estimate(openai_stub: Stub, recipes: IndexBundle) -> None:
    """An endpoint whose tokenizer counts 1.6x ours (plus a fixed template cost): after its first reported usage,
    the estimate of the next prompt is within 5 % of what it reports."""
    reported: list[int] = []

    def counted(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = "\n".join(str(m.get("content") or "") for m in body["messages"]) + json.dumps(body.get("tools"))
        reported.append(int(count_tokens(text) * 1.6) + 20)
        status, reply = pick_then_finish(body)
        reply["usage"] = {"prompt_tokens": reported[-1], "completion_tokens": 7, "total_tokens": reported[-1] + 7}
        return status, reply

    openai_stub.replies = [counted] * 3
    result = ask(QUESTION, bundle=recipes, config=config(openai_stub))

    calls = result.llm_calls
    assert calls >= 2 and result.prompt_tokens == sum(reported)  # the endpoint's numbers, not an estimate
    act = result.usage_by_stage["act"]
    assert act.estimated_prompt_tokens > 0
    seen = calibration("stub-model")
    assert seen.observations == calls and 1.5 < seen.factor < 1.8
    rows = result.guided or []
    assert [t for r in rows for t in r["prompt_tokens"]] == reported
    estimates = [t for r in rows for t in r["estimated_prompt_tokens"]]
    assert abs(estimates[0] - reported[0]) / reported[0] > 0.2  # uncalibrated: off by the tokenizers' ratio
    assert all(abs(e - r) / r <= 0.05 for e, r in zip(estimates[1:], reported[1:], strict=True))


def test_a_prompt_token_budget_stops_on_real_counts(openai_stub: Stub, recipes: IndexBundle) -> None:
    # the endpoint says the first prompt cost 2,000 tokens; the estimate alone (a few hundred) would allow
    # a second call under 2,300, the real count does not
    openai_stub.replies = [completion(calls=[("pick", json.dumps({"option": 1}))], tokens=2000)] * 3
    result = ask(QUESTION, bundle=recipes, config=config(openai_stub, max_prompt_tokens=2300))

    assert result.stopped_by_budget == "prompt_tokens"
    assert result.llm_calls == 1 and result.prompt_tokens == 2000
    assert any("prompt token budget spent" in d for d in result.degraded)
    assert result.context  # the offline planner finished the question


def test_a_call_naming_what_was_not_offered_is_repaired(openai_stub: Stub, recipes: IndexBundle) -> None:
    bad = completion(calls=[("search_nodes", json.dumps({"keys": ["NOT:A-KEY"], "rel_types": ["USES"]}))])

    def repaired(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = body["messages"][1]["content"]
        assert "Your last call was rejected" in text and "NOT:A-KEY" in text
        return completion(calls=[("pick", json.dumps({"option": 1}))])

    openai_stub.replies = [bad, repaired, pick_then_finish, pick_then_finish]
    result = ask(QUESTION, bundle=recipes, config=config(openai_stub, max_rounds=2, guided_tools="all"))

    first = (result.guided or [])[0]
    assert first["attempts"] == 2 and first["valid"] and not first["valid_first_try"]
    assert "NOT:A-KEY" in first["errors"][0]
    assert result.context and not any("no valid call" in d for d in result.degraded)


def test_still_invalid_after_the_repair_runs_the_menu_with_a_note(recipes: IndexBundle) -> None:
    """A scripted model that twice names a relation the graph does not have: the round runs the offline planner's
    next action (the menu's first option) and says so; the question still gets its answer."""
    from langchain_core.messages import AIMessage

    from agent.fake_llm import ScriptedChatModel

    def bad(i: int) -> AIMessage:
        call = {"name": "search_nodes", "args": {"keys": ["I:Garlic"], "rel_types": ["NO_SUCH_REL"]}, "id": f"b{i}"}
        return AIMessage(content="", tool_calls=[call])

    model = ScriptedChatModel([bad(0), bad(1)])
    cfg = AgentConfig(planner="openai", planner_mode="guided", guided_tools="all", policy="never", max_rounds=1)
    result = ask(QUESTION, bundle=recipes, config=cfg, chat_model=model)

    assert len(model.calls) == 2
    assert "NO_SUCH_REL" in str(model.calls[1][-1].content)  # the repair quoted the error
    row = (result.guided or [])[0]
    assert row["attempts"] == 2 and not row["valid"] and "USES" in row["errors"][0]  # the error lists valid ones
    assert any("no valid call after 2 attempt(s)" in d for d in result.degraded)
    assert result.context and result.context[0].key in {"R1", "R3"}


def test_menu_mode_refuses_a_tool_it_did_not_offer(openai_stub: Stub, recipes: IndexBundle) -> None:
    free = completion(calls=[("semantic_search", json.dumps({"text": "lemon"}))])

    def repaired(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        assert "not offered this round" in body["messages"][1]["content"]
        return completion(calls=[("pick", json.dumps({"option": 1}))])

    openai_stub.replies = [free, repaired]
    result = ask(QUESTION, bundle=recipes, config=config(openai_stub, max_rounds=1))
    row = (result.guided or [])[0]
    assert row["attempts"] == 2 and row["valid"] and row["choice"] == "pick:1"


def test_the_menu_keeps_the_planner_ids_and_its_finish_order(recipes: IndexBundle) -> None:
    """A picked option runs under the offline planner's own call ids (its next turn reads a path walk's
    results by id: under other ids they went unread and it searched again), and the planner's finish
    ranks the candidates it names first, whatever their pool scores."""
    from agent.planning.guided import menu_options, round_view
    from tools.common import schema_of

    walk = [{"name": "cypher", "args": {"query": "MATCH (n) RETURN n.key AS key"}, "id": "walk_0"},
            {"name": "cypher", "args": {"query": "MATCH (m) RETURN m.key AS key"}, "id": "walk_1"}]
    options = menu_options(walk, ["R1"])
    assert [[c["id"] for c in o if "id" in c] for o in options] == [["walk_0", "walk_1"], ["walk_0"], ["walk_1"], []]
    pool = {k: {"label": "Recipe", "score": s} for k, s in (("R1", 1.0), ("R2", 0.9), ("R3", 0.1))}
    finish = [{"name": "finish", "args": {"keys": ["R3", "R2"], "scores": [1.0, 0.5]}, "id": "walk_finish"}]
    view = round_view(schema_of(recipes), [], pool, "Recipe", finish)
    assert view.finish_keys == ["R3", "R2", "R1"]
    assert view.menu[0] == [finish[0]]
    plain = round_view(schema_of(recipes), [], pool, "Recipe", [])
    assert plain.finish_keys == ["R1", "R2", "R3"]


def test_a_call_line_says_how_many_list_values_it_leaves_out() -> None:
    from agent.planning.guided import describe_call

    line = describe_call(
        {"name": "search_nodes", "args": {"keys": ["k1"], "rel_types": ["R"], "among": [f"m{i}" for i in range(40)]}},
        {},
    )
    assert "among=[m0, m1, m2, m3, m4, m5, +34]" in line and "m6" not in line
    assert "rel_types=[R]" in line  # a short list is shown whole, without a count
