"""Generic JSONL format: round trips (plain and gzip), accepted shapes, and errors naming file + line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from graphs.errors import LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.hpo import load_hpo
from graphs.loaders.jsonl import load_jsonl, write_jsonl
from graphs.skb.model import SKB, Edge, NeighborText, Node, NodeType
from tests.paths import FIXTURES

MINI = FIXTURES / "hpo_mini"


def _cases(rows: list[tuple[Any, ...]]) -> list[Any]:
    """Table rows as pytest params named by their first column."""
    return [pytest.param(*row, id=row[0]) for row in rows]


def _sample() -> SKB:
    skb = SKB(
        "sample",
        [
            NodeType(label="Paper", description="a paper", text_fields=["name", "abstract"]),
            NodeType(
                label="Author",
                neighbor_text=[NeighborText(rel="WROTE", direction="out", title="papers", max_items=3)],
            ),
        ],
    )
    skb.add_node(Node("p1", "Paper", {"name": "Graphs", "abstract": "ünïcode ✓", "year": 2020, "score": 0.5}))
    skb.add_node(Node("p2", "Paper", {"name": "Trees", "tags": ["a", "b"], "nested": {"x": [1, 2]}, "ok": True}))
    skb.add_node(Node("a1", "Author", {"name": "Ada"}))
    skb.add_edge(Edge("a1", "WROTE", "p2", {"pos": 1}))
    skb.add_edge(Edge("a1", "WROTE", "p1"))
    skb.add_edge(Edge("p2", "CITES", "p1", {"w": 0.25, "note": None}))
    skb.add_edge(Edge("p2", "CITES", "p1"))  # parallel edge survives
    return skb


def _same(a: SKB, b: SKB) -> None:
    assert a.name == b.name
    assert a.node_types == b.node_types
    assert list(a.nodes) == list(b.nodes)
    for key, node in a.nodes.items():
        assert (node.label, node.props) == (b.nodes[key].label, b.nodes[key].props)
    assert [(e.src, e.rel, e.dst, e.props) for e in a.edges] == [(e.src, e.rel, e.dst, e.props) for e in b.edges]


@pytest.mark.parametrize("packed", [True, False])
def test_round_trip(tmp_path: Path, packed: bool) -> None:
    skb = _sample()
    write_jsonl(skb, tmp_path / "out", gzip=packed)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    suffix = ".gz" if packed else ""
    assert names == [f"edges.jsonl{suffix}", f"nodes.jsonl{suffix}", "schema.json"]
    back = load_jsonl(tmp_path / "out")
    _same(skb, back)
    assert back.node_text("a1") == skb.node_text("a1")


def test_round_trip_hpo_mini(tmp_path: Path) -> None:
    skb = load_hpo(MINI)
    write_jsonl(skb, tmp_path)
    _same(skb, load_jsonl(tmp_path))
    assert load_dataset("jsonl", tmp_path).stats() == skb.stats()


def test_rewrite_is_deterministic_and_replaces_other_variant(tmp_path: Path) -> None:
    skb = _sample()
    write_jsonl(skb, tmp_path, gzip=False)
    write_jsonl(skb, tmp_path, gzip=True)  # plain files must go, or loading would be ambiguous
    first = (tmp_path / "edges.jsonl.gz").read_bytes()
    assert not (tmp_path / "edges.jsonl").exists() and not (tmp_path / "nodes.jsonl").exists()
    write_jsonl(skb, tmp_path)
    assert (tmp_path / "edges.jsonl.gz").read_bytes() == first  # gzip mtime=0: stable checksums
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_write_rejects_unserialisable(tmp_path: Path) -> None:
    skb = SKB("bad")
    skb.add_node(Node("x", "T", {"when": object()}))
    with pytest.raises(LoaderError, match="not JSON-serialisable"):
        write_jsonl(skb, tmp_path)
    assert not (tmp_path / "nodes.jsonl.gz").exists()


def _lines(*objs: object) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def test_flat_form_int_keys_blank_lines_and_schema(tmp_path: Path) -> None:
    (tmp_path / "nodes.jsonl").write_text(
        _lines(
            {"key": 1, "label": "Paper", "title": "A", "year": 1999},
            "",
            {"key": "2", "label": "Paper", "props": {"title": "B"}},
            {"key": "3", "label": "Venue", "name": "X", "props": {"name": "Y", "city": "Z"}},
        )
    )
    (tmp_path / "edges.jsonl").write_text(_lines({"src": 1, "rel": "CITES", "dst": "2"}, "   "))
    (tmp_path / "schema.json").write_text(
        json.dumps({"name": "papers", "node_types": [{"label": "Paper", "name_field": "title"}]})
    )
    skb = load_jsonl(tmp_path)
    assert skb.name == "papers"
    assert skb.nodes["1"].props == {"title": "A", "year": 1999}
    assert skb.nodes["2"].props == {"title": "B"}
    assert skb.nodes["3"].props == {"name": "Y", "city": "Z"}  # explicit props win
    assert skb.node_types["Paper"].name_field == "title"
    assert [(e.src, e.rel, e.dst, e.props) for e in skb.edges] == [("1", "CITES", "2", {})]


def test_no_edges_file_and_default_name(tmp_path: Path) -> None:
    d = tmp_path / "mykb"
    d.mkdir()
    with gzip.open(d / "nodes.jsonl.gz", "wt") as fh:
        fh.write(_lines({"key": "a", "label": "T"}))
    skb = load_jsonl(d)
    assert (skb.name, list(skb.nodes), skb.edges) == ("mykb", ["a"], [])


N_OK = {"key": "a", "label": "T"}
E_OK = {"src": "a", "rel": "R", "dst": "a"}


@pytest.mark.parametrize(
    ("case", "nodes", "edges", "file", "needles"),
    _cases(
        [
            ("bad json", _lines(N_OK, '{"key": "b", "label": '), "", "nodes.jsonl", ["line 2", "invalid JSON"]),
            ("not an object", _lines(N_OK, "[1, 2]"), "", "nodes.jsonl", ["line 2", "expected a JSON object"]),
            ("missing key", _lines(N_OK, {"label": "T"}), "", "nodes.jsonl", ["line 2", "missing 'key'"]),
            ("empty key", _lines(N_OK, {"key": "", "label": "T"}), "", "nodes.jsonl", ["line 2", "'key'"]),
            ("float key", _lines(N_OK, {"key": 1.5, "label": "T"}), "", "nodes.jsonl", ["line 2", "1.5"]),
            ("missing label", _lines(N_OK, {"key": "b"}), "", "nodes.jsonl", ["line 2", "node 'b' has no 'label'"]),
            ("bad props", _lines(N_OK, {"key": "b", "label": "T", "props": [1]}), "", "nodes.jsonl", ["line 2"]),
            (
                "duplicate key",
                _lines(N_OK, {"key": "b", "label": "T"}, "", {"key": "a", "label": "U"}),
                "",
                "nodes.jsonl",
                ["line 4", "duplicate node key 'a'"],
            ),
            ("edge bad json", _lines(N_OK), _lines(E_OK, "{oops"), "edges.jsonl", ["line 2", "invalid JSON"]),
            (
                "dangling edge",
                _lines(N_OK),
                _lines(E_OK, "", {"src": "a", "rel": "R", "dst": "zz"}),
                "edges.jsonl",
                ["line 3", "unknown node 'zz'", "add node 'zz' to nodes.jsonl"],
            ),
            ("edge missing rel", _lines(N_OK), _lines({"src": "a", "dst": "a"}), "edges.jsonl", ["line 1", "no 'rel'"]),
            ("edge missing src", _lines(N_OK), _lines({"rel": "R", "dst": "a"}), "edges.jsonl", ["line 1", "'src'"]),
            (
                "edge bad props",
                _lines(N_OK),
                _lines(E_OK, {**E_OK, "props": "x"}),
                "edges.jsonl",
                ["line 2", "'props' must be an object"],
            ),
        ]
    ),
)
@pytest.mark.parametrize("packed", [False, True])
def test_bad_records(
    tmp_path: Path, case: str, nodes: str, edges: str, file: str, needles: list[str], packed: bool
) -> None:
    for name, text in (("nodes.jsonl", nodes), ("edges.jsonl", edges)):
        if packed:
            (tmp_path / f"{name}.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (tmp_path / name).write_text(text)
    with pytest.raises(LoaderError) as info:
        load_jsonl(tmp_path)
    message = str(info.value)
    assert (file + (".gz" if packed else "")) in message, case
    assert "fix:" in message, case
    for needle in needles:
        assert needle in message, (case, message)


@pytest.mark.parametrize(
    ("case", "schema", "needle"),
    _cases(
        [
            ("bad json", "{", "invalid JSON"),
            ("not object", "[]", "expected a JSON object"),
            ("types not list", '{"node_types": {}}', "'node_types' must be a list"),
            ("type without label", '{"node_types": [{"label": "A"}, {"description": "x"}]}', "node_types[1]"),
            (
                "bad max_items",
                '{"node_types": [{"label": "A", "neighbor_text": [{"rel": "R", "title": "t", "max_items": 0}]}]}',
                "node_types[0]",
            ),
        ]
    ),
)
def test_bad_schema(tmp_path: Path, case: str, schema: str, needle: str) -> None:
    (tmp_path / "nodes.jsonl").write_text(_lines(N_OK))
    (tmp_path / "schema.json").write_text(schema)
    with pytest.raises(LoaderError) as info:
        load_jsonl(tmp_path)
    assert "schema.json" in str(info.value) and needle in str(info.value), (case, str(info.value))


def test_missing_and_ambiguous_files(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="directory not found"):
        load_jsonl(tmp_path / "nope")
    with pytest.raises(LoaderError, match=r"nodes.jsonl: file not found -- fix: write nodes.jsonl"):
        load_jsonl(tmp_path)
    (tmp_path / "nodes.jsonl").write_text(_lines(N_OK))
    (tmp_path / "nodes.jsonl.gz").write_bytes(gzip.compress(_lines(N_OK).encode()))
    with pytest.raises(LoaderError, match="both nodes.jsonl and nodes.jsonl.gz exist"):
        load_jsonl(tmp_path)
    (tmp_path / "nodes.jsonl").unlink()
    (tmp_path / "nodes.jsonl.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(LoaderError, match=r"nodes.jsonl.gz: cannot read"):
        load_jsonl(tmp_path)


def test_load_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="unknown dataset 'neo'"):
        load_dataset("neo", tmp_path)  # type: ignore[arg-type]
    for name in ("jsonl", "stark"):
        with pytest.raises(LoaderError, match=f"dataset '{name}' needs a path"):
            load_dataset(name, None)  # type: ignore[arg-type]


def test_works_without_orjson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    import graphs.loaders.jsonl as module

    monkeypatch.setitem(sys.modules, "orjson", None)  # makes `import orjson` raise ImportError
    fallback = importlib.reload(module)
    try:
        assert fallback._orjson is None
        skb = _sample()
        fallback.write_jsonl(skb, tmp_path)
        _same(skb, fallback.load_jsonl(tmp_path))
        (tmp_path / "edges.jsonl.gz").write_bytes(gzip.compress(b'{"src": "a1", "rel": "R", "dst": "p1"}\n{bad\n'))
        with pytest.raises(LoaderError, match=r"edges.jsonl.gz \(record line 2\): invalid JSON"):
            fallback.load_jsonl(tmp_path)
    finally:
        monkeypatch.undo()
        importlib.reload(module)


def _edges_text(n: int) -> tuple[bytes, bytes]:
    nodes = b"".join(json.dumps({"key": f"k{i}", "label": "Item", "props": {"name": f"item {i}"}}).encode() + b"\n"
                     for i in range(n))
    edges = b"".join(json.dumps({"src": f"k{i}", "rel": "NEXT" if i % 3 else "ALSO", "dst": f"k{(i * 7) % n}"}).encode()
                     + b"\n" for i in range(n))
    return nodes, edges


def test_files_are_parsed_in_chunks_with_the_same_result_and_shared_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs.loaders import jsonl

    nodes, edges = _edges_text(500)
    (tmp_path / "nodes.jsonl.gz").write_bytes(gzip.compress(nodes))
    (tmp_path / "edges.jsonl").write_bytes(edges)
    whole = load_jsonl(tmp_path)
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 200)  # a few lines per chunk: many chunk boundaries
    chunked = load_jsonl(tmp_path)
    assert [(e.src, e.rel, e.dst, e.props) for e in chunked.edges] == [(e.src, e.rel, e.dst, e.props) for e in whole.edges]
    assert [(n.key, n.label, n.props) for n in chunked.nodes.values()] == [
        (n.key, n.label, n.props) for n in whole.nodes.values()]
    # endpoints are the node's own key string and each relation one string: no per-edge copies
    assert all(e.src is chunked.nodes[e.src].key and e.dst is chunked.nodes[e.dst].key for e in chunked.edges)
    assert len({id(e.rel) for e in chunked.edges}) == 2


def test_errors_name_the_file_line_in_any_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.loaders import jsonl

    nodes, edges = _edges_text(300)
    lines = edges.split(b"\n")
    lines[249] = b'{"src": "k1", "rel": "NEXT", "dst": "nowhere"}'
    lines.insert(100, b"")  # a blank line before it: line numbers still count it
    (tmp_path / "nodes.jsonl").write_bytes(nodes)
    (tmp_path / "edges.jsonl").write_bytes(b"\n".join(lines))
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 300)
    with pytest.raises(LoaderError, match=r"line 251.*unknown node 'nowhere'|unknown node 'nowhere'.*line 251"):
        load_jsonl(tmp_path)
    lines[250] = b'{"src": "k1", "rel": "NEXT", "dst": '  # the same line, truncated JSON
    (tmp_path / "edges.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(LoaderError, match="line 251") as info:
        load_jsonl(tmp_path)
    assert "invalid JSON" in str(info.value)


def test_streamed_write_is_the_gzip_of_the_whole_text(tmp_path: Path) -> None:
    from graphs.loaders import jsonl

    nodes, edges = _edges_text(200_000 // 50)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "nodes.jsonl").write_bytes(nodes)
    (tmp_path / "in" / "edges.jsonl").write_bytes(edges)
    skb = load_jsonl(tmp_path / "in")
    write_jsonl(skb, tmp_path / "a")
    write_jsonl(skb, tmp_path / "b")
    packed = (tmp_path / "a" / "edges.jsonl.gz").read_bytes()
    assert packed == (tmp_path / "b" / "edges.jsonl.gz").read_bytes()  # deterministic (mtime 0)
    assert gzip.decompress(packed) == edges.replace(b'", "', b'","').replace(b'": "', b'":"')
    write_jsonl(skb, tmp_path / "plain", gzip=False)
    assert (tmp_path / "plain" / "edges.jsonl").read_bytes() == gzip.decompress(packed)
    assert jsonl.GZIP_LEVEL == 1
