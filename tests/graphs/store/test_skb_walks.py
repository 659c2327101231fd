"""Relation-path walks read from the in-process SKB (``graphs.store.skb_walks``) return the rows a real FalkorDB
returns for the same walk query: end keys, walk counts, order and cut. The graph is neutral (trees, birds,
nests) and holds what a walk count depends on: parallel edges, a self-loop, edges both ways between two nodes,
walks that come back to the start or use an edge twice, keys whose order depends on case and code points."""

from __future__ import annotations

import itertools
import random
from typing import Any, Literal

import pytest
from langchain_core.messages import ToolMessage

import tools.cypher as cypher_module
from graphs.bundle import IndexBundle
from graphs.skb.compact import CompactSKB
from graphs.store.aggregate import path_walk_query
from graphs.store.skb_walks import parse_walk, skb_walk
from tools.cypher import make_cypher, walked_here

pytestmark = pytest.mark.integration

Hop = tuple[str, Literal["out", "in"]]
RELS = ["NESTS_IN", "VISITS", "SHADES", "BUILT_BY", "HANGS_FROM"]
ONE_HOP: list[Hop] = [(r, d) for r in RELS for d in ("out", "in")]  # type: ignore[misc]
STARTS = [("Tree", "oak"), ("Tree", "Oak-2"), ("Tree", "élm"), ("Bird", "w00"), ("Bird", "ñu"), ("Nest", "n1")]


@pytest.fixture(scope="module")
def bundle(orchard: IndexBundle) -> IndexBundle:
    """The shared orchard index (``tests/conftest.py``)."""
    return orchard


def _paths() -> list[list[Hop]]:
    short = [[h] for h in ONE_HOP] + [list(p) for p in itertools.product(ONE_HOP, repeat=2)]
    rng = random.Random(7)
    longer = [[rng.choice(ONE_HOP) for _ in range(3)] for _ in range(60)]
    longer += [[("NESTS_IN", "out"), ("NESTS_IN", "in"), ("NESTS_IN", "out")],  # there and back, and again
               [("SHADES", "out"), ("SHADES", "in"), ("SHADES", "out")]]  # through the self-loop
    return short + longer


def test_walk_rows_equal_the_stores(bundle: IndexBundle) -> None:
    skb = bundle.skb
    assert isinstance(skb, CompactSKB)
    compared = nonempty = 0
    for (label, key), path, limit in itertools.product(STARTS, _paths(), (20, 3)):
        query = path_walk_query(label, path, limit)
        expected = bundle.store.query(query, {"key": key}, max_rows=100)
        assert skb_walk(skb, label, key, path, limit) == expected.rows, (key, path, limit)
        compared += 1
        nonempty += bool(expected.rows)
    assert compared > 1000 and nonempty > 100  # the walks reach things: the comparison is not vacuous


def test_names_the_skb_does_not_hold_select_nothing(bundle: IndexBundle) -> None:
    skb = bundle.skb
    assert isinstance(skb, CompactSKB)
    assert skb_walk(skb, "Tree", "no-such-key", [("SHADES", "out")], 20) == []
    assert skb_walk(skb, "Bird", "oak", [("SHADES", "out")], 20) == []  # a key of another label
    assert skb_walk(skb, "NoSuchLabel", "oak", [("SHADES", "out")], 20) == []
    assert skb_walk(skb, "Tree", "oak", [("NO_SUCH_REL", "out")], 20) == []
    assert skb_walk(skb, "Tree", "oak", [("SHADES", "out")], 0) == []
    assert skb_walk(skb, "Tree", "oak", [("NESTS_IN", "in"), ("VISITS", "out")], 20, max_edges=3) is None


def test_only_the_walk_text_is_read_as_a_walk() -> None:
    hops: list[Hop] = [("NESTS_IN", "in"), ("we`ird", "out")]
    query = path_walk_query("Tree", hops, 7)
    walk = parse_walk(query)
    assert walk is not None and (walk.start_label, walk.hops, walk.limit) == ("Tree", hops, 7)
    assert parse_walk(query.replace("count(*)", "count(DISTINCT n2)")) is None
    assert parse_walk(query.replace("n1 <> s AND ", "")) is None
    assert parse_walk(query.replace("ORDER BY walks DESC", "ORDER BY walks")) is None
    assert parse_walk(query + " ") is None
    assert parse_walk(query.replace("-(n1)", "-(n1:Bird)")) is None
    assert parse_walk("MATCH (n) RETURN n.key AS key") is None


def _message(bundle: IndexBundle, args: dict[str, Any]) -> ToolMessage:
    tool = make_cypher(bundle)
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage)
    return message


@pytest.mark.parametrize(
    ("label", "key", "path", "limit", "max_rows"),
    [
        ("Tree", "oak", [("NESTS_IN", "in"), ("VISITS", "out")], 20, 20),
        ("Tree", "oak", [("NESTS_IN", "in"), ("VISITS", "out")], 20, 2),  # more rows than max_rows: truncated
        ("Bird", "w00", [("NESTS_IN", "out"), ("NESTS_IN", "in"), ("VISITS", "out")], 5, 20),
        ("Tree", "nowhere", [("SHADES", "out")], 20, 20),
    ],
)
def test_the_cypher_tool_answers_a_walk_the_same_either_way(
    bundle: IndexBundle, monkeypatch: pytest.MonkeyPatch, label: str, key: str, path: list[Hop], limit: int,
    max_rows: int,
) -> None:
    args = {"query": path_walk_query(label, path, limit), "params": {"key": key}, "max_rows": max_rows}
    assert walked_here(bundle, args["query"], args["params"], max_rows) is not None  # read here
    here = _message(bundle, args)
    monkeypatch.setattr(cypher_module, "READ_SKB", False)
    assert walked_here(bundle, args["query"], args["params"], max_rows) is None
    there = _message(bundle, args)
    assert (here.content, here.status) == (there.content, there.status)
    assert here.artifact.model_dump() == there.artifact.model_dump()


def test_other_queries_and_parameters_stay_on_the_store(bundle: IndexBundle) -> None:
    query = path_walk_query("Tree", [("SHADES", "out")], 20)
    assert walked_here(bundle, query, {"key": "oak", "other": 1}, 20) is None
    assert walked_here(bundle, query, {"key": 3}, 20) is None
    assert walked_here(bundle, query, {"key": "o\x00k"}, 20) is None
    assert walked_here(bundle, "MATCH (s:`Tree` {key: $key}) RETURN s.key AS key", {"key": "oak"}, 20) is None
    assert walked_here(bundle, path_walk_query("Tree", [("SHADES", "out")], 100_000), {"key": "oak"}, 20) is None
