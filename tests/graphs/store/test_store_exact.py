"""The graph store holds keys, property names and values exactly, or the build refuses them by name.

FalkorDB's key index ignores whitespace at either end of a string and reads U+0001 as a separator, its
strings end at NUL and its integers are 64 bits; a parameter map cannot carry an empty name or one with
a backtick. The store used to repair all of these quietly (``Paris`` and ``Paris `` became one node to
every lookup, 2**64 - 1 became 2**63 - 1, ``a`b`` and ``a'b`` one property), so the in-process SKB and
the store answered differently. Checked here on the embedded FalkorDB.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphs.errors import LoaderError, StoreError
from graphs.loaders.jsonl import write_jsonl
from graphs.skb.model import SKB, Edge, Node
from graphs.store import props as store_rows
from graphs.store.falkordb_store import FalkorDBStore
from graphs.store.load_check import load_mismatches, sample
from graphs.store.props import edge_rows_by_pattern, node_rows_by_label

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBStore]:
    with FalkorDBStore(tmp_path_factory.mktemp("exact") / "falkordb") as st:
        yield st


def _places(extra: dict[str, str]) -> SKB:
    """France and Texas, a city keyed ``Paris`` in France, and ``extra``: city key -> the place it is in."""
    skb = SKB("places")
    skb.add_node(Node("France", "Country", {"name": "France"}))
    skb.add_node(Node("Texas", "State", {"name": "Texas"}))
    for key, where in {"Paris": "France", **extra}.items():
        skb.nodes[key] = Node(key, "City", {"name": key})  # as a source that skips ``add_node`` would
        skb.add_edge(Edge(key, "IN", where))
    return skb


def _stored_keys(store: FalkorDBStore) -> list[str]:
    return sorted(str(r[0]) for r in store._read("MATCH (n) RETURN n.key"))


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("Paris ", "ends with whitespace"),
        (" Paris", "starts .*with whitespace"),
        ("Paris\t", "ends with whitespace"),
        ("Paris\n", "ends with whitespace"),
        ("Par\x01is", "U\\+0001"),
        ("Paris\x00", "NUL"),
    ],
    ids=["trailing-space", "leading-space", "tab", "newline", "u0001", "nul"],
)
def test_keys_the_key_index_would_merge_are_refused_by_validation_and_by_the_store_alike(
    store: FalkorDBStore, key: str, why: str
) -> None:
    skb = _places({key: "Texas"})
    with pytest.raises(LoaderError, match=why) as by_validation:
        skb.validate()
    assert repr(key) in str(by_validation.value) and "fix:" in str(by_validation.value)
    with pytest.raises(LoaderError, match=why):  # a loader adding it says so at the record
        SKB("one").add_node(Node(key, "City"))
    store.load(_places({}))
    with pytest.raises(LoaderError, match=why):
        store.load(skb)
    assert _stored_keys(store) == ["France", "Paris", "Texas"], "a refused load leaves the graph it found"


def test_keys_the_index_holds_exactly_are_kept_and_found_exactly(store: FalkorDBStore) -> None:
    held = ["Par is", "Paris\u00a0", "\u3000Paris", "Par\x02is", "Paris\x1f", "paris", "Paris\u200b"]
    skb = _places(dict.fromkeys(held, "Texas"))
    skb.validate()
    store.load(skb)
    for key in ["Paris", *held]:
        found = store._read("MATCH (n:City {key: $k}) RETURN n.key", {"k": key})
        assert [r[0] for r in found] == [key]
        assert [(t.src, t.dst) for t in store.neighbors([key], direction="out")] == [
            (key, "France" if key == "Paris" else "Texas")
        ]


def _odd_props() -> dict[str, object]:
    """19 properties a store holds exactly, names and values that are easy to get wrong."""
    return {
        "a'b": 1, "a b": 2, "x\ufffd": 3, "ns:part": 4, "名前": "名", "a\x01b": 5, " lead": 6, "trail ": 7,
        "n": 2**63 - 1, "m": -(2**63), "l": [2**63 - 1, -(2**63)], "f": 1.5, "t": True, "e": [],
        "text": "zero\u200bwidth \x01 é", "words": ["a ", " b"], "key2": "Paris ", "'": 8, '"': 9,
    }  # fmt: skip


def test_property_names_and_values_are_stored_exactly(store: FalkorDBStore) -> None:
    skb = SKB("props")
    skb.add_node(Node("x", "Thing", _odd_props()))
    skb.add_node(Node("y", "Thing", {"name": "y"}))
    skb.add_edge(Edge("x", "TO", "y", _odd_props()))
    skb.validate()
    store.load(skb)
    (node,) = store._read("MATCH (n:Thing {key: 'x'}) RETURN properties(n)")
    assert len(_odd_props()) == 19
    assert dict(node[0]) == {"key": "x", **_odd_props()}
    (edge,) = store._read("MATCH ()-[e:TO]->() RETURN properties(e)")
    assert dict(edge[0]) == _odd_props()


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"big": 2**64 - 1}, ["'big'", "18446744073709551615", "64 bits"]),
        ({"low": -(2**63) - 1}, ["'low'", "64 bits"]),
        ({"nums": [1, 2**64 - 1]}, ["'nums'", "list", "18446744073709551615"]),
        ({"a`b": 1, "a'b": 2}, ["'a`b'", "backtick"]),
        ({"x\x00": 3, "x\ufffd": 4}, ["'x\\x00'", "NUL"]),
        ({"": 5}, ["''", "empty name"]),
        ({"text": "a\x00b"}, ["'text'", "NUL"]),
        ({"words": ["a", "b\x00"]}, ["'words'", "NUL"]),
    ],
    ids=["int-over-64-bits", "int-under-64-bits", "int-in-list", "backtick-name", "nul-name", "empty-name",
         "nul-text", "nul-in-list"],
)
@pytest.mark.parametrize("on", ["node", "edge"])
def test_values_and_names_the_store_would_change_are_refused_naming_them(
    store: FalkorDBStore, props: dict[str, object], named: list[str], on: str
) -> None:
    skb = SKB("odd")
    skb.add_node(Node("x", "Thing", props if on == "node" else {"name": "x"}))
    skb.add_node(Node("y", "Thing", {"name": "y"}))
    skb.add_edge(Edge("x", "TO", "y", props if on == "edge" else {}))
    with pytest.raises(LoaderError) as refused:
        skb.validate()
    message = str(refused.value)
    assert all(part in message for part in named), message
    assert ("node 'x' (Thing)" if on == "node" else "edge 'x' -[TO]-> 'y'") in message and "fix:" in message
    store.load(_places({}))
    with pytest.raises(LoaderError) as by_store:
        store.load(skb)
    assert str(by_store.value).split(": ", 1)[1] == message.split(": ", 1)[1], "the store refuses it in the same words"
    assert _stored_keys(store) == ["France", "Paris", "Texas"]


def test_the_check_after_a_load_compares_keyed_lookups_and_edges(
    store: FalkorDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key checks switched off alone (the SKB's and the store's own): the keys the index merges load with
    the right count of nodes, and the read-back of keyed lookups and edges still refuses the graph, naming them."""
    monkeypatch.setattr(SKB, "check_storable", lambda self, source="": None)
    monkeypatch.setattr(store_rows, "store_key_problem", lambda key: None)
    skb = _places({"Paris ": "Texas"})
    with pytest.raises(StoreError, match="a lookup of City key 'Paris' finds 2 nodes") as refused:
        store.load(skb)
    assert "'Paris '" in str(refused.value) and "skb index --force" in str(refused.value)
    # a faithful load passes the same check, on a sample of a larger graph too
    big = SKB("big")
    for i in range(3000):
        big.add_node(Node(f"k{i}", f"L{i % 7}", {"name": f"n{i}", "i": i}))
        if i:
            big.add_edge(Edge(f"k{i}", "NEXT", f"k{i - 1}", {"w": i / 2}))
            big.add_edge(Edge("k0", "HUB", f"k{i}"))
    store.load(big)
    node_rows, edge_rows = node_rows_by_label(big), edge_rows_by_pattern(big)
    assert load_mismatches(store._read, node_rows, edge_rows) == []
    picked = [row["props"]["key"] for rows in sample(node_rows).values() for row in rows]
    assert 200 <= len(picked) <= 300
    key = next(k for k in picked if k != "k0")
    store._write("MATCH (n {key: $k})-[e:NEXT]->() SET e.w = -1", {"k": key})  # a stored edge changed afterwards
    assert load_mismatches(store._read, node_rows, edge_rows) == [
        f"the outgoing edges of {key!r} ({big.nodes[key].label}) were stored other than written"
    ]


def test_the_check_reads_back_more_edges_than_one_reply_of_the_store_holds(store: FalkorDBStore) -> None:
    """Every node read back with all its edges: 60 nodes of 1,900 edges each are more rows than the server's cap
    on one reply (RESULTSET_SIZE), which cut the read short and read as edges missing from a faithful load."""
    from graphs.store.falkordb_server import RESULTSET_SIZE

    wide = SKB("wide")
    for i in range(60):
        wide.add_node(Node(f"s{i}", "Source", {"name": f"source {i}"}))
    for j in range(1900):
        wide.add_node(Node(f"t{j}", "Target", {"name": f"target {j}"}))
    for i in range(60):
        for j in range(1900):
            wide.add_edge(Edge(f"s{i}", "REACHES", f"t{j}"))
    assert len(wide.edges) > RESULTSET_SIZE
    store.load(wide)
    node_rows, edge_rows = node_rows_by_label(wide), edge_rows_by_pattern(wide)
    assert load_mismatches(store._read, node_rows, edge_rows, size=len(wide.nodes)) == []


def test_skb_index_refuses_such_data_with_status_2_and_keeps_the_index(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_jsonl(_places({"Lyon": "France"}), data)
    index_dir = tmp_path / "index"
    base = [sys.executable, "-c", "from agent.cli import app; app()", "index", "--dataset", "jsonl", "--data",
            str(data), "--index-dir", str(index_dir), "--embedder", "hash:64", "--stage", "core", "--quiet"]  # fmt: skip
    assert subprocess.run(base, check=False, capture_output=True, text=True).returncode == 0
    before = (index_dir / "manifest.json").read_bytes()
    write_jsonl(_places({"Paris ": "Texas"}), data)
    refused = subprocess.run([*base, "--force"], check=False, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr
    assert "'Paris '" in refused.stderr and "whitespace" in refused.stderr and "Traceback" not in refused.stderr
    assert (index_dir / "manifest.json").read_bytes() == before
