"""AF-Retriever constraint stage (issue 14 item 4): extraction (scripted model, offline plan), grounding,
the read-only node-set join and each step of incremental scope expansion.

The main graph is a small recipe graph -- labels, relations and properties the HPO and MetaQA data
do not have -- built into a real index (FalkorDB, HNSW, MiniLM) once per module: the stage must not
depend on any dataset's names.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from langchain_core.messages import AIMessage

from agent import AgentConfig, ask
from agent.fake_llm import ScriptedChatModel
from agent.stages.constraints import (
    Constraint,
    ConstraintSpec,
    join_query,
    offline_spec,
    relaxation_order,
    run_constraints,
    validate_spec,
)
from tests.small_graphs import recipe_skb

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

_ids = itertools.count()

@pytest.fixture(scope="module")
def recipes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    index_dir = tmp_path_factory.mktemp("recipes") / "index"
    build_index(recipe_skb(), index_dir, IndexConfig(dataset="recipes"))
    bundle = IndexBundle.open(index_dir)
    yield bundle
    bundle.close()


def triplet(text: str, confidence: float, position: int, anchors: list[str], relation: str | None) -> Constraint:
    return Constraint("triplet", text, confidence, position, relation, "out", anchors)


def attribute(text: str, confidence: float, position: int, prop: str, op: Any, value: Any) -> Constraint:
    return Constraint("attribute", text, confidence, position, property=prop, op=op, value=value)


def test_relaxation_order_is_confidence_then_attributes_then_latest() -> None:
    a = triplet("a", 0.9, 0, ["x"], None)
    b = triplet("b", 0.5, 1, ["x"], None)
    c = attribute("c", 0.5, 2, "p", "=", 1)
    d = triplet("d", 0.5, 3, ["x"], None)
    e = triplet("e", 0.2, 4, ["x"], None)
    assert [x.text for x in relaxation_order([a, b, c, d, e])] == ["e", "c", "d", "b", "a"]


def test_join_query_quotes_names_and_passes_values_as_parameters() -> None:
    cypher, params = join_query(
        "Odd Label",
        [triplet("t", 1.0, 0, ["k1", "k2"], "REL WITH SPACE"), attribute("a", 1.0, 1, "my prop", ">=", 3)],
        limit=7,
    )
    assert "MATCH (x:`Odd Label`)-[:`REL WITH SPACE`]->(a0) WHERE a0.key IN $a0" in cypher
    assert "x.`my prop` >= $v0" in cypher
    assert params == {"limit": 7, "a0": ["k1", "k2"], "v0": 3}
    with pytest.raises(ValueError, match="at least one constraint"):
        join_query("X", [], limit=1)


@pytest.mark.integration
def test_each_relaxation_step_on_a_graph_with_other_labels(recipes: IndexBundle) -> None:
    """garlic (0.9), Italian (0.7), minutes < 30 (0.7), k=4:
    level 0: all three -> Lemon Pasta, Garlic Bread (2 < 4: relax);
    level 1: the attribute goes first at equal confidence -> garlic + Italian: nothing new (relax);
    level 2: Italian dropped -> garlic alone adds Lemon Chicken and Garlic Prawns: 4 >= 4, stop."""
    garlic = triplet('(Recipe)-[USES]->"Garlic"', 0.9, 0, ["I:Garlic"], "USES")
    italian = triplet('(Recipe)-[FROM_CUISINE]->"Italian"', 0.7, 1, ["C:Italian"], "FROM_CUISINE")
    quick = attribute("Recipe.minutes < 30", 0.7, 2, "minutes", "<", 30)
    result = run_constraints(recipes, "Recipe", [garlic, italian, quick], 4, timeout_ms=5000, max_rows=50)
    assert [(s.level, s.dropped, s.found, s.added) for s in result.steps] == [
        (0, None, 2, 2),
        (1, "Recipe.minutes < 30", 2, 0),
        (2, '(Recipe)-[FROM_CUISINE]->"Italian"', 4, 2),
    ]
    assert result.steps[2].active == ['(Recipe)-[USES]->"Garlic"']
    assert "stop" in result.steps[-1].reason and "relax" in result.steps[0].reason
    # support: anchors reached, one per triplet in force (garlic + Italian at level 0)
    assert result.candidates == [("R1", 0, 2), ("R2", 0, 2), ("R3", 2, 1), ("R6", 2, 1)]


@pytest.mark.integration
def test_relaxation_stops_before_the_last_constraint_is_dropped(recipes: IndexBundle) -> None:
    carrot = triplet('(Recipe)-[USES]->"Carrot"', 1.0, 0, ["I:Carrot"], "USES")
    slow = attribute("Recipe.minutes > 65", 0.5, 1, "minutes", ">", 65)
    result = run_constraints(recipes, "Recipe", [carrot, slow], 10, timeout_ms=5000, max_rows=50)
    assert [s.dropped for s in result.steps] == [None, "Recipe.minutes > 65"]
    assert [c[0] for c in result.candidates] == ["R5", "R4"]  # never the whole label


@pytest.mark.integration
def test_schema_validation_names_the_valid_choices(recipes: IndexBundle) -> None:
    schema = recipes.schema()
    spec = ConstraintSpec.model_validate(
        {"target_type": "Recipe", "triplets": [{"entity": "Garlic", "relation": "CONTAINS"}],
         "attributes": [{"property": "calories", "op": "<", "value": 5}]}
    )
    errors = validate_spec(spec, schema)
    assert any("'CONTAINS'" in e and "FROM_CUISINE" in e and "USES" in e for e in errors)
    assert any("'calories'" in e and "minutes" in e for e in errors)
    assert validate_spec(ConstraintSpec(target_type="Dish"), schema)[0].startswith("target_type 'Dish'")


@pytest.mark.integration
def test_a_relation_that_exists_but_misses_the_answer_type_means_any_relation(recipes: IndexBundle) -> None:
    """A small model writes a real relation of the entity's own label (USES, Recipe->Ingredient) for a
    constraint on another answer type (Cuisine): the triplet is kept with any relation and the fix named;
    a relation the graph lacks stays an error for the repair round."""
    from agent.stages.constraints import loosen_relations

    schema = recipes.schema()
    spec = ConstraintSpec.model_validate({"target_type": "Cuisine", "triplets": [
        {"entity": "Garlic", "relation": "USES", "direction": "out"},
        {"entity": "Pizza", "relation": "FROM_CUISINE", "direction": "in"},
        {"entity": "Basil", "relation": "CONTAINS"}]})
    fixes = loosen_relations(spec, schema)
    assert fixes == ["triplets.0.relation 'USES' does not touch Cuisine: any relation"]
    assert (spec.triplets[0].relation, spec.triplets[0].direction) == (None, "any")
    assert (spec.triplets[1].relation, spec.triplets[1].direction) == ("FROM_CUISINE", "in")
    errors = validate_spec(spec, schema)
    assert len(errors) == 1 and "'CONTAINS'" in errors[0]


@pytest.mark.integration
def test_constraints_past_the_cap_are_dropped_not_the_extraction(recipes: IndexBundle) -> None:
    """One constraint too many refused the whole extraction and the small model's repair repeated it: the
    first MAX_CONSTRAINTS are kept (triplets first, in the question's order) and the drop is named."""
    from agent.stages.constraints import MAX_CONSTRAINTS, trim_constraints

    triplets = [{"entity": "Pizza", "relation": "FROM_CUISINE", "direction": "in"}] * 6
    attributes = [{"property": "minutes", "op": "<", "value": m} for m in range(30, 34)]
    spec = ConstraintSpec.model_validate({"target_type": "Cuisine", "triplets": triplets, "attributes": attributes})
    assert any("at most" in e for e in validate_spec(spec, recipes.schema()))
    assert trim_constraints(spec) == [f"2 constraint(s) past the first {MAX_CONSTRAINTS} dropped"]
    assert len(spec.triplets) == 6 and [a.value for a in spec.attributes] == [30, 31]
    assert trim_constraints(spec) == []  # within the cap: nothing to do


def tool_reply(args: dict[str, Any], tokens: tuple[int, int] = (300, 40)) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "submit_constraints", "args": args, "id": f"c{next(_ids)}", "type": "tool_call"}],
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
    )


def finish(keys: list[str]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "finish", "args": {"keys": keys}, "id": f"f{next(_ids)}", "type": "tool_call"}],
        usage_metadata={"input_tokens": 100, "output_tokens": 5, "total_tokens": 105},
    )


@pytest.mark.integration
def test_agent_extracts_repairs_grounds_joins_and_relaxes(recipes: IndexBundle) -> None:
    """The scripted model's first constraint reply names a relation the graph lacks; the repair
    quotes the error; the second is valid. Grounding links "Garlic" and "Italian" with the linker."""
    bad = {"target_type": "Recipe", "triplets": [{"entity": "Garlic", "relation": "CONTAINS", "direction": "out"}]}
    good = {
        "target_type": "Recipe",
        "triplets": [
            {"entity": "Garlic", "relation": "USES", "direction": "out", "confidence": 0.9},
            {"entity": "Italian", "relation": "FROM_CUISINE", "direction": "out", "confidence": 0.7},
        ],
        "attributes": [{"property": "minutes", "op": "<", "value": 30, "confidence": 0.7}],
    }
    model = ScriptedChatModel([finish(["R5"]), tool_reply(bad), tool_reply(good)])
    cfg = AgentConfig(policy="never", k=5, constraints=True)
    result = ask("Which quick Italian recipes use garlic?", bundle=recipes, config=cfg, chat_model=model)
    assert model.remaining == 0
    repair_prompt = str(model.calls[2][-1].content)
    assert "'CONTAINS'" in repair_prompt and "USES" in repair_prompt
    report = result.constraints
    assert report is not None and report["source"] == "llm"
    assert report["extraction"]["repaired"] and report["extraction"]["attempts"] == 2
    assert [s["level"] for s in report["relaxations"]] == [0, 1, 2]
    assert report["relaxations"][1]["dropped"] == "Recipe.minutes < 30"
    # the strict level's candidates (3 of 3 constraints) first, then the planner's own seed, then
    # level 2's (1 of 3 < constraint_min_share 0.5)
    assert [i.key for i in result.context] == ["R1", "R2", "R5", "R3", "R6"]
    assert report["front"] == 2
    steps = {i.key: [p.step for p in i.provenance if p.tool == "constraints"] for i in result.context}
    model = ScriptedChatModel([finish(["R5"]), tool_reply(good)])
    every = ask("Which quick Italian recipes use garlic?", bundle=recipes, chat_model=model,
                config=cfg.model_copy(update={"constraint_min_share": 0.0}))
    assert [i.key for i in every.context] == ["R1", "R2", "R3", "R6", "R5"]
    assert steps == {"R1": [0], "R2": [0], "R3": [2], "R6": [2], "R5": []}
    scores = [i.score for i in result.context]
    assert scores == sorted(scores, reverse=True)
    assert result.usage_by_stage["constraints"].llm_calls == 2
    assert result.usage_by_stage["constraints"].prompt_tokens == 600
    assert "constraints" in result.timings_ms


@pytest.mark.integration
def test_agent_constraints_off_by_default_do_not_run(recipes: IndexBundle) -> None:
    model = ScriptedChatModel([finish(["R5"])])
    result = ask("Which Italian recipes use garlic?", bundle=recipes, config=AgentConfig(policy="never"),
                 chat_model=model)
    assert result.constraints is None and "constraints" not in result.timings_ms
    assert [i.key for i in result.context] == ["R5"]


def test_offline_planner_derives_constraints_from_the_plan(hpo_bundle: Any) -> None:
    """No LLM: the heuristic plan's linked phenotypes become triplet constraints on Disease."""
    question = "Which disease has cutaneous syndactyly of toes, brachyturricephaly and craniosynostosis?"
    result = ask(question, bundle=hpo_bundle, config=AgentConfig(policy="never", k=5, constraints=True))
    report = result.constraints
    assert report is not None and report["source"] == "plan" and report["target_type"] == "Disease"
    assert len(report["constraints"]) == 3 and result.llm_calls == 0
    assert report["relaxations"][0]["active"] == [c["text"] for c in report["constraints"]]
    assert result.context[0].key == "OMIM:101200"
    assert any(p.tool == "constraints" and p.step == 0 for p in result.context[0].provenance)


@pytest.mark.integration
def test_offline_spec_needs_a_target_and_a_one_hop_entity(recipes: IndexBundle) -> None:
    schema = recipes.schema()
    linked = [{"key": "I:Garlic", "label": "Ingredient", "name": "Garlic", "mention": "garlic", "score": 0.8}]
    spec, anchors = offline_spec("Recipe", linked, schema)
    assert spec is not None and anchors == {"garlic": ["I:Garlic"]}
    assert spec.triplets[0].relation == "USES" and spec.triplets[0].direction == "out"
    assert spec.triplets[0].confidence == pytest.approx(0.8)
    assert offline_spec(None, linked, schema) == (None, {})
    assert offline_spec("Cuisine", linked, schema)[0] is None  # no Cuisine-Ingredient edge


@pytest.mark.integration
def test_trace_counts_the_constraint_stage(recipes: IndexBundle, tmp_path: Any) -> None:
    """The trace attributes the extraction call to stage ``constraints``, as AgentResult does."""
    from agent.api import build_agent
    from agent.tracing.tracer import LocalTracer

    good = {"target_type": "Recipe", "triplets": [{"entity": "Garlic", "relation": "USES", "direction": "out"}]}
    model = ScriptedChatModel([finish(["R5"]), tool_reply(good, tokens=(321, 12))])
    tracer = LocalTracer(tmp_path / "t.sqlite")
    agent = build_agent(AgentConfig(policy="never", k=3, constraints=True), bundle=recipes, chat_model=model)
    state = agent.invoke({"question": "Which recipes use garlic?"}, {"callbacks": [tracer]})
    tracer.flush()
    usage = tracer.usage_by_stage()
    assert usage["constraints"].llm_calls == 1 and usage["constraints"].prompt_tokens == 321
    assert state["result"].usage_by_stage["constraints"].prompt_tokens == 321


def test_skb_ask_constraints_and_rerank_options(hpo_index_dir: Any) -> None:
    import json

    from typer.testing import CliRunner

    from agent.cli.main import app

    runner = CliRunner()
    question = "Which disease has cutaneous syndactyly of toes, brachyturricephaly and craniosynostosis?"
    args = ["ask", question, "--index-dir", str(hpo_index_dir), "--policy", "never", "--k", "3", "--no-trace"]
    out = runner.invoke(app, [*args, "--constraints", "--rerank", "listwise", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["constraints"]["source"] == "plan" and data["context"][0]["key"] == "OMIM:101200"
    assert "needs an LLM" in data["rerank"]["notes"][0]  # offline planner: no reranking
    table = runner.invoke(app, [*args, "--constraints"])
    assert table.exit_code == 0 and "constraints (plan):" in table.output
    bad = runner.invoke(app, [*args, "--rerank", "sideways"])
    assert bad.exit_code == 2 and "unknown --rerank 'sideways'" in bad.output


@pytest.mark.integration
def test_offline_constraints_follow_the_planner_answer_type(recipes: IndexBundle) -> None:
    """Without an LLM the constraints are built for the label of the planner's best seed: here the
    (scripted) planner answers with a Cuisine, and no Ingredient is one hop from a Cuisine, so the
    stage finds no constraint instead of joining recipes that the plan's wording suggested."""
    model = ScriptedChatModel([finish(["C:Italian"])])
    result = ask("Which recipe cuisine uses garlic?", bundle=recipes, chat_model=model,
                 config=AgentConfig(policy="never", k=3, constraints=True, planner="offline"))
    assert result.constraints is not None and "skipped" in result.constraints
    assert result.context[0].key == "C:Italian"


@pytest.mark.integration
def test_offline_constraints_not_implied_by_the_plan_are_dropped(recipes: IndexBundle) -> None:
    """The planner answers with recipes none of which uses the linked ingredients (it walked another
    path): the one-hop constraints are not what the plan found, so they are reported and not joined;
    with a seed that uses both, they stay and the join runs; a single constraint from the plan (one
    entity) is not joined either: nothing to intersect."""
    cfg = AgentConfig(policy="never", k=3, constraints=True)
    question = "Which recipes use garlic and lemon?"
    model = ScriptedChatModel([finish(["R4", "R5"])])  # Chicken Soup, Carrot Cake: neither
    result = ask(question, bundle=recipes, chat_model=model, config=cfg)
    report = result.constraints
    assert report is not None and report["not_implied"] == ['(Recipe)-[USES]->"garlic"', '(Recipe)-[USES]->"lemon"']
    assert "fewer than two" in report["skipped"] and [i.key for i in result.context][:2] == ["R4", "R5"]
    model = ScriptedChatModel([finish(["R4", "R1"])])  # Lemon Pasta uses both
    kept = ask(question, bundle=recipes, chat_model=model, config=cfg)
    assert kept.constraints is not None and kept.constraints["not_implied"] == []
    assert kept.constraints["relaxations"][0]["found"] == 2  # Lemon Pasta, Lemon Chicken
    assert [i.key for i in kept.context][:2] == ["R1", "R3"]
    model = ScriptedChatModel([finish(["R2"])])
    single = ask("Which recipes use garlic?", bundle=recipes, chat_model=model, config=cfg).constraints
    assert single is not None and single["single"] == ['(Recipe)-[USES]->"garlic"'] and "skipped" in single


@pytest.mark.integration
def test_a_rejected_join_is_recorded_and_the_scope_widens(recipes: IndexBundle) -> None:
    """The join passes the Cypher schema guard like model-written Cypher: a condition on a property the
    graph does not have is rejected, recorded, and relaxed away (lowest confidence first)."""
    garlic = triplet('(Recipe)-[USES]->"Garlic"', 0.9, 0, ["I:Garlic"], "USES")
    calories = attribute("Recipe.calories < 5", 0.1, 1, "calories", "<", 5)
    result = run_constraints(recipes, "Recipe", [garlic, calories], 10, timeout_ms=5000, max_rows=50)
    assert len(result.errors) == 1 and "calories" in result.errors[0] and result.errors[0].startswith("level 0")
    assert [(s.level, s.dropped, s.found) for s in result.steps] == [(0, None, 0), (1, "Recipe.calories < 5", 4)]
