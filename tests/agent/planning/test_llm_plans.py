"""Structured plans, timeouts, budgets and plan-once mode (issue 14 items 1-3).

The LLM is the only fake: scripted chat models (agent.fake_llm) and the OpenAI-compatible HTTP
stub drive the real agent over the real hpo_mini index (FalkorDB, hnswlib, bm25s, MiniLM).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from agent import AgentConfig, ask
from agent.fake_llm import ScriptedChatModel
from agent.llm.client import prompt_text
from agent.llm.structured import NearJSONError, parse_near_json
from agent.planning.llm import PLAN_TOOL, PlanOnceSpec, PlanSpec, PlanStepSpec, validate_plan
from graphs.errors import ConfigError, PlannerError
from graphs.skb.model import GraphSchema, LabelInfo, RelationInfo
from graphs.tokens import count_tokens, reset_calibration
from tests.openai_stub import Stub, completion
from tests.paths import FIXTURES

pytestmark = pytest.mark.integration

APERT = "Which disease has brachyturricephaly, proptosis and cutaneous syndactyly of toes?"
APERT_KEY = "OMIM:101200"
TO_DISEASE = [{"rel": "HAS_PHENOTYPE", "direction": "in", "to_label": "Disease"}]
GOOD_PLAN = {"target_type": "Disease", "relation_paths": [TO_DISEASE]}
_ids = iter(range(10**6))


def plan_call(args: dict[str, Any] | str, tokens: tuple[int, int] = (100, 10)) -> AIMessage:
    """A reply calling the plan tool (args as a dict, or raw text the client could not parse)."""
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    call_id = f"plan_{next(_ids)}"
    if isinstance(args, str):
        bad = {"name": PLAN_TOOL, "args": args, "id": call_id, "error": "bad json", "type": "invalid_tool_call"}
        return AIMessage(content="", invalid_tool_calls=[bad], usage_metadata=usage)  # type: ignore[list-item]
    call = {"name": PLAN_TOOL, "args": args, "id": call_id, "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], usage_metadata=usage)  # type: ignore[list-item]


def turn(*calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (100, 10)) -> AIMessage:
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    tool_calls = [{"name": n, "args": a, "id": f"call_{next(_ids)}", "type": "tool_call"} for n, a in calls]
    return AIMessage(content="", tool_calls=tool_calls, usage_metadata=usage)  # type: ignore[arg-type]


def config(**overrides: Any) -> AgentConfig:
    base: dict[str, Any] = {"planner": "openai", "policy": "never", "llm_backoff_initial_s": 0.01}
    return AgentConfig.model_validate({**base, **overrides})


def phenotype_keys(messages: Sequence[BaseMessage]) -> list[str]:
    """The Phenotype keys the plan prompt lists as linked entities."""
    text = str(messages[-1].content)
    return [line.split()[1] for line in text.splitlines() if line.startswith("- HP:") and "(Phenotype)" in line]


# -- near-JSON ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ('{"target_type": "Disease", "relation_paths": []}}', "ignored text after the JSON value"),  # the issue's
        ('{"target_type": "Disease", "relation_paths": [],}', "removed a trailing comma"),
        ('```json\n{"target_type": "Disease", "relation_paths": []}\n```', "removed a code fence"),
        ('Here is the plan: {"target_type": "Disease", "relation_paths": []', "closed 1 open bracket(s)"),
        ('{"target_type": "Disease", "relation_paths": [], "x": None}', "read Python literal None"),
    ],
    ids=["extra-bracket", "trailing-comma", "code-fence", "missing-bracket", "python-none"],
)
def test_near_json_is_accepted_with_the_fix_named(text: str, fix: str) -> None:
    value, fixes = parse_near_json(text)
    assert value["target_type"] == "Disease" and value["relation_paths"] == []
    assert fix in fixes


def test_text_without_json_is_an_error_naming_the_problem() -> None:
    with pytest.raises(NearJSONError, match="no JSON object"):
        parse_near_json("I think the answer is a disease.")
    with pytest.raises(NearJSONError, match="not valid JSON"):
        parse_near_json('{"target_type": Disease}')


# -- schema validation (a graph with other labels: nothing here knows HPO) ----------------------
def paper_schema() -> GraphSchema:
    return GraphSchema(
        labels=[LabelInfo(label="Paper", count=10), LabelInfo(label="Author", count=5), LabelInfo(label="Venue", count=2)],
        relations=[
            RelationInfo(rel="WROTE", src_label="Author", dst_label="Paper", count=12),
            RelationInfo(rel="PUBLISHED_IN", src_label="Paper", dst_label="Venue", count=10),
        ],
    )


def step(rel: str, direction: str, to_label: str) -> PlanStepSpec:
    return PlanStepSpec.model_validate({"rel": rel, "direction": direction, "to_label": to_label})


def test_schema_validation_rejects_an_unknown_relation() -> None:
    linked = [{"key": "a1", "label": "Author", "name": "Ada"}]
    plan = PlanSpec(target_type="Venue", relation_paths=[[step("WROTE", "out", "Paper"), step("CITES", "out", "Venue")]])
    errors = validate_plan(plan, paper_schema(), max_hops=2, linked=linked)
    assert len(errors) == 1
    assert "relation_paths[0][1].rel: unknown relationship type 'CITES'" in errors[0]
    assert "WROTE" in errors[0] and "PUBLISHED_IN" in errors[0]  # the valid names, for the repair


def test_schema_validation_checks_labels_directions_chaining_and_sources() -> None:
    schema, linked = paper_schema(), [{"key": "a1", "label": "Author", "name": "Ada"}]
    good = PlanSpec(target_type="Venue", relation_paths=[[step("WROTE", "out", "Paper"), step("PUBLISHED_IN", "out", "Venue")]])
    assert validate_plan(good, schema, 2, linked) == []
    cases = {
        "unknown label 'Journal'": PlanSpec(target_type="Journal"),
        "never reaches 'Paper'": PlanSpec(target_type="Paper", relation_paths=[[step("WROTE", "in", "Paper")]]),
        "not at the linked entities' labels": PlanSpec(
            target_type="Venue", relation_paths=[[step("PUBLISHED_IN", "out", "Venue")]]
        ),
        "but target_type is 'Venue'": PlanSpec(target_type="Venue", relation_paths=[[step("WROTE", "out", "Paper")]]),
        "at most 1 allowed": good,
    }
    for needle, plan in cases.items():
        errors = validate_plan(plan, schema, 1 if needle.startswith("at most") else 2, linked)
        assert any(needle in e for e in errors), (needle, errors)
    once = PlanOnceSpec(target_type="Paper", relation_paths=[[step("WROTE", "out", "Paper")]], sources=["zz"])
    assert any("'zz'" in e and "a1" in e for e in validate_plan(once, schema, 2, linked))


# -- structured plan through the agent ----------------------------------------------------------
def test_malformed_plan_is_repaired_in_one_round(hpo_bundle: Any) -> None:
    bad = {"target_type": "Disease", "relation_paths": [[{"rel": "HAS_SYMPTOM", "direction": "in", "to_label": "Disease"}]]}
    model = ScriptedChatModel([plan_call(bad), plan_call(GOOD_PLAN), turn(("finish", {"keys": [APERT_KEY]}))])
    result = ask(APERT, bundle=hpo_bundle, config=config(), chat_model=model)

    assert result.plan is not None
    assert result.plan["valid"] and result.plan["repaired"] and not result.plan["valid_first_try"]
    assert result.plan["attempts"] == 2 and "HAS_SYMPTOM" in result.plan["errors"][0]
    assert result.relation_paths == [["<-[HAS_PHENOTYPE]-Disease"]] and result.target_type == "Disease"
    assert not any("LLM plan failed" in d for d in result.degraded)
    # the repair call quotes the validation error in a tool message answering the rejected call
    repair = model.calls[1]
    assert isinstance(repair[-1], ToolMessage) and "unknown relationship type 'HAS_SYMPTOM'" in str(repair[-1].content)
    assert "HAS_PHENOTYPE" in str(repair[-1].content)
    # both calls fit plan_prompt_tokens: the repair keeps the first prompt (servers reuse its cached prefix)
    assert repair[: len(model.calls[0])] == model.calls[0]
    assert result.llm_calls == 3 and result.usage_by_stage["plan"].llm_calls == 2
    assert result.context[0].key == APERT_KEY

    # the server reports a first prompt of 1,400 tokens: two of them do not fit plan_prompt_tokens=3000, so the
    # repair carries the schema as names only and costs fewer tokens than the first call
    model = ScriptedChatModel(
        [plan_call(bad, tokens=(1400, 60)), plan_call(GOOD_PLAN), turn(("finish", {"keys": [APERT_KEY]}))]
    )
    result = ask(APERT, bundle=hpo_bundle, config=config(), chat_model=model)
    repair = model.calls[1]
    assert result.plan is not None and result.plan["repaired"]
    assert isinstance(repair[0], SystemMessage) and len(str(repair[0].content)) < len(str(model.calls[0][0].content))


def test_a_stored_edge_written_instead_of_the_walk_is_read_as_the_walk() -> None:
    """The 1.5B model's commonest slip on HPO: from linked Phenotypes it wrote {HAS_PHENOTYPE, to_label: Phenotype}
    (the stored edge Disease->Phenotype); from an Author, {WROTE, to_label: Paper} the other way round here."""
    linked = [{"key": "p1", "label": "Paper", "name": "On graphs"}]
    plan = PlanSpec(target_type="Author", relation_paths=[[step("WROTE", "out", "Paper")]])
    fixes: list[str] = []
    assert validate_plan(plan, paper_schema(), 2, linked, fixes) == []
    assert plan.relation_paths[0][0].direction == "in" and plan.relation_paths[0][0].to_label == "Author"
    assert "read as the walk along WROTE from Paper" in fixes[0]
    strict = PlanSpec(target_type="Author", relation_paths=[[step("WROTE", "out", "Paper")]])
    assert validate_plan(strict, paper_schema(), 2, linked)  # without fixes: reported, not changed


def test_slips_are_corrected_without_a_repair_call(hpo_bundle: Any) -> None:
    """A hop the wrong way round is flipped (only one direction reaches its label); an invalid path next to
    a valid one is dropped. Both are reported as fixes, and no second call is made."""
    wrong_way = [{"rel": "HAS_PHENOTYPE", "direction": "out", "to_label": "Disease"}]
    dead_end = [{"rel": "IS_A", "direction": "out", "to_label": "Phenotype"}]  # ends at Phenotype, not the target
    model = ScriptedChatModel([plan_call({"target_type": "Disease", "relation_paths": [wrong_way, dead_end]})])
    result = ask(APERT, bundle=hpo_bundle, config=config(planner_mode="plan-once"), chat_model=model)
    assert len(model.calls) == 1 and result.plan is not None and result.plan["valid_first_try"]
    fixes = " | ".join(result.plan["fixes"])
    assert "direction 'out' -> 'in'" in fixes and "dropped relation_paths[1]" in fixes
    assert result.relation_paths == [["<-[HAS_PHENOTYPE]-Disease"]]
    assert result.context[0].key == APERT_KEY


def test_near_json_plan_is_accepted_without_a_repair(openai_stub: Stub, hpo_bundle: Any) -> None:
    """The issue's reproduction: one bracket too many in the plan. Accepted as is, no second call."""
    text = json.dumps(GOOD_PLAN) + "}"
    openai_stub.replies = [
        completion(calls=[(PLAN_TOOL, text)]),
        completion(calls=[("finish", json.dumps({"keys": [APERT_KEY]}))]),
    ]
    cfg = config(model="stub-model", base_url=openai_stub.url)
    result = ask(APERT, bundle=hpo_bundle, config=cfg)
    assert result.plan is not None and result.plan["valid_first_try"] and result.plan["attempts"] == 1
    assert "ignored text after the JSON value" in result.plan["fixes"]
    assert result.target_type == "Disease" and result.relation_paths == [["<-[HAS_PHENOTYPE]-Disease"]]
    assert len(openai_stub.requests) == 2 and result.llm_calls == 2


def test_text_mode_reads_json_from_the_reply_and_repairs_with_a_human_turn(hpo_bundle: Any) -> None:
    model = ScriptedChatModel(
        [
            AIMessage(content="The plan: {target_type: Disease}"),
            AIMessage(content="```json\n" + json.dumps(GOOD_PLAN) + "\n```"),
            turn(("finish", {"keys": [APERT_KEY]})),
        ]
    )
    result = ask(APERT, bundle=hpo_bundle, config=config(structured_output="text"), chat_model=model)
    assert result.plan is not None and result.plan["repaired"] and "removed a code fence" in result.plan["fixes"]
    assert "not valid JSON" in str(model.calls[1][-1].content)
    assert model.bound_tools == [] or all(t["function"]["name"] != PLAN_TOOL for t in model.bound_tools)


# -- timeouts -------------------------------------------------------------------------------------
def test_a_timeout_is_not_retried_with_the_same_prompt(hpo_bundle: Any) -> None:
    model = ScriptedChatModel([TimeoutError("read timed out"), TimeoutError("read timed out")])
    with pytest.raises(PlannerError, match="timed out after .* not retried"):
        ask(APERT, bundle=hpo_bundle, config=config(degrade_to_offline=False, llm_attempts=4), chat_model=model)
    assert len(model.calls) == 1  # one try, not llm_attempts tries


# -- budgets ----------------------------------------------------------------------------------------
def test_llm_call_budget_stops_the_model_and_the_offline_planner_finishes(hpo_bundle: Any) -> None:
    script = [plan_call(GOOD_PLAN), turn(("semantic_search", {"text": "brachyturricephaly", "k": 5}))]
    model = ScriptedChatModel([*script, turn(("finish", {"keys": ["OMIM:154700"]}))])
    result = ask(APERT, bundle=hpo_bundle, config=config(max_llm_calls=2), chat_model=model)
    assert result.llm_calls == 2 and model.remaining == 1
    assert result.stopped_by_budget == "llm_calls"
    assert any("max_llm_calls=2" in d and "offline planner" in d for d in result.degraded)
    assert result.context[0].key == APERT_KEY  # the offline planner took over and answered


def test_prompt_token_budget_refuses_a_call_that_would_exceed_it(hpo_bundle: Any) -> None:
    model = ScriptedChatModel([plan_call(GOOD_PLAN, tokens=(2900, 10)), turn(("finish", {"keys": ["OMIM:154700"]}))])
    cfg = config(max_prompt_tokens=3000, degrade_to_offline=False)
    result = ask(APERT, bundle=hpo_bundle, config=cfg, chat_model=model)
    assert result.llm_calls == 1 and result.prompt_tokens == 2900 and model.remaining == 1
    assert result.stopped_by_budget == "prompt_tokens"
    assert any("max_prompt_tokens=3,000" in d and "stopped planning" in d for d in result.degraded)
    assert result.fallback_used and result.context  # no candidates yet: the hybrid fallback answers


def test_wall_time_budget_stops_model_calls(hpo_bundle: Any) -> None:
    def slow_plan(messages: list[BaseMessage]) -> AIMessage:
        time.sleep(1.2)
        return plan_call(GOOD_PLAN)

    model = ScriptedChatModel([slow_plan, turn(("finish", {"keys": ["OMIM:154700"]}))])
    result = ask(APERT, bundle=hpo_bundle, config=config(max_wall_s=1.0), chat_model=model)
    assert result.llm_calls == 1 and model.remaining == 1
    assert result.stopped_by_budget == "wall_time"
    assert result.target_type == "Disease" and result.context[0].key == APERT_KEY


def test_wall_time_budget_cuts_a_slow_http_call_short(openai_stub: Stub, hpo_bundle: Any) -> None:
    def hang(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        time.sleep(4)
        return completion(content=json.dumps(GOOD_PLAN))

    openai_stub.replies = [hang]
    cfg = config(model="stub-model", base_url=openai_stub.url, llm_timeout_s=60.0, max_wall_s=1.5)
    started = time.monotonic()
    result = ask(APERT, bundle=hpo_bundle, config=cfg)
    assert time.monotonic() - started < 4  # the call was cut at the budget, not at llm_timeout_s
    assert result.stopped_by_budget == "wall_time" and len(openai_stub.requests) == 1
    assert result.context[0].key == APERT_KEY  # heuristic plan + offline planner


# -- plan-once ---------------------------------------------------------------------------------------
def test_plan_once_makes_one_call_and_the_executor_walks_the_plan(hpo_bundle: Any) -> None:
    def plan_once(messages: list[BaseMessage]) -> AIMessage:
        keys = phenotype_keys(messages)
        assert keys, "the plan prompt lists the linked phenotypes"
        args = {**GOOD_PLAN, "sources": keys, "search_text": "craniosynostosis with syndactyly"}
        return plan_call(args, tokens=(900, 60))

    model = ScriptedChatModel([plan_once])
    result = ask(APERT, bundle=hpo_bundle, config=config(planner_mode="plan-once", max_rounds=4), chat_model=model)

    assert len(model.calls) == 1 and result.llm_calls == 1 and result.prompt_tokens == 900
    assert result.usage_by_stage["plan"].llm_calls == 1 and "act" not in result.usage_by_stage
    assert result.plan is not None and result.plan["mode"] == "plan-once" and result.plan["valid_first_try"]
    assert result.degraded == []
    assert result.tool_calls >= 2 and result.steps >= 1  # the deterministic executor ran the plan's tool calls
    assert result.context[0].key == APERT_KEY
    provenance = {(p.tool, p.query) for item in result.context for p in item.provenance}
    assert ("semantic_search", "craniosynostosis with syndactyly [label=Disease]") in provenance  # the model's text
    assert any(tool == "search_nodes" for tool, _ in provenance)  # the plan's relation path, walked


def test_plan_once_prompt_stays_within_the_token_budget(hpo_bundle: Any) -> None:
    """Many linked entities: the walk choices fall back to the hop-by-hop form and the entity list is cut, so
    system + question + tool schema fit the budget."""
    terms = ["brachyturricephaly", "proptosis", "cutaneous syndactyly of toes", "arachnodactyly", "hypertelorism",
             "frontal bossing", "low-set ears", "high palate", "downslanted palpebral fissures", "broad hallux"]
    question = "Which disease has " + ", ".join(terms) + "?"

    def prompt_of(budget: int) -> tuple[float, list[str], bool]:
        cfg = config(planner_mode="plan-once", plan_prompt_tokens=budget, max_entities=50)
        reset_calibration()  # the scripted usage (100 tokens) of the previous ask would scale the count
        model = ScriptedChatModel([plan_call(GOOD_PLAN)])
        result = ask(question, bundle=hpo_bundle, config=cfg, chat_model=model)
        assert len(model.calls) == 1 and result.llm_calls == 1
        prompt = model.calls[0]
        tool = model.bound_tools[0]["function"]
        size = count_tokens(prompt_text(prompt)) + count_tokens(json.dumps(tool))  # real tokens, as budgeted
        listed = [line for line in str(prompt[-1].content).splitlines() if line.startswith("- ")]
        return size, listed, "anyOf" in tool["parameters"]

    full_size, full, choices = prompt_of(20_000)
    assert choices  # the fixture's few walks, offered
    budget = int(full_size) - 25
    size, listed, offered = prompt_of(budget)
    assert size <= budget and not offered  # a tight budget drops the walk choices first
    while len(listed) == len(full) and budget > 200:  # lower still: the entity list is cut
        budget -= 100
        size, listed, offered = prompt_of(budget)
        assert size <= budget and not offered
    assert 0 < len(listed) < len(full)  # some entities listed, fewer than without the budget


def test_plan_once_invalid_after_repair_uses_the_heuristic_plan_with_a_note(hpo_bundle: Any) -> None:
    bad = {"target_type": "Sickness", "relation_paths": []}
    model = ScriptedChatModel([plan_call(bad), plan_call(bad)])
    result = ask(APERT, bundle=hpo_bundle, config=config(planner_mode="plan-once"), chat_model=model)
    assert len(model.calls) == 2 and result.llm_calls == 2
    assert any("LLM plan failed, used the heuristic plan" in d and "Sickness" in d for d in result.degraded)
    assert result.plan is not None and not result.plan["valid"]
    assert result.target_type == "Disease" and result.context[0].key == APERT_KEY


# -- CLI, eval method, traces ----------------------------------------------------------------------
def test_skb_ask_plan_once_with_budgets_and_the_trace_records_the_plan_report(
    openai_stub: Stub, hpo_index_dir: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app
    from agent.tracing.tracer import TraceStore

    db = tmp_path / "traces.sqlite"
    monkeypatch.setenv("SKB_TRACE_DB", str(db))
    openai_stub.replies = [completion(calls=[(PLAN_TOOL, json.dumps({**GOOD_PLAN, "search_text": "skull and toes"}))])]
    args = ["ask", APERT, "--index-dir", str(hpo_index_dir), "--planner", "openai", "--model", "stub-model",
            "--planner-mode", "plan-once", "--max-llm-calls", "1", "--max-wall-s", "120", "--policy", "never",
            "--json", "--trace"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["llm_calls"] == 1 and len(openai_stub.requests) == 1
    assert data["plan"]["mode"] == "plan-once" and data["plan"]["valid_first_try"]
    assert data["context"][0]["key"] == APERT_KEY and data["stopped_by_budget"] is None

    trace = TraceStore(db).list_traces()[0]
    assert trace.llm_calls == 1
    runs = {run.name: run for run in TraceStore(db).runs_of_trace(trace.id)}
    assert runs["plan"].outputs["plan_report"]["valid_first_try"] is True  # visible per stage in the trace

    bad = CliRunner().invoke(app, ["ask", "x", "--index-dir", str(hpo_index_dir), "--planner-mode", "twice"])
    assert bad.exit_code == 2 and "unknown --planner-mode 'twice'" in bad.stderr


def test_eval_method_agent_plan_once(hpo_bundle: Any) -> None:
    from evals.methods import make_method, method_names

    assert "agent-plan-once" in method_names()
    method = make_method("agent-plan-once", hpo_bundle, model="local", max_wall_s=180)
    cfg = method.config["agent_config"]
    assert cfg["planner"] == "openai" and cfg["planner_mode"] == "plan-once" and cfg["max_wall_s"] == 180
    with pytest.raises(ConfigError, match="fixes planner_mode"):
        make_method("agent-plan-once", hpo_bundle, planner_mode="loop")


def test_a_partial_plan_is_completed_from_the_heuristic_plan(hpo_bundle: Any) -> None:
    """A valid plan that names the target but no path: the paths come from the schema, and the report says so."""
    model = ScriptedChatModel([plan_call({"target_type": "Disease"})])
    result = ask(APERT, bundle=hpo_bundle, config=config(planner_mode="plan-once"), chat_model=model)
    assert result.plan is not None and result.plan["completed"] == ["relation_paths"]
    assert result.target_type == "Disease" and ["<-[HAS_PHENOTYPE]-Disease"] in result.relation_paths
    assert result.context[0].key == APERT_KEY and result.llm_calls == 1


def test_the_tool_schema_is_self_contained() -> None:
    """llama.cpp's grammar converter cannot resolve ``$ref`` inside a tool schema (HTTP 500 "Error resolving
    ref" on the first real run): nested models are inlined, titles dropped."""
    from agent.llm.structured import compact_schema, tool_spec

    schema = compact_schema(PlanOnceSpec)
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text
    [hops] = [alt for alt in schema["properties"]["relation_paths"]["items"]["anyOf"] if alt["type"] == "array"]
    hop = hops["items"]
    assert hop["required"] == ["rel", "to_label"] and hop["properties"]["direction"]["enum"] == ["out", "in"]
    assert tool_spec(PlanOnceSpec, PLAN_TOOL, "x")["function"]["parameters"] == schema


def test_the_plan_tool_schema_names_only_this_graphs_labels_relations_and_linked_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Grammar-constrained servers then cannot emit an unknown name (the 1.5B model wrote node keys as labels).
    The hop-by-hop form: a graph with more walks than MAX_PATH_CHOICES (none allowed here)."""
    from agent.planning import llm as llm_planner
    from agent.planning.llm import plan_parameters

    monkeypatch.setattr(llm_planner, "MAX_PATH_CHOICES", 0)
    linked = [{"key": "a1", "label": "Author", "name": "Ada"}, {"key": "a2", "label": "Author", "name": "Bo"}]
    params = plan_parameters(PlanOnceSpec, paper_schema(), 2, linked)
    props = params["properties"]
    assert {"type": "string", "enum": ["Paper", "Author", "Venue"]} in props["target_type"]["anyOf"]
    paths = props["relation_paths"]
    assert paths["maxItems"] == 5 and paths["items"]["maxItems"] == 2 and paths["items"]["minItems"] == 1
    hop = paths["items"]["items"]["properties"]
    assert sorted(hop["rel"]["enum"]) == ["PUBLISHED_IN", "WROTE"] and hop["to_label"]["enum"] == ["Paper", "Author", "Venue"]
    assert props["sources"]["items"]["enum"] == ["a1", "a2"]


def test_the_plan_tool_offers_each_target_only_the_walks_that_reach_it() -> None:
    """Walks from the linked label (Author), worked out by hand on the paper schema, one alternative per
    answer label; a reply naming a walk as text validates into its hops, an invented walk is an error
    that lists the valid ones."""
    from agent.planning.llm import plan_parameters

    linked = [{"key": "a1", "label": "Author", "name": "Ada"}]
    params = plan_parameters(PlanOnceSpec, paper_schema(), 2, linked)
    offered = {alt["properties"]["target_type"]["const"]: alt["properties"]["relation_paths"].get("items", {}).get("enum")
               for alt in params["anyOf"]}  # fmt: skip
    assert offered == {
        "Paper": ["(Author)-[WROTE]->(Paper)"],
        "Author": ["(Author)-[WROTE]->(Paper)<-[WROTE]-(Author)"],
        "Venue": ["(Author)-[WROTE]->(Paper)-[PUBLISHED_IN]->(Venue)"],
    }
    assert all(alt["properties"]["sources"]["items"]["enum"] == ["a1"] for alt in params["anyOf"])
    assert "$ref" not in json.dumps(params)
    # the choices must fit a third of the plan prompt's budget, else the hop-by-hop form is offered
    size = len(json.dumps(params)) / 4  # the share is counted in characters / 4 (see CHOICES_BUDGET_SHARE)
    assert "anyOf" in plan_parameters(PlanOnceSpec, paper_schema(), 2, linked, budget_tokens=int(3 * size) + 1)
    hops = plan_parameters(PlanOnceSpec, paper_schema(), 2, linked, budget_tokens=int(3 * size) - 30)
    assert "anyOf" not in hops and hops["properties"]["relation_paths"]["items"]["type"] == "array"

    plan = PlanSpec.model_validate(
        {"target_type": "Venue", "relation_paths": ["(Author)-[WROTE]->(Paper) -[PUBLISHED_IN]->(Venue)"]}
    )
    assert validate_plan(plan, paper_schema(), 2, linked) == []
    assert plan.relation_paths == [[step("WROTE", "out", "Paper"), step("PUBLISHED_IN", "out", "Venue")]]
    invented = PlanSpec.model_validate({"target_type": "Venue", "relation_paths": ["(Author)-[CITES]->(Venue)"]})
    [error] = validate_plan(invented, paper_schema(), 2, linked)
    assert "not a walk of this graph" in error and "(Author)-[WROTE]->(Paper)-[PUBLISHED_IN]->(Venue)" in error


@pytest.fixture(scope="module")
def movies(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny MetaQA-like KB (a path-planning profile): the executor walks relation paths with Cypher."""

    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.loaders import load_dataset

    index_dir = tmp_path_factory.mktemp("movies") / "index"
    kb = FIXTURES / "metaqa_mini" / "kb.txt"
    build_index(load_dataset("metaqa", kb), index_dir, IndexConfig(dataset="metaqa"))
    handle = IndexBundle.open(index_dir)
    yield handle
    handle.close()


def test_plan_once_walks_the_models_path_not_its_own_prediction(movies: Any) -> None:
    """The question asks for the director; the model's plan says writer. Plan-once executes the plan it was
    given (the offline path planner alone answers the director), so the writer comes first."""
    question = "who directed [Harbor Lights]"
    offline = ask(question, bundle=movies, config=AgentConfig(policy="never"))
    assert offline.context[0].key == "Ada Quill"

    args = {"target_type": "Person", "relation_paths": [[{"rel": "written_by", "direction": "out",
                                                          "to_label": "Person"}]], "sources": ["Harbor Lights"]}
    model = ScriptedChatModel([plan_call(args)])
    result = ask(question, bundle=movies, config=config(planner_mode="plan-once"), chat_model=model)
    assert len(model.calls) == 1 and result.plan is not None and result.plan["valid_first_try"]
    assert result.context[0].key == "Ben Marlow"
    assert any(p.tool == "cypher" for p in result.context[0].provenance)
