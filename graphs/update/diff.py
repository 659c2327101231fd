"""The change set between an index's graph and the same source read again: what a plain re-run applies.

Why: a user re-runs the command that built the index after the data changed. When the change is small, applying
it as an update (``update_index``) costs a fraction of a rebuild, and equals a rebuild of the changed data.
Nodes are compared by label and properties, edges by (src, rel, dst) and properties, each as the index's files
encode them, so a loader's tuples and the files' lists compare equal.

None where a change set cannot say the difference: another schema or profile (the planners read them), or two
parallel edges with one (src, rel, dst) that differ (an upsert replaces all edges so named by one).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from graphs.loaders.jsonl import record_line, schema_of
from graphs.skb.model import SKB
from graphs.update.changes import ChangeSet, parse_changes


def _edge_records(skb: SKB) -> dict[tuple[str, str, str], list[tuple[bytes, dict[str, Any]]]]:
    grouped: dict[tuple[str, str, str], list[tuple[bytes, dict[str, Any]]]] = defaultdict(list)
    for edge in skb.edges:
        grouped[(edge.src, edge.rel, edge.dst)].append((record_line(edge.props or {}), edge.props or {}))
    return grouped


def diff_changes(old: SKB, new: SKB, *, source: str = "the data read again") -> ChangeSet | None:
    """The change set that turns ``old`` into ``new`` (None: not expressible, see the module docstring; a set
    with no change: equal). Lines are in key order, so equal graphs give equal sets and digests."""
    if record_line(schema_of(old) | {"name": ""}) != record_line(schema_of(new) | {"name": ""}):
        return None
    lines: list[dict[str, object]] = []
    for key in sorted(new.nodes):
        node, was = new.nodes[key], old.nodes.get(key)
        if was is None or was.label != node.label or record_line(was.props) != record_line(node.props):
            lines.append({"op": "upsert", "node": {"key": key, "label": node.label, "props": node.props}})
    gone = sorted(set(old.nodes) - set(new.nodes))
    lines += [{"op": "delete", "node": {"key": key}} for key in gone]
    before, after = _edge_records(old), _edge_records(new)
    for ident in sorted(after):
        records = after[ident]
        if sorted(r for r, _ in before.get(ident, [])) == sorted(r for r, _ in records):
            continue
        if len(records) > 1:
            return None
        src, rel, dst = ident
        props = records[0][1]
        lines.append({"op": "upsert", "edge": {"src": src, "rel": rel, "dst": dst, "props": props}})
    deleted = set(gone)
    for src, rel, dst in sorted(set(before) - set(after)):
        if src not in deleted and dst not in deleted:  # a deleted node's edges go with it
            lines.append({"op": "delete", "edge": {"src": src, "rel": rel, "dst": dst}})
    if not lines:
        return ChangeSet([], [], "", source)
    data = "".join(json.dumps(line, sort_keys=True, ensure_ascii=False, default=str) + "\n" for line in lines)
    return parse_changes(data.encode("utf-8"), source=source)
