"""Relation-path prediction on a toy graph whose relations are not movie relations (real MiniLM embedder).

The mechanism must come from the schema and the profile only: these relations (recipes, chefs,
ingredients, cuisines) share no words with MetaQA's, and the profile has no exemplars, so the
prediction rests on the rendered paths and the relation words.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.planning.paths import (
    Hop,
    PathPlanner,
    bracketed_mention,
    choose_topic,
    mask_mention,
    render,
    walk_query,
)
from graphs.skb.model import SKB, Edge, Node
from graphs.skb.profile import parse_profile

PROFILE = {
    "name": "kitchen",
    "relations": {
        "uses_ingredient": {
            "signature": "Recipe -> Ingredient",
            "forward": "the ingredients of {x}",
            "inverse": "the recipes that use {x}",
            "aliases": ["ingredient", "ingredients", "use", "uses", "contain", "contains"],
        },
        "created_by": {
            "signature": "Recipe -> Chef",
            "forward": "the chef who created {x}",
            "inverse": "the recipes created by {x}",
            "aliases": ["chef", "chefs", "created", "create", "invented", "cook"],
        },
        "from_cuisine": {
            "signature": "Recipe -> Cuisine",
            "forward": "the cuisine of {x}",
            "inverse": "the recipes of the {x} cuisine",
            "aliases": ["cuisine", "cuisines"],  # content words only: a preposition would count as a mention
        },
    },
    "planner": {"relation_paths": True, "max_hops": 3},
}


def _toy() -> SKB:
    skb = SKB("kitchen")
    skb.profile = parse_profile(PROFILE)
    for name, label in [
        ("Pad Thai", "Recipe"), ("Green Curry", "Recipe"), ("Tom Yum", "Recipe"), ("Fried Rice", "Recipe"),
        ("Rice noodles", "Ingredient"), ("Lime", "Ingredient"), ("Coconut milk", "Ingredient"),
        ("Ana Reyes", "Chef"), ("Bo Chen", "Chef"), ("Thai", "Cuisine"), ("Chinese", "Cuisine"),
    ]:
        skb.add_node(Node(name, label, {"name": name}))
    for src, rel, dst in [
        ("Pad Thai", "uses_ingredient", "Rice noodles"), ("Pad Thai", "uses_ingredient", "Lime"),
        ("Green Curry", "uses_ingredient", "Coconut milk"), ("Tom Yum", "uses_ingredient", "Lime"),
        ("Fried Rice", "uses_ingredient", "Lime"),
        ("Pad Thai", "created_by", "Ana Reyes"), ("Green Curry", "created_by", "Ana Reyes"),
        ("Tom Yum", "created_by", "Bo Chen"), ("Fried Rice", "created_by", "Bo Chen"),
        ("Pad Thai", "from_cuisine", "Thai"), ("Green Curry", "from_cuisine", "Thai"),
        ("Tom Yum", "from_cuisine", "Thai"), ("Fried Rice", "from_cuisine", "Chinese"),
    ]:
        skb.add_edge(Edge(src, rel, dst))
    return skb


@pytest.fixture(scope="module")
def planner() -> PathPlanner:
    from graphs.embedding.embedder import get_embedder

    return PathPlanner(_toy(), get_embedder("minilm"))


@pytest.mark.parametrize(
    ("question", "topic", "expected"),
    [
        ("which ingredients go into [Pad Thai]", "Pad Thai", [">uses_ingredient"]),
        ("what recipes did [Ana Reyes] create", "Ana Reyes", ["<created_by"]),
        ("which cuisine is [Fried Rice] from", "Fried Rice", [">from_cuisine"]),
        ("what cuisines do the recipes created by [Ana Reyes] come from", "Ana Reyes",
         ["<created_by", ">from_cuisine"]),
        ("which other recipes use the ingredients of [Pad Thai]", "Pad Thai",
         [">uses_ingredient", "<uses_ingredient"]),
        ("which chefs created the recipes that use the ingredients of [Pad Thai]", "Pad Thai",
         [">uses_ingredient", "<uses_ingredient", ">created_by"]),
    ],
)
@pytest.mark.integration
def test_predicts_hops_and_directions_from_wording(
    planner: PathPlanner, question: str, topic: str, expected: list[str]
) -> None:
    best = planner.predict(question, topic, bracketed_mention(question))
    assert [h.spec() for h in best[0].path] == expected, [(sp.score, [h.spec() for h in sp.path]) for sp in best]


@pytest.mark.integration
def test_candidates_start_with_relations_the_node_has(planner: PathPlanner) -> None:
    firsts = {p[0].spec() for p in planner.candidates("Lime")}
    assert firsts == {"<uses_ingredient"}
    assert max(len(p) for p in planner.candidates("Lime")) == 3


def test_rendering_composes_the_profile_templates() -> None:
    profile = parse_profile(PROFILE)
    path = (Hop("created_by", "in", "Recipe"), Hop("from_cuisine", "out", "Cuisine"))
    assert render(path, profile) == "the cuisine of the recipes created by X"
    # a relation without templates is rendered from its name
    assert render((Hop("served_with", "out", "Dish"),), profile) == "the served with of X"


def test_walk_query_is_one_parameterised_read_query_with_quoted_names() -> None:
    path = (Hop("uses_ingredient", "out", "Ingredient"), Hop("uses_ingredient", "in", "Recipe"),
            Hop("created`by", "out", "Chef"))
    query = walk_query("Recipe", path, 50)
    assert query.startswith("MATCH (s:`Recipe` {key: $key})-[:`uses_ingredient`]->(n1)<-[:`uses_ingredient`]-(n2)")
    assert "-[:`created``by`]->(n3)" in query
    assert "n1 <> s AND n2 <> s AND n3 <> s" in query and query.endswith("LIMIT 50")


def test_topic_is_the_bracketed_mention_and_is_masked() -> None:
    linked: list[dict[str, Any]] = [
        {"key": "Lime", "mention": "Lime", "method": "exact", "score": 1.0},
        {"key": "Pad Thai", "mention": "Pad Thai", "method": "exact", "score": 1.0},
    ]
    question = "does Lime go into [Pad Thai]"
    topic = choose_topic(question, linked)
    assert topic is not None and topic["key"] == "Pad Thai"
    assert mask_mention(question, "Pad Thai") == "does Lime go into X"
    # without brackets: the longest exact mention
    topic = choose_topic("does Lime go into Pad Thai", linked)
    assert topic is not None and topic["key"] == "Pad Thai"
