"""Topic choice without brackets on a toy graph whose relations are not movie relations (real MiniLM).

A name exists twice: the Chef ``Bo Chen`` and the literal Tag ``bo chen`` (another case). Asked
without brackets, the entity must be the topic the paths are walked from; a bracketed question
keeps the bracket rule.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agent.planning.paths import planner_for
from agent.planning.topics import choose_topic_for_paths
from agent.planning.walks import path_walk_message
from graphs.skb.model import SKB, Edge, Node
from graphs.skb.profile import parse_profile

PROFILE = {
    "name": "kitchen-tags",
    "label_precedence": ["Recipe", "Chef", "Ingredient"],
    "literal_labels": ["Tag"],
    "relations": {
        "uses_ingredient": {
            "signature": "Recipe -> Ingredient",
            "forward": "the ingredients of {x}",
            "inverse": "the recipes that use {x}",
            "aliases": ["ingredient", "ingredients", "use", "uses"],
        },
        "created_by": {
            "signature": "Recipe -> Chef",
            "forward": "the chef who created {x}",
            "inverse": "the recipes created by {x}",
            "aliases": ["chef", "chefs", "created", "create"],
        },
        "tagged": {
            "signature": "Recipe -> Tag",
            "forward": "the tags of {x}",
            "inverse": "the recipes tagged {x}",
            "aliases": ["tag", "tags", "tagged"],
        },
    },
    "planner": {"relation_paths": True, "max_hops": 3},
}


def _toy() -> SKB:
    skb = SKB("kitchen-tags")
    skb.profile = parse_profile(PROFILE)
    for name, label in [
        ("Pad Thai", "Recipe"), ("Tom Yum", "Recipe"), ("Fried Rice", "Recipe"),
        ("Lime", "Ingredient"), ("Rice noodles", "Ingredient"),
        ("Ana Reyes", "Chef"), ("Bo Chen", "Chef"), ("bo chen", "Tag"), ("spicy", "Tag"),
    ]:
        skb.add_node(Node(name, label, {"name": name}))
    for src, rel, dst in [
        ("Pad Thai", "uses_ingredient", "Rice noodles"), ("Pad Thai", "uses_ingredient", "Lime"),
        ("Tom Yum", "uses_ingredient", "Lime"), ("Fried Rice", "uses_ingredient", "Lime"),
        ("Pad Thai", "created_by", "Ana Reyes"), ("Tom Yum", "created_by", "Bo Chen"),
        ("Fried Rice", "created_by", "Bo Chen"),
        ("Pad Thai", "tagged", "bo chen"), ("Tom Yum", "tagged", "spicy"),
    ]:
        skb.add_edge(Edge(src, rel, dst))
    return skb


@pytest.fixture(scope="module")
def bundle() -> Any:
    from graphs.embedding.embedder import get_embedder

    return SimpleNamespace(skb=_toy(), embedder=get_embedder("minilm"))


def _linked(mention: str) -> list[dict[str, Any]]:
    # the literal first: a choice by order or mention length alone would pick it
    return [
        {"key": "bo chen", "label": "Tag", "mention": mention, "method": "exact", "score": 1.0},
        {"key": "Bo Chen", "label": "Chef", "mention": mention, "method": "exact", "score": 1.0},
    ]


@pytest.mark.integration
def test_unbracketed_name_in_two_roles_walks_from_the_entity(bundle: Any) -> None:
    question = "which ingredients are used by the recipes Bo Chen created"
    plan = {"question": question, "linked_entities": _linked("Bo Chen"), "per_call_k": 50}
    message = path_walk_message(bundle, plan, [])
    assert message is not None and message.tool_calls
    call = message.tool_calls[0]
    assert call["args"]["params"] == {"key": "Bo Chen"}
    assert call["args"]["query"].startswith("MATCH (s:`Chef` {key: $key})<-[:`created_by`]-(n1)")


@pytest.mark.integration
def test_path_words_decide_between_entity_and_literal(bundle: Any) -> None:
    planner = planner_for(bundle)
    assert planner is not None
    # lower case in the question and "tagged": the tag's paths explain the wording, the chef's do not
    topic = choose_topic_for_paths("which recipes are tagged bo chen", _linked("bo chen"), planner)
    assert topic is not None and topic["key"] == "bo chen"
    topic = choose_topic_for_paths("what recipes did Bo Chen create", _linked("Bo Chen"), planner)
    assert topic is not None and topic["key"] == "Bo Chen"


@pytest.mark.integration
def test_bracketed_question_keeps_the_bracket_rule(bundle: Any) -> None:
    planner = planner_for(bundle)
    assert planner is not None
    linked = [
        {"key": "Lime", "mention": "Lime", "method": "exact", "score": 1.0},
        {"key": "Pad Thai", "mention": "Pad Thai", "method": "exact", "score": 1.0},
    ]
    topic = choose_topic_for_paths("does Lime go into [Pad Thai]", linked, planner)
    assert topic is not None and topic["key"] == "Pad Thai"
    topic = choose_topic_for_paths("which recipes use [Lime]", linked, planner)
    assert topic is not None and topic["key"] == "Lime"


def test_initials_and_short_titles_do_not_split_an_unbracketed_name() -> None:
    from agent.linking.lexicon import _tokenise

    tokens = _tokenise("the recipes created by Bo N. Chen use what. Which chef cooks Mr. Lime")
    starts = {t.raw: t.boundary_before for t in tokens}
    assert starts["Chen"] is False and starts["Lime"] is False  # "N." and "Mr." are inside names
    assert starts["Which"] is True  # a real sentence end still cuts
