"""Information-content scoring on a hand-made ontology, and the offline planner's tool-call protocol."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agent.planning.offline import OfflinePlanner, parse_plan, read_observations
from agent.planning.ranking import rank_targets
from agent.planning.targets import predict_target_type, relation_paths
from agent.scoring.ontology import Annotation, build_model, find_annotation
from agent.scoring.stored import find_hierarchy, model_for
from graphs.errors import PlannerError
from graphs.skb.model import SKB
from graphs.skb.profile import Profile, ScoringSpec
from tests.small_graphs import tiny_skb
from tools.results import parse_result

IC = {"R": 0.0, "A": math.log(4 / 3), "B": math.log(2), "A1": math.log(2), "A2": math.log(4), "B1": math.log(2)}


@pytest.fixture(scope="module")
def tiny() -> Any:
    skb = tiny_skb()
    model = model_for(skb, "Item", "Term")
    assert model is not None
    return skb, model


def test_hierarchy_and_annotation_are_discovered_from_the_schema(tiny: Any) -> None:
    skb, _ = tiny
    assert find_hierarchy(skb, "Term") is not None
    assert find_hierarchy(skb, "Term").narrow_to_broad == "out"  # type: ignore[union-attr]
    assert find_hierarchy(skb, "Item") is None
    assert find_annotation(skb.schema(), "Item", "Term") == Annotation("Item", "Term", "ANNOTATED", "out")
    reverse = tiny_skb(reverse_hierarchy=True)
    h = find_hierarchy(reverse, "Term")
    assert h is not None and h.rel == "HAS_CHILD" and h.narrow_to_broad == "in"


def test_information_content_matches_hand_computation(tiny: Any) -> None:
    _, model = tiny
    for key, expected in IC.items():
        assert model.ic[model.term_index[key]] == pytest.approx(expected, abs=1e-6), key


def test_reversed_hierarchy_gives_the_same_ic() -> None:
    skb = tiny_skb(reverse_hierarchy=True)
    model = build_model(skb, find_annotation(skb.schema(), "Item", "Term"), find_hierarchy(skb, "Term"))  # type: ignore[arg-type]
    assert [float(model.ic[model.term_index[k]]) for k in IC] == pytest.approx(list(IC.values()), abs=1e-6)


def _scores(model: Any, query: list[str], **kw: Any) -> dict[str, float]:
    s = model.score(query, **kw)
    return {t: float(s[model.target_index[t]]) for t in model.targets}


def test_resnik_best_match_sum(tiny: Any) -> None:
    _, model = tiny
    s = _scores(model, ["A2"], frequency_mix=0.0, size_penalty=0.0)
    # A2 vs I1: common ancestor A; vs I2: A2 itself; vs I3: only the root; vs I4: A
    assert s == pytest.approx({"I1": IC["A"], "I2": IC["A2"], "I3": 0.0, "I4": IC["A"]}, abs=1e-6)
    s = _scores(model, ["A1", "B1"], frequency_mix=0.0, size_penalty=0.0)
    assert s == pytest.approx({"I1": IC["A1"], "I2": IC["A"], "I3": IC["B1"], "I4": IC["A1"] + IC["B1"]}, abs=1e-6)


def test_query_term_more_general_than_annotation_matches_fully(tiny: Any) -> None:
    _, model = tiny
    s = _scores(model, ["A"], frequency_mix=0.0, size_penalty=0.0)
    assert s["I1"] == s["I2"] == s["I4"] == pytest.approx(IC["A"]) and s["I3"] == 0.0


def test_size_penalty_breaks_ties_toward_specific_targets(tiny: Any) -> None:
    _, model = tiny
    s = _scores(model, ["A1"], frequency_mix=0.0, size_penalty=0.5)
    # I1 and I4 both match A1 exactly; I4 has two annotations
    assert s["I1"] == pytest.approx(IC["A1"] - 0.5 * math.log(2))
    assert s["I4"] == pytest.approx(IC["A1"] - 0.5 * math.log(3))
    assert s["I1"] > s["I4"]


def test_frequency_weight_scales_the_match(tiny: Any) -> None:
    _, model = tiny
    s = _scores(model, ["B1"], frequency_mix=1.0, size_penalty=0.0)
    assert s["I3"] == pytest.approx(IC["B1"]) and s["I4"] == pytest.approx(0.2 * IC["B1"])


def test_unknown_query_terms_score_zero(tiny: Any) -> None:
    _, model = tiny
    assert not np.any(model.score(["nope"]))


def test_rank_targets_orders_candidates_and_ignores_other_labels(tiny: Any) -> None:
    skb, _ = tiny
    linked = [{"key": "A1", "label": "Term", "mention": "a1"}, {"key": "B1", "label": "Term", "mention": "b1"}]
    paths = [[{"rel": "ANNOTATED", "direction": "in", "to_label": "Item"}]]
    ranked = rank_targets(skb, "Item", linked, paths, ["I1", "I3", "I4", "A1", "missing"])
    assert ranked[0][0] == "I4"  # matches both terms exactly; I1 and I3 match one each
    assert ranked[1][1] == pytest.approx(ranked[2][1])
    assert {k for k, _ in ranked} == {"I1", "I3", "I4"}


# -- the planner protocol ------------------------------------------------------------------


def _plan_message(
    skb: SKB,
    question: str,
    linked: list[dict[str, Any]],
    k: int = 50,
    rounds: int = 4,
    semantic_net: str | None = None,
) -> HumanMessage:
    schema = skb.schema()
    target = predict_target_type(question, schema)
    sources = sorted({e["label"] for e in linked if e["label"] != target})
    paths = [[s.model_dump() for s in p] for p in relation_paths(schema, sources, target or "", 2)]
    plan = {
        "question": question,
        "linked_entities": linked,
        "target_type": target,
        "relation_paths": paths,
        "k": 20,
        "per_call_k": k,
        "max_rounds": rounds,
    }
    if semantic_net is not None:
        plan["semantic_net"] = semantic_net
    return HumanMessage(f"Question: {question}\n<plan>{json.dumps(plan)}</plan>")


APERT = "Which rare disease is characterized by brachyturricephaly, proptosis and cutaneous syndactyly of toes?"
APERT_LINKED = [
    {"key": "HP:0000244", "label": "Phenotype", "name": "Brachyturricephaly", "mention": "brachyturricephaly",
     "score": 1.0, "method": "exact"},
    {"key": "HP:0000520", "label": "Phenotype", "name": "Proptosis", "mention": "proptosis", "score": 1.0,
     "method": "exact"},
    {"key": "HP:0010621", "label": "Phenotype", "name": "Cutaneous syndactyly of toes",
     "mention": "cutaneous syndactyly of toes", "score": 1.0, "method": "exact"},
]  # fmt: skip


def test_first_round_searches_all_entities_along_the_path_and_their_hierarchy_in_one_call_each(
    hpo_mini_skb: SKB,
) -> None:
    """One search_nodes call per hop with every linked key (the tool aggregates per neighbour and says
    which keys reach it), K results per key; one for the hierarchy likewise; and, in the same round,
    one along the hop from the hierarchy neighbours, read off the SKB (worked out by hand: each linked
    term's parents in the fixture, ordered per linked term, then by key). No semantic_search by default
    (as-needed); one with semantic_net=always."""
    planner = OfflinePlanner(SimpleNamespace(skb=hpo_mini_skb))
    msgs: list[BaseMessage] = [SystemMessage("sys"), _plan_message(hpo_mini_skb, APERT, APERT_LINKED, k=7)]
    reply = planner.bind_tools([]).invoke(msgs)
    assert isinstance(reply, AIMessage)
    calls = reply.tool_calls
    along = [c for c in calls if c["name"] == "search_nodes" and c["args"]["rel_types"] == ["HAS_PHENOTYPE"]]
    hier = [c for c in calls if c["name"] == "search_nodes" and c["args"]["rel_types"] == ["IS_A"]]
    parents = ["HP:0000234", "HP:0009121", "HP:0000118", "HP:0011297"]  # of 0000244 (two), 0000520, 0010621
    assert [c["args"]["keys"] for c in along] == [[e["key"] for e in APERT_LINKED], parents]
    assert all(c["args"]["direction"] == "in" and c["args"]["target_label"] == "Disease" for c in along)
    assert all(c["args"]["limit"] == 7 * len(APERT_LINKED) for c in along + hier)
    assert [c["args"]["keys"] for c in hier] == [[e["key"] for e in APERT_LINKED]]
    assert all(c["args"]["direction"] == "both" and c["args"]["target_label"] == "Phenotype" for c in hier)
    assert not [c for c in calls if c["name"] == "semantic_search"]
    assert len({c["id"] for c in calls}) == len(calls)
    always = _plan_message(hpo_mini_skb, APERT, APERT_LINKED, k=7, semantic_net="always")
    sem = [c for c in planner.invoke([always]).tool_calls if c["name"] == "semantic_search"]  # type: ignore[attr-defined]
    assert len(sem) == 1 and sem[0]["args"]["label"] == "Disease"
    never = _plan_message(hpo_mini_skb, APERT, [], k=7, semantic_net="never")
    assert [c["name"] for c in planner.invoke([never]).tool_calls] == ["finish"]  # type: ignore[attr-defined]
    nothing_linked = _plan_message(hpo_mini_skb, APERT, [], k=7)
    assert [c["name"] for c in planner.invoke([nothing_linked]).tool_calls] == ["semantic_search"]  # type: ignore[attr-defined]


def test_as_needed_semantic_search_comes_when_structure_reached_fewer_than_k(hpo_mini_skb: SKB) -> None:
    """The second round adds the semantic safety net only when round 0 reached fewer than k targets."""
    planner = OfflinePlanner(SimpleNamespace(skb=hpo_mini_skb))
    plan = _plan_message(hpo_mini_skb, APERT, APERT_LINKED, k=7)
    first = planner.invoke([plan])

    def answered(n_targets: int) -> list[BaseMessage]:
        neighbours = [
            {"key": f"D{i}", "label": "Disease", "name": f"d{i}", "seeds": ["HP:0000244"], "rels": ["HAS_PHENOTYPE"],
             "paths": 1}
            for i in range(n_targets)
        ]  # fmt: skip
        hood = {"kind": "neighborhood", "provenance": {"tool": "search_nodes", "step": 1, "query": "q"},
                "keys": ["HP:0000244"], "neighbors": neighbours}  # fmt: skip
        replies = [
            ToolMessage(content="", artifact=parse_result("search_nodes", hood), tool_call_id=c["id"], name=c["name"])
            for c in first.tool_calls[:1]  # type: ignore[attr-defined]
        ]
        return [plan, first, *replies]

    thin = planner.invoke(answered(3)).tool_calls  # type: ignore[attr-defined]
    assert [c["name"] for c in thin] == ["semantic_search"] and thin[0]["args"]["label"] == "Disease"
    enough = planner.invoke(answered(20)).tool_calls  # type: ignore[attr-defined]
    assert [c["name"] for c in enough] == ["finish"]


@pytest.mark.parametrize("reverse", [False, True])
def test_hierarchy_neighbours_are_expanded_in_the_first_round_on_any_graph(reverse: bool) -> None:
    """Generic labels and relation names (Term/Item, SUBCLASS_OF or HAS_CHILD drawn the other way): the
    first round expands the linked term, its hierarchy, and the hierarchy neighbours along the hop. By hand:
    A's neighbours are its parent R and its children A1, A2 (one edge each: by key)."""
    skb = tiny_skb(reverse_hierarchy=reverse)
    planner = OfflinePlanner(SimpleNamespace(skb=skb))
    linked = [{"key": "A", "label": "Term", "name": "term A", "mention": "term a", "score": 1.0}]
    plan = {"question": "Which item has term a?", "linked_entities": linked, "target_type": "Item",
            "relation_paths": [[{"rel": "ANNOTATED", "direction": "in", "to_label": "Item"}]],
            "k": 20, "per_call_k": 5, "max_rounds": 4}  # fmt: skip
    calls = planner.invoke([HumanMessage(f"<plan>{json.dumps(plan)}</plan>")]).tool_calls  # type: ignore[attr-defined]
    rel = "HAS_CHILD" if reverse else "SUBCLASS_OF"
    assert [(c["args"]["keys"], c["args"]["rel_types"], c["args"]["direction"]) for c in calls] == [
        (["A"], ["ANNOTATED"], "in"),
        (["A"], [rel], "both"),
        (["A1", "A2", "R"], ["ANNOTATED"], "in"),
    ]


def test_planner_without_plan_block_fails_clearly(hpo_mini_skb: SKB) -> None:
    with pytest.raises(PlannerError, match="<plan>"):
        parse_plan([HumanMessage("no plan here")])
    with pytest.raises(PlannerError, match="not valid JSON"):
        parse_plan([HumanMessage("<plan>{oops</plan>")])


def test_one_round_budget_finishes_immediately(hpo_mini_skb: SKB) -> None:
    planner = OfflinePlanner(SimpleNamespace(skb=hpo_mini_skb))
    reply = planner.invoke([_plan_message(hpo_mini_skb, APERT, APERT_LINKED, rounds=1)])
    assert [c["name"] for c in reply.tool_calls] == ["finish"]  # type: ignore[attr-defined]
    assert reply.tool_calls[0]["args"]["keys"] == []  # type: ignore[attr-defined]  # no tool results, no candidates


def _run_tools(tools: dict[str, Any], reply: AIMessage, question: str, step: int) -> list[ToolMessage]:
    out = []
    for call in reply.tool_calls:
        args = {**call["args"], "step": step, "question": question}
        out.append(
            tools[call["name"]].invoke({"type": "tool_call", "id": call["id"], "name": call["name"], "args": args})
        )
    return out


@pytest.mark.integration
def test_full_protocol_with_real_tools(hpo_bundle: Any) -> None:
    """Round 0 search (linked terms, their hierarchy, its neighbours) -> finish, against the real tools and store."""
    from tools import make_tools

    tools = {t.name: t for t in make_tools(hpo_bundle, lambda: APERT)}
    planner = OfflinePlanner(hpo_bundle)
    msgs: list[BaseMessage] = [_plan_message(hpo_bundle.skb, APERT, APERT_LINKED)]
    names_per_round = []
    for step in range(1, 5):
        reply = planner.invoke(msgs)
        names_per_round.append(sorted({c["name"] for c in reply.tool_calls}))
        msgs.append(reply)
        if any(c["name"] == "finish" for c in reply.tool_calls):
            break
        msgs.extend(_run_tools(tools, reply, APERT, step))
    # hierarchy neighbours expanded in round 0; the fixture's few diseases are fewer than k (20), so the
    # as-needed semantic safety net runs in round 1
    assert names_per_round == [["search_nodes"], ["semantic_search"], ["finish"]]
    finish = msgs[-1].tool_calls[0]["args"]  # type: ignore[attr-defined]
    assert finish["keys"][0] == "OMIM:101200"
    assert finish["scores"] == sorted(finish["scores"], reverse=True)
    seen = {key for m in msgs if isinstance(m, ToolMessage) for key in m.artifact.found_keys()}
    assert set(finish["keys"]) <= seen  # candidates come from tool results only
    obs = read_observations(msgs)
    assert obs.rounds == len(names_per_round)


@pytest.mark.integration
def test_gene_question_scores_genes_through_their_diseases(hpo_bundle: Any) -> None:
    from tools import make_tools

    question = "Which gene is most likely implicated in a patient with brachyturricephaly, proptosis and cutaneous syndactyly of toes?"
    tools = {t.name: t for t in make_tools(hpo_bundle, lambda: question)}
    planner = OfflinePlanner(hpo_bundle)
    msgs: list[BaseMessage] = [_plan_message(hpo_bundle.skb, question, APERT_LINKED)]
    for step in range(1, 5):
        reply = planner.invoke(msgs)
        msgs.append(reply)
        if any(c["name"] == "finish" for c in reply.tool_calls):
            break
        msgs.extend(_run_tools(tools, reply, question, step))
    finish = msgs[-1].tool_calls[0]["args"]  # type: ignore[attr-defined]
    assert finish["keys"][0] == "FGFR2"


def test_symmetric_weight_from_the_profile_rewards_targets_the_query_explains() -> None:
    """The profile's ``scoring.symmetric`` adds the mean target->query best match (times the query size)."""
    skb = tiny_skb()
    skb.profile = Profile(
        scoring=ScoringSpec(edge_weight_property="freq", frequency_mix=0.0, size_penalty=0.0, symmetric=1.0)
    )
    model = model_for(skb, "Item", "Term")
    assert model is not None and model.symmetric == 1.0
    s = _scores(model, ["A1"])
    # I1 {A1}: A1 explains A1 fully both ways. I4 {A1, B1}: B1's best match in the query is the root (0),
    # so its mean is halved. I2 {A2}: A2 and A1 meet at A both ways. I3 {B1}: only the root.
    expected = {"I1": 2 * IC["A1"], "I2": 2 * IC["A"], "I3": 0.0, "I4": IC["A1"] + IC["A1"] / 2}
    assert s == pytest.approx(expected, abs=1e-6)
    assert s["I1"] > s["I4"]  # without the symmetric term (and no size penalty) they tie
    assert _scores(model, ["A1"], symmetric=0.0)["I1"] == pytest.approx(_scores(model, ["A1"], symmetric=0.0)["I4"])


def test_a_question_naming_no_answer_type_is_answered_as_the_profiles_default(hpo_bundle: Any) -> None:
    """HPO's profile names Disease as the default answer: a question without a type word is a diagnosis."""
    from agent.api import ask

    result = ask("My son has brachyturricephaly, proptosis and cutaneous syndactyly of toes. What could he have?",
                 bundle=hpo_bundle)
    assert result.target_type == "Disease"
    assert result.context[0].key == "OMIM:101200"
