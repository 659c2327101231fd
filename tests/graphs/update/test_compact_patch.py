"""The compact SKB's arrays and the graph files patched from the parent's equal those made from the changed graph."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from graphs.loaders.jsonl import write_jsonl
from graphs.skb.compact_write import compact_edges, compact_names, compact_nodes, write_compact
from graphs.skb.model import Edge
from graphs.update import apply_changes, parse_changes
from graphs.update.compact_patch import patch_compact_parts
from graphs.update.jsonl_patch import spliced_lines
from tests.small_graphs import catalog_skb


def test_patched_arrays_equal_the_arrays_made_afresh(tmp_path: Path) -> None:
    parent = catalog_skb()
    parent.edges = [Edge(e.src, e.rel, e.dst, {"weight": i, "note": f"é{i}"} if i % 2 else {})
                    for i, e in enumerate(parent.edges)]
    write_compact(parent, tmp_path / "compact")
    first = parent.edges[0]
    gone_rel = next(rel for rel in sorted({e.rel for e in parent.edges}) if rel != first.rel)  # the ids shift
    lines = [{"op": "delete", "edge": {"src": e.src, "rel": e.rel, "dst": e.dst}} for e in parent.edges
             if e.rel == gone_rel]
    lines += [
        {"op": "delete", "node": {"key": "C_KETTLE"}},
        {"op": "upsert", "node": {"key": "C_TOASTER", "label": "Category", "props": {"name": "toaster oven"}}},
        {"op": "upsert", "node": {"key": "C_IRON", "label": "Category", "props": {"name": "iron", "aka": ["press"]}}},
        {"op": "upsert", "edge": {"src": first.src, "rel": first.rel, "dst": first.dst, "props": {"weight": 99}}},
        {"op": "upsert", "edge": {"src": "C_IRON", "rel": first.rel, "dst": first.dst}},
    ]
    changed, report = apply_changes(parent, parse_changes("\n".join(json.dumps(x) for x in lines).encode()))
    parts = patch_compact_parts(tmp_path / "compact", parent, changed, report.node_source, report.edge_source)
    by_identity = patch_compact_parts(tmp_path / "compact", parent, changed)
    assert parts is not None and by_identity is not None
    for a, b in zip((*parts[0], *parts[1]), (*by_identity[0], *by_identity[1]), strict=True):
        assert a == b if isinstance(a, bytes) else np.array_equal(a, b)
    labels, rels = compact_names(changed)
    index = {key: i for i, key in enumerate(changed.nodes)}
    nodes = compact_nodes(list(changed.nodes.values()), len(changed.nodes), {x: i for i, x in enumerate(labels)})
    edges = compact_edges(changed.edges, len(changed.edges), index, {x: i for i, x in enumerate(rels)})
    for got, want in zip((*parts[0], *parts[1]), (*nodes, *edges), strict=True):
        if isinstance(want, bytes):
            assert got == want
        else:
            assert np.array_equal(got, want) and got.dtype == want.dtype
    assert gone_rel not in rels and rels != json.loads((tmp_path / "compact" / "meta.json").read_text())["rels"]

    write_jsonl(parent, tmp_path / "parent")
    lines = spliced_lines(tmp_path / "parent", parent, changed, report.node_source, report.edge_source)
    assert lines is not None
    write_jsonl(changed, tmp_path / "spliced", lines=lines)
    write_jsonl(changed, tmp_path / "made")
    for name in ("nodes.jsonl.gz", "edges.jsonl.gz", "schema.json"):
        assert (tmp_path / "spliced" / name).read_bytes() == (tmp_path / "made" / name).read_bytes()
    assert spliced_lines(tmp_path / "parent", parent, changed, report.node_source, None) is None


def test_arrays_of_another_graph_are_not_used(tmp_path: Path) -> None:
    parent = catalog_skb()
    write_compact(parent, tmp_path / "compact")
    other = catalog_skb()
    del other.nodes["C_KETTLE"]
    other.edges = [e for e in other.edges if "C_KETTLE" not in (e.src, e.dst)]
    assert patch_compact_parts(tmp_path / "compact", other, catalog_skb()) is None
    assert patch_compact_parts(tmp_path / "absent", parent, catalog_skb()) is None
