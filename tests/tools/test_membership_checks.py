"""What two named entities have in common, found by membership (``search_nodes`` ``among``) on a real
FalkorDB: the store returns only the listed neighbours, a hub is then read at the cost of the listed
nodes (never sampled); the offline planner checks a very connected named entity among the answers of a
rarely connected one of another label, finds the common answer a sampled or cut expansion would miss,
and falls back to the plain expansion when the two share nothing. A relation that implies the target
label is not re-checked by the server (same rows). The graph is neutral (labels and relations of no
dataset); a planner on one label's entities only (the term-annotation case) makes no membership check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import ValidationError

import agent.planning.offline as offline_module
import tools.search_nodes as search_nodes_module
from agent.api import ask
from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.planning.offline import OfflinePlanner
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import CypherValidationError
from graphs.skb.model import SKB, Edge, Node
from tools.results import Neighborhood
from tools.search_nodes import make_search_nodes

pytestmark = pytest.mark.integration

HUB_PARCELS = 120
#: Parcels sent by Ada Quill; p077 is also routed via the hub (the one they have in common).
ADA_PARCELS = ["p077", "p200", "p201"]
#: Stations named "Harbour Station".
HOMONYMS = 25


def depot_skb() -> SKB:
    """A ``Station`` hub routing 120 parcels, a village station routing 3 of them, and ``Sender`` nodes:
    Ada Quill sent three parcels (one routed via the hub), Bo Lark sent two others (none via the hub)."""
    skb = SKB("depot")
    skb.add_node(Node("st-hub", "Station", {"name": "Central Sorting Station"}))
    skb.add_node(Node("st-village", "Station", {"name": "Village Post Station"}))
    skb.add_node(Node("s-ada", "Sender", {"name": "Ada Quill"}))
    skb.add_node(Node("s-bo", "Sender", {"name": "Bo Lark"}))
    for i in range(HUB_PARCELS):
        skb.add_node(Node(f"p{i:03d}", "Parcel", {"name": f"parcel {i} of {'red' if i % 2 else 'blue'} crates"}))
        skb.add_edge(Edge(f"p{i:03d}", "ROUTED_VIA", "st-hub"))
    for key in ("p200", "p201", "p202", "p203"):
        skb.add_node(Node(key, "Parcel", {"name": f"parcel {key[1:]} of green crates"}))
    for key in ("p200", "p201", "p005"):
        skb.add_edge(Edge(key, "ROUTED_VIA", "st-village"))
    for key in ADA_PARCELS:
        skb.add_edge(Edge(key, "SENT_BY", "s-ada"))
    for key in ("p202", "p203"):
        skb.add_edge(Edge(key, "SENT_BY", "s-bo"))
    skb.add_edge(Edge("p202", "ROUTED_VIA", "st-village"))
    skb.add_node(Node("s-big", "Sender", {"name": "Big Parcel Company"}))
    for i in range(300, 350):  # 60 parcels: 50 of its own, and 10 routed via the hub
        skb.add_node(Node(f"p{i:03d}", "Parcel", {"name": f"parcel {i} of grey sacks"}))
    for i in [*range(10, 20), *range(300, 350)]:
        skb.add_edge(Edge(f"p{i:03d}", "SENT_BY", "s-big"))
    for i in range(HOMONYMS):  # one name shared by more stations than the linker's entity cap
        skb.add_node(Node(f"st-harbour-{i}", "Station", {"name": "Harbour Station"}))
        skb.add_edge(Edge(f"p{i:03d}", "ROUTED_VIA", f"st-harbour-{i}"))
    return skb


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    path = tmp_path_factory.mktemp("member") / "index"
    build_index(depot_skb(), path, IndexConfig(dataset="depot", embedder="hash:32"))
    b = IndexBundle.open(path)
    yield b
    b.close()


def call(bundle: IndexBundle, args: dict[str, Any]) -> Neighborhood:
    tool = make_search_nodes(bundle, lambda: "parcels routed via the central sorting station")
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage) and isinstance(message.artifact, Neighborhood)
    return message.artifact


def test_the_store_returns_only_the_listed_neighbours(bundle: IndexBundle) -> None:
    store = bundle.store
    rows = store.aggregate_neighbors(
        "Station", ["st-hub", "st-village"], rel_types=["ROUTED_VIA"], direction="in", target_label="Parcel",
        limit=100, among=["p005", "p077", "p200", "p203", "no-such-key"],
    )
    assert sorted((r.key, sorted(set(r.seeds))) for r in rows) == [
        ("p005", ["st-hub", "st-village"]), ("p077", ["st-hub"]), ("p200", ["st-village"])
    ]
    assert store.aggregate_neighbors("Station", ["st-hub"], rel_types=["ROUTED_VIA"], direction="in", among=[]) == []
    with pytest.raises(CypherValidationError, match="among"):
        store.aggregate_neighbors("Station", ["st-hub"], among="p005")  # type: ignore[arg-type]


def test_a_membership_check_from_a_hub_is_exact_and_not_sampled(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_nodes_module, "HUB_EDGES", 40)
    sampled = call(bundle, {"keys": ["st-hub"], "rel_types": ["ROUTED_VIA"], "direction": "in", "limit": 200})
    assert sampled.sampled == {"st-hub": HUB_PARCELS}  # without a list: a 40-edge sample
    listed = ["p119", "p077", "p200", "p003"]
    checked = call(bundle, {"keys": ["st-hub"], "rel_types": ["ROUTED_VIA"], "direction": "in", "limit": 200,
                            "among": listed, "include_triples": True})
    assert not checked.sampled and checked.sample_edges is None
    assert sorted(n.key for n in checked.neighbors) == ["p003", "p077", "p119"]  # p200 is not routed via the hub
    assert all(n.seeds == ["st-hub"] for n in checked.neighbors)
    assert checked.triples and all(t.src in listed for t in checked.triples)
    assert "among=" in checked.provenance.query
    tool = make_search_nodes(bundle)
    too_many = [f"p{i:03d}" for i in range(search_nodes_module.MAX_AMONG + 1)]
    with pytest.raises(ValidationError, match="among"):
        tool.args_schema.model_validate({"keys": ["st-hub"], "among": too_many})  # type: ignore[union-attr]


def test_a_label_the_relation_implies_is_not_sent_to_the_server(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_nodes_module, "READ_SKB", False)  # what the store is sent
    sent: list[str | None] = []
    store = bundle.store
    real = type(store).aggregate_neighbors

    def spy(self: Any, seed_label: str, keys: Any, **kw: Any) -> Any:
        sent.append(kw.get("target_label"))
        return real(self, seed_label, keys, **kw)

    monkeypatch.setattr(type(store), "aggregate_neighbors", spy)
    implied = call(bundle, {"keys": ["st-village"], "rel_types": ["ROUTED_VIA"], "direction": "in",
                            "target_label": "Parcel", "limit": 50})
    # Parcel nodes are both ROUTED_VIA and SENT_BY sources: from a Parcel, "both" directions reach two labels
    mixed = call(bundle, {"keys": ["p200"], "direction": "both", "target_label": "Station", "limit": 50})
    listed = call(bundle, {"keys": ["st-village"], "rel_types": ["ROUTED_VIA"], "direction": "in",
                           "target_label": "Parcel", "limit": 50, "among": ["p200"]})
    assert sent == [None, "Station", "Parcel"]  # the membership check keeps it: the listed nodes' index
    assert sorted(n.key for n in implied.neighbors) == ["p005", "p200", "p201", "p202"]
    assert [n.key for n in mixed.neighbors] == ["st-village"]
    assert [n.key for n in listed.neighbors] == ["p200"]


def _plan(linked: list[dict[str, Any]]) -> HumanMessage:
    plan = {
        "question": "Which parcel is routed via Central Sorting Station and sent by Ada Quill?",
        "linked_entities": linked,
        "target_type": "Parcel",
        "relation_paths": [
            [{"rel": "ROUTED_VIA", "direction": "in", "to_label": "Parcel"}],
            [{"rel": "SENT_BY", "direction": "in", "to_label": "Parcel"}],
        ],
        "k": 5,
        "per_call_k": 5,
        "max_rounds": 4,
    }
    return HumanMessage(f"<plan>{json.dumps(plan)}</plan>")


HUB = {"key": "st-hub", "label": "Station", "name": "Central Sorting Station", "mention": "central", "score": 1.0}
ADA = {"key": "s-ada", "label": "Sender", "name": "Ada Quill", "mention": "ada quill", "score": 1.0}
BO = {"key": "s-bo", "label": "Sender", "name": "Bo Lark", "mention": "bo lark", "score": 1.0}


def test_the_planner_checks_the_hub_among_the_rare_entitys_answers(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offline_module, "ANCHOR_MAX", 50)  # the hub's 120 parcels are more, Ada's 3 fewer
    planner = OfflinePlanner(SimpleNamespace(skb=bundle.skb))
    calls = planner.invoke([_plan([HUB, ADA])]).tool_calls  # type: ignore[attr-defined]
    by_rel = {c["args"]["rel_types"][0]: c["args"] for c in calls if c["name"] == "search_nodes"}
    assert by_rel["ROUTED_VIA"]["keys"] == ["st-hub"]
    assert by_rel["ROUTED_VIA"]["among"] == ADA_PARCELS  # read off the SKB: Ada's parcels
    assert "among" not in by_rel["SENT_BY"]  # the rare one is expanded as before
    # without a second label there is nothing to check against: the hub's own call, as before
    alone = planner.invoke([_plan([HUB])]).tool_calls  # type: ignore[attr-defined]
    assert all("among" not in c["args"] for c in alone)


def test_when_every_named_entity_is_very_connected_both_are_checked_among_what_they_share(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offline_module, "ANCHOR_MAX", 2)  # Ada's 3 parcels are "many" too; they share 1
    planner = OfflinePlanner(SimpleNamespace(skb=bundle.skb))
    calls = planner.invoke([_plan([HUB, ADA])]).tool_calls  # type: ignore[attr-defined]
    checked = sorted((c["args"]["keys"], c["args"].get("among")) for c in calls if c["name"] == "search_nodes")
    assert checked == [(["s-ada"], ["p077"]), (["st-hub"], ["p077"])]
    # past the bound on the edges read off the SKB, no intersection: both expanded as without the check
    monkeypatch.setattr(offline_module, "SHARED_MAX_EDGES", 10)
    plain = planner.invoke([_plan([HUB, ADA])]).tool_calls  # type: ignore[attr-defined]
    assert all("among" not in c["args"] for c in plain)


def test_a_very_connected_entity_beside_a_rare_one_of_its_label_is_checked_among_what_all_share(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offline_module, "ANCHOR_MAX", 50)  # the hub (120) and Big Parcel Company (60) are many
    big = {"key": "s-big", "label": "Sender", "name": "Big Parcel Company", "mention": "big", "score": 1.0}
    planner = OfflinePlanner(SimpleNamespace(skb=bundle.skb))
    calls = planner.invoke([_plan([HUB, ADA, big])]).tool_calls  # type: ignore[attr-defined]
    checked = {tuple(c["args"]["keys"]): c["args"].get("among") for c in calls if c["name"] == "search_nodes"}
    assert checked[("st-hub",)] == ADA_PARCELS  # among the other label's few answers (Ada's)
    # no other label has few answers for the company: it is checked among what the hub and the senders share
    assert checked[("s-big",)] == [*(f"p{i:03d}" for i in range(10, 20)), "p077"]
    assert checked[("s-ada",)] is None  # Ada's own call, as before


def test_the_common_answer_ranks_first_end_to_end(bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_nodes_module, "READ_SKB", False)  # what the store is sent
    monkeypatch.setattr(offline_module, "ANCHOR_MAX", 50)
    monkeypatch.setattr(search_nodes_module, "HUB_EDGES", 40)  # the hub alone would be a 40-edge sample
    reads: list[dict[str, Any]] = []
    store = bundle.store
    real = type(store).aggregate_neighbors

    def spy(self: Any, seed_label: str, keys: Any, **kw: Any) -> Any:
        reads.append({"keys": list(keys), **kw})
        return real(self, seed_label, keys, **kw)

    monkeypatch.setattr(type(store), "aggregate_neighbors", spy)
    result = ask("Which parcel is routed via Central Sorting Station and sent by Ada Quill?", bundle=bundle,
                 config=AgentConfig(k=3, k_prime=0))
    assert result.context and result.context[0].key == "p077"
    hub_reads = [r for r in reads if r["keys"] == ["st-hub"]]
    assert hub_reads and all(r.get("among") == ADA_PARCELS and r.get("max_edges") is None for r in hub_reads)


def test_nothing_in_common_falls_back_to_the_plain_expansion(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offline_module, "ANCHOR_MAX", 50)
    planner = OfflinePlanner(SimpleNamespace(skb=bundle.skb))
    messages: list[Any] = [_plan([HUB, BO])]
    first = planner.invoke(messages)
    assert isinstance(first, AIMessage)
    checked = [c for c in first.tool_calls if "among" in c["args"]]
    assert [c["args"]["among"] for c in checked] == [["p202", "p203"]]
    tools = {"search_nodes": make_search_nodes(bundle, lambda: "parcels")}
    messages.append(first)
    for c in first.tool_calls:
        messages.append(tools[c["name"]].invoke({"type": "tool_call", **c}))
    second = planner.invoke(messages)
    assert isinstance(second, AIMessage)
    # Bo's parcels are not routed via the hub: the hub is expanded without the list, and no semantic net
    assert [(c["name"], c["args"].get("among")) for c in second.tool_calls] == [("search_nodes", None)]
    assert second.tool_calls[0]["args"]["keys"] == ["st-hub"]


def test_a_name_many_nodes_share_is_one_mention_for_the_entity_cap(bundle: IndexBundle) -> None:
    linked = EntityLinker(bundle).link("Which parcel is routed via Harbour Station and sent by Ada Quill?", 20)
    by_label: dict[str, list[str]] = {}
    for ent in linked:
        by_label.setdefault(ent.label, []).append(ent.key)
    assert by_label["Sender"] == ["s-ada"]  # the second name is linked, not crowded out by the first's homonyms
    assert len(by_label["Station"]) == 20  # one mention's entities are capped as well
    assert len(EntityLinker(bundle).link("Which parcel is routed via Harbour Station and sent by Ada Quill?", 1)) == 1


@pytest.mark.parametrize(
    ("key", "rel", "direction", "label"),
    [("st-hub", "ROUTED_VIA", "in", "Parcel"), ("p000", "ROUTED_VIA", "out", None),
     ("p000", "ROUTED_VIA", "both", "Station"), ("s-ada", "SENT_BY", "both", None),
     ("s-ada", "NO_SUCH_REL", "in", None), ("no-such-key", "SENT_BY", "in", None)],
)
def test_neighbor_ids_agree_between_the_skb_in_memory_and_the_compact_one(
    bundle: IndexBundle, key: str, rel: str, direction: Any, label: str | None
) -> None:
    memory = depot_skb()
    expected = sorted(memory.neighbor_keys(key, rel, direction, label))
    for skb in (memory, bundle.skb):
        keys = skb.node_keys()
        assert sorted(keys[i] for i in skb.neighbor_ids(key, rel, direction, label)) == expected


def test_membership_checks_are_named_in_the_tool_description(bundle: IndexBundle) -> None:
    assert "among" in make_search_nodes(bundle).description
