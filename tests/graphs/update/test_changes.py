"""Change sets checked whole against a graph: every refusal names its line, and a refused set changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from graphs.errors import LoaderError
from graphs.skb.model import SKB
from graphs.update import apply_changes, parse_changes
from tests.small_graphs import catalog_skb


def changes(*lines: dict[str, Any] | str) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode() + b"\n"


def snapshot(skb: SKB) -> tuple[list[tuple[str, str, dict[str, Any]]], list[tuple[str, str, str, dict[str, Any]]]]:
    return ([(n.key, n.label, dict(n.props)) for n in skb.nodes.values()],
            [(e.src, e.rel, e.dst, dict(e.props)) for e in skb.edges])


def test_node_and_edge_changes_apply_in_order_and_a_deleted_node_takes_its_edges() -> None:
    skb = catalog_skb()
    before = snapshot(skb)
    out, report = apply_changes(skb, parse_changes(changes(
        {"op": "delete", "node": {"key": "C_KETTLE"}},
        {"op": "upsert", "node": {"key": "C_IRON", "label": "Category", "props": {"name": "steam iron"}}},
        {"op": "upsert", "edge": {"src": "C_IRON", "rel": "SUBCLASS_OF", "dst": "C_APPL"}},
        {"op": "upsert", "node": {"key": "P_OFFICE", "label": "Product", "props": {"name": "home office"}}},
        {"op": "delete", "edge": {"src": "P_CLEAN", "rel": "IN_CATEGORY", "dst": "C_FAN"}},
    )))
    assert snapshot(skb) == before  # the input graph is left as it was
    assert "C_KETTLE" not in out.nodes and all("C_KETTLE" not in (e.src, e.dst) for e in out.edges)
    assert out.nodes["C_IRON"].props == {"name": "steam iron"} and out.nodes["P_OFFICE"].name == "home office"
    assert ("C_IRON", "SUBCLASS_OF", "C_APPL") in {(e.src, e.rel, e.dst) for e in out.edges}
    assert ("P_CLEAN", "IN_CATEGORY", "C_FAN") not in {(e.src, e.rel, e.dst) for e in out.edges}
    # C_KETTLE had a parent and two products: three edges went with it
    assert report.applied == {"node deleted": 1, "edge deleted with its node": 3, "node added": 1,
                              "edge added": 1, "node replaced": 1, "edge deleted": 1}
    assert report.deleted_nodes == {"C_KETTLE"}
    assert {"C_IRON", "P_OFFICE", "C_APPL", "P_BREAKFAST", "P_KITCHEN", "P_CLEAN", "C_FAN"} <= report.changed_nodes
    # an existing node keeps its place, a new one comes last (a rebuild of the same data has the same order)
    assert list(out.nodes)[-1] == "C_IRON" and list(out.nodes).index("P_OFFICE") == list(skb.nodes).index("P_OFFICE") - 1


def test_an_upsert_equal_to_the_graph_is_skipped_so_a_set_applied_twice_equals_once() -> None:
    data = changes(
        {"op": "upsert", "node": {"key": "C_IRON", "label": "Category", "props": {"name": "steam iron"}}},
        {"op": "upsert", "edge": {"src": "C_IRON", "rel": "SUBCLASS_OF", "dst": "C_APPL", "props": {"w": 1}}},
    )
    once, first = apply_changes(catalog_skb(), parse_changes(data))
    twice, second = apply_changes(once, parse_changes(data))
    assert snapshot(twice) == snapshot(once) and first.total_applied == 2
    assert second.total_applied == 0 and second.skipped == {"node unchanged": 1, "edge unchanged": 1}


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ('{"op": "upsert", "node": {"key": "X"', "line 2"),
        ({"op": "rename", "node": {"key": "C_FAN"}}, "op"),
        ({"op": "upsert", "node": {"key": "X", "props": {}}}, "needs its 'label'"),
        ({"op": "delete", "node": {"key": "C_FAN"}, "edge": {"src": "a", "rel": "R", "dst": "b"}}, "exactly one"),
        ({"op": "upsert", "node": {"key": "X", "label": "Category", "colour": "red"}}, "colour"),
    ],
)
def test_a_malformed_line_is_refused_by_its_number(line: dict[str, Any] | str, named: str) -> None:
    with pytest.raises(LoaderError) as info:
        parse_changes(changes({"op": "delete", "node": {"key": "C_FAN"}}, line), source="changes.jsonl")
    assert "changes.jsonl" in str(info.value) and "line 2" in str(info.value) and named in str(info.value)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ({"op": "upsert", "edge": {"src": "P_CLEAN", "rel": "IN_CATEGORY", "dst": "C_NOPE"}}, "missing node 'C_NOPE'"),
        ({"op": "delete", "node": {"key": "C_NOPE"}}, "unknown node 'C_NOPE'"),
        ({"op": "delete", "edge": {"src": "P_CLEAN", "rel": "IN_CATEGORY", "dst": "C_LAMP"}}, "unknown edge"),
        ({"op": "upsert", "node": {"key": "S1", "label": "Shop", "props": {"name": "s"}}}, "label 'Shop'"),
        ({"op": "upsert", "edge": {"src": "P_CLEAN", "rel": "SOLD_BY", "dst": "C_FAN"}}, "relation 'SOLD_BY'"),
        ({"op": "upsert", "edge": {"src": "C_KETTLE", "rel": "SUBCLASS_OF", "dst": "C_ROOT"}}, "missing node 'C_KETTLE'"),
    ],
)
def test_a_change_that_cannot_apply_refuses_the_whole_set(line: dict[str, Any], named: str) -> None:
    skb = catalog_skb()
    before = snapshot(skb)
    data = changes({"op": "delete", "node": {"key": "C_KETTLE"}},
                   {"op": "upsert", "node": {"key": "C_IRON", "label": "Category", "props": {"name": "iron"}}}, line)
    with pytest.raises(LoaderError) as info:
        apply_changes(skb, parse_changes(data, source="changes.jsonl"))
    assert "line 3" in str(info.value) and named in str(info.value) and "nothing was changed" in str(info.value)
    assert snapshot(skb) == before


def test_an_empty_change_set_is_refused() -> None:
    with pytest.raises(LoaderError, match="no change"):
        parse_changes(b"\n\n")


@pytest.mark.parametrize("seed", range(6))
def test_every_node_whose_text_changes_is_named_stale(seed: int) -> None:
    """The update reuses the parent's vectors and BM25 terms of every node outside ``stale_texts``: whatever a
    change set does, a node whose text differs from the parent's must be in it."""
    import random

    from graphs.skb.model import NeighborText
    from graphs.update.changes import stale_texts

    skb = catalog_skb()
    rels = sorted({e.rel for e in skb.edges})
    for ntype in skb.node_types.values():  # every text names its neighbours, both ways, by every relation
        ntype.neighbor_text = [NeighborText(rel=rel, direction=way, title=f"{rel} {way}", max_items=3)  # type: ignore[arg-type]
                               for rel in rels for way in ("out", "in")]
    rng = random.Random(seed)
    keys = sorted(skb.nodes)
    lines: list[dict[str, Any]] = []
    for key in rng.sample(keys, 3):  # renamed: the texts of its neighbours name it
        node = skb.nodes[key]
        lines.append({"op": "upsert", "node": {"key": key, "label": node.label,
                                               "props": {**node.props, "name": f"renamed {key}"}}})
    gone = rng.choice([k for k in keys if k not in {line["node"]["key"] for line in lines}])
    lines.append({"op": "delete", "node": {"key": gone}})
    edge = rng.choice([e for e in skb.edges if gone not in (e.src, e.dst)])
    lines.append({"op": "delete", "edge": {"src": edge.src, "rel": edge.rel, "dst": edge.dst}})
    model = rng.choice([n for n in skb.nodes.values() if n.key != gone])
    lines.append({"op": "upsert", "node": {"key": "NEW", "label": model.label, "props": {"name": "new one"}}})
    other = rng.choice([e for e in skb.edges if gone not in (e.src, e.dst)])
    lines.append({"op": "upsert", "edge": {"src": other.src, "rel": other.rel, "dst": "NEW" if
                                           skb.nodes[other.dst].label == model.label else other.dst}})
    changed, report = apply_changes(skb, parse_changes("\n".join(json.dumps(x) for x in lines).encode()))
    stale = stale_texts(changed, report)
    differ = {key for key in changed.nodes if key not in skb.nodes or changed.node_text(key) != skb.node_text(key)}
    assert differ and differ <= stale
    assert len(stale) < len(changed.nodes)  # and not simply every node
