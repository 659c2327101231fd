"""Edges read without properties share one read-only empty map; everything else keeps its own."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from graphs.loaders.jsonl import load_jsonl
from graphs.skb.compact import COMPACT_DIR, open_compact, write_compact
from graphs.skb.model import NO_PROPS, Edge


def _graph(tmp_path: Path) -> Path:
    nodes = [{"key": f"k{i}", "label": "Item", "props": {"name": f"item {i}"}} for i in range(4)]
    edges = [
        {"src": "k0", "rel": "LINKS", "dst": "k1"},
        {"src": "k1", "rel": "LINKS", "dst": "k2", "props": {}},
        {"src": "k2", "rel": "LINKS", "dst": "k3", "props": {"weight": 2}},
        {"src": "k3", "rel": "LINKS", "dst": "k0", "props": None},
    ]
    (tmp_path / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in nodes), encoding="utf-8")
    (tmp_path / "edges.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges), encoding="utf-8")
    return tmp_path


def test_edges_without_props_share_one_read_only_map(tmp_path: Path) -> None:
    skb = load_jsonl(_graph(tmp_path))
    by_dst = {e.dst: e for e in skb.edges}
    assert by_dst["k1"].props is NO_PROPS and by_dst["k2"].props is NO_PROPS and by_dst["k0"].props is NO_PROPS
    assert by_dst["k3"].props == {"weight": 2} and by_dst["k3"].props is not NO_PROPS
    with pytest.raises(TypeError, match="assign a new dict"):
        by_dst["k1"].props["weight"] = 1
    with pytest.raises(TypeError, match="assign a new dict"):
        by_dst["k1"].props.update(weight=1)
    assert by_dst["k2"].props == {} and not NO_PROPS
    by_dst["k1"].props = {"weight": 1}  # the way to give one edge properties
    assert by_dst["k2"].props == {}
    assert Edge("k0", "LINKS", "k1").props is not NO_PROPS  # edges made in code keep their own dict


def test_shared_map_survives_pickling_and_files(tmp_path: Path) -> None:
    skb = load_jsonl(_graph(tmp_path))
    again = pickle.loads(pickle.dumps(skb.edges))
    assert again[0].props is NO_PROPS and json.dumps(again[0].props) == "{}"
    write_compact(skb, tmp_path / "skb" / COMPACT_DIR)
    compact = open_compact(tmp_path / "skb")
    assert sorted((e.src, e.dst, dict(e.props)) for e in compact.edges) == sorted(
        (e.src, e.dst, dict(e.props)) for e in skb.edges)
