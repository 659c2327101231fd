"""The in-process aggregate (``graphs.store.skb_aggregate``) returns the rows a real FalkorDB returns for the
same graph: neighbours, edge counts, seeds, relation types, order and cut. The graph is neutral (labels and
relations of no dataset) and holds what differs between stores: parallel edges, a self-loop, edges between
two expanded keys, several relations and labels, and keys whose order depends on case and code points."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain_core.messages import ToolMessage

import tools.search_nodes as search_nodes_module
from graphs.bundle import IndexBundle
from graphs.skb.compact import CompactSKB
from graphs.store.aggregate import NeighborAggregate
from graphs.store.skb_aggregate import skb_aggregate
from tools.results import Neighborhood
from tools.search_nodes import make_search_nodes

pytestmark = pytest.mark.integration

Direction = Literal["out", "in", "both"]


@pytest.fixture(scope="module")
def bundle(orchard: IndexBundle) -> IndexBundle:
    """The shared orchard index (``tests/conftest.py``)."""
    return orchard


CASES: list[tuple[str, list[str], list[str] | None, Direction, str | None, int, list[str] | None]] = [
    ("Tree", ["oak"], None, "both", None, 100, None),
    ("Tree", ["oak"], ["SHADES"], "both", None, 100, None),  # self-loop once, both directions
    ("Tree", ["oak"], ["SHADES"], "out", None, 100, None),
    ("Tree", ["oak"], ["SHADES"], "in", None, 100, None),
    ("Tree", ["oak", "Oak-2"], ["SHADES"], "both", None, 100, None),  # an edge between two expanded keys
    ("Tree", ["oak", "Oak-2", "élm"], None, "both", None, 100, None),
    ("Tree", ["oak", "Oak-2", "élm"], None, "in", "Bird", 100, None),
    ("Tree", ["oak", "Oak-2", "élm"], None, "in", "Bird", 3, None),  # the cut falls inside a tie
    ("Tree", ["oak", "ash", "Ash"], ["NESTS_IN", "VISITS"], "in", None, 7, None),
    ("Tree", ["oak", "b1", "b2"], ["NESTS_IN", "HANGS_FROM"], "in", None, 100, None),
    ("Tree", ["oak", "Oak-2"], None, "both", None, 100, ["w00", "w03", "Oak-2", "Zeta", "no-such-key"]),
    ("Tree", ["oak"], None, "both", "Nest", 100, None),
    ("Bird", ["w00", "w01", "zeta", "ñu"], None, "out", None, 100, None),
    ("Bird", ["w01"], None, "both", None, 100, None),
    ("Bird", ["w01", "oak"], None, "both", None, 100, None),  # a key of another label is not a seed
    ("Tree", ["oak"], ["BUILT_BY"], "both", None, 100, None),  # no edge of that relation
    ("Nest", ["n1"], ["BUILT_BY", "HANGS_FROM"], "out", "Tree", 100, None),
]


def normalised(rows: list[NeighborAggregate]) -> list[tuple[str, list[str], list[str], int]]:
    """Rows without the store's collection order inside a row (seeds and relation types are lists the
    server collects in its own order; the tool sorts them)."""
    return [(r.key, sorted(r.seeds), sorted(r.rels), r.paths) for r in rows]


@pytest.mark.parametrize(("label", "keys", "rels", "direction", "target", "limit", "among"), CASES)
def test_rows_equal_the_stores(
    bundle: IndexBundle,
    label: str,
    keys: list[str],
    rels: list[str] | None,
    direction: Direction,
    target: str | None,
    limit: int,
    among: list[str] | None,
) -> None:
    skb = bundle.skb
    assert isinstance(skb, CompactSKB)
    expected = bundle.store.aggregate_neighbors(
        label, keys, rel_types=rels, direction=direction, target_label=target, limit=limit, among=among
    )
    found = skb_aggregate(
        skb, label, keys, rel_types=rels, direction=direction, target_label=target, limit=limit, among=among
    )
    assert normalised(found) == normalised(expected)
    assert all(r.weight is None for r in found)


def test_unknown_names_select_nothing(bundle: IndexBundle) -> None:
    skb = bundle.skb
    assert isinstance(skb, CompactSKB)
    assert skb_aggregate(skb, "NoSuchLabel", ["oak"]) == []
    assert skb_aggregate(skb, "Tree", ["oak"], target_label="NoSuchLabel") == []
    assert skb_aggregate(skb, "Tree", ["oak"], rel_types=["NO_SUCH_REL"]) == []
    assert skb_aggregate(skb, "Tree", ["no-such-key"]) == []
    assert skb_aggregate(skb, "Tree", ["oak"], limit=0) == []


def call(bundle: IndexBundle, args: dict[str, Any]) -> tuple[Neighborhood, str]:
    tool = make_search_nodes(bundle, lambda: "birds that nest in the old oak")
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage) and isinstance(message.artifact, Neighborhood)
    return message.artifact, str(message.content)


@pytest.mark.parametrize(
    "args",
    [
        {"keys": ["oak", "Oak-2", "élm"], "limit": 5},
        {"keys": ["oak"], "rel_types": ["SHADES"], "direction": "both"},
        {"keys": ["w00", "w01", "ñu"], "direction": "out", "rank": False},
        {"keys": ["oak", "ash"], "among": ["w00", "w03", "Zeta"]},
    ],
)
def test_search_nodes_reads_the_skb_with_the_stores_result(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]
) -> None:
    """The tool's result (artifact and model text) is the same whether the rows come from the SKB or from
    the store, and the embedded store is not asked."""
    calls: list[str] = []
    store = bundle.store
    original = store.aggregate_neighbors

    def counted(*a: Any, **k: Any) -> list[NeighborAggregate]:
        calls.append("store")
        return original(*a, **k)

    monkeypatch.setattr(store, "aggregate_neighbors", counted)
    local, local_text = call(bundle, args)
    assert calls == []
    monkeypatch.setattr(search_nodes_module, "skb_aggregate", lambda *a, **k: original(*a[1:], **k))
    remote, remote_text = call(bundle, args)
    assert local.model_dump() == remote.model_dump()
    assert local_text == remote_text
