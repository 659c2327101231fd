"""Change sets: upserts and deletions of nodes and edges, read from JSON lines and checked as a whole.

Why a format of its own: a change set is what a user's pipeline emits between two builds (an edited
product, a retracted paper), so each line says one change and names its line when it is wrong. The whole
set is checked against the index's graph before anything is written: an edge to a missing node, a delete
of an unknown key, a malformed line or a label or relation the graph's schema lacks refuses the set and
changes nothing.

One line each (``props`` optional, ``label`` only on a node upsert)::

    {"op": "upsert", "node": {"key": "P9", "label": "Product", "props": {"name": "steam iron"}}}
    {"op": "delete", "node": {"key": "P2"}}
    {"op": "upsert", "edge": {"src": "P9", "rel": "IN_CATEGORY", "dst": "C1", "props": {}}}
    {"op": "delete", "edge": {"src": "P1", "rel": "IN_CATEGORY", "dst": "C3"}}

The lines apply in order. Deleting a node deletes its edges. An edge is named by (src, rel, dst): an upsert
replaces every edge so named by the one given, a delete removes them all. An upsert equal to what the
graph holds is skipped (counted, not an error), so applying a set twice leaves the graph as once.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from graphs.errors import LoaderError
from graphs.skb.model import SKB, Edge, Node

#: Problems named in full in the refusal; the rest are counted.
SHOWN_PROBLEMS = 5
CHANGE_FIX = ("one JSON object per line: {\"op\": \"upsert\"|\"delete\", \"node\": {key, label, props}} or "
              "{\"op\": ..., \"edge\": {src, rel, dst, props}}; nothing was changed")


class NodeSpec(BaseModel):
    """A node of a change: its key, and for an upsert its label and properties (the whole node)."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1)
    label: str | None = None
    props: dict[str, Any] = Field(default_factory=dict)


class EdgeSpec(BaseModel):
    """An edge of a change, named by its endpoints and relation."""

    model_config = ConfigDict(extra="forbid")
    src: str = Field(min_length=1)
    rel: str = Field(min_length=1)
    dst: str = Field(min_length=1)
    props: dict[str, Any] = Field(default_factory=dict)


class Change(BaseModel):
    """One line of a change set: an upsert or a delete of exactly one node or one edge."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["upsert", "delete"]
    node: NodeSpec | None = None
    edge: EdgeSpec | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Change:
        if (self.node is None) == (self.edge is None):
            raise ValueError("give exactly one of 'node' and 'edge'")
        if self.op == "upsert" and self.node is not None and not self.node.label:
            raise ValueError(f"upsert of node {self.node.key!r} needs its 'label'")
        return self


@dataclass
class ChangeSet:
    """The parsed lines of a change file and the sha256 of its bytes (what the manifest records)."""

    changes: list[Change]
    lines: list[int]
    sha256: str
    source: str = "<memory>"


@dataclass
class ApplyReport:
    """What applying a change set did: counts by kind of change, and what was skipped and why."""

    applied: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    changed_nodes: set[str] = field(default_factory=set)
    deleted_nodes: set[str] = field(default_factory=set)

    @property
    def total_applied(self) -> int:
        return sum(self.applied.values())


def read_changes(path: Path) -> ChangeSet:
    """Parse a change file; a malformed line raises LoaderError naming the line (nothing is applied)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoaderError(str(path), f"cannot read the change set ({exc.strerror or exc})",
                          fix="pass an existing JSON-lines file to --update") from exc
    return parse_changes(data, source=str(path))


def parse_changes(data: bytes, *, source: str = "<memory>") -> ChangeSet:
    """The change set in ``data`` (JSON lines; blank lines are ignored)."""
    changes: list[Change] = []
    lines: list[int] = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LoaderError(source, f"line is not JSON ({exc})", record=f"line {lineno}", fix=CHANGE_FIX) from exc
        try:
            changes.append(Change.model_validate(obj))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise LoaderError(source, f"invalid change{f' at {where}' if where else ''}: {first['msg']}",
                              record=f"line {lineno}", fix=CHANGE_FIX) from exc
        lines.append(lineno)
    if not changes:
        raise LoaderError(source, "the change set holds no change", fix=CHANGE_FIX)
    return ChangeSet(changes, lines, hashlib.sha256(data).hexdigest(), source)


def _edge_id(edge: Edge | EdgeSpec) -> tuple[str, str, str]:
    return edge.src, edge.rel, edge.dst


def apply_changes(skb: SKB, changes: ChangeSet) -> tuple[SKB, ApplyReport]:
    """A new SKB with the changes applied in order (``skb`` is left as it was), and what was done.

    Every line is checked before the result is returned: any problem raises one LoaderError naming the
    first few by line, and the caller then writes nothing."""
    labels = set(skb.node_types) | {n.label for n in skb.nodes.values()}
    relations = {e.rel for e in skb.edges}
    nodes: dict[str, Node] = dict(skb.nodes)
    edges: dict[tuple[str, str, str], list[Edge]] = {}
    order: list[tuple[str, str, str]] = []
    for edge in skb.edges:
        ident = _edge_id(edge)
        if ident not in edges:
            edges[ident] = []
            order.append(ident)
        edges[ident].append(edge)
    touching: dict[str, set[tuple[str, str, str]]] = {}
    for ident in order:
        touching.setdefault(ident[0], set()).add(ident)
        touching.setdefault(ident[2], set()).add(ident)
    report = ApplyReport()
    problems: list[str] = []
    for change, lineno in zip(changes.changes, changes.lines, strict=True):
        where = f"line {lineno}"
        if change.node is not None:
            spec = change.node
            if change.op == "delete":
                if spec.key not in nodes:
                    problems.append(f"{where}: delete of unknown node {spec.key!r}")
                    continue
                del nodes[spec.key]
                for ident in touching.pop(spec.key, set()):
                    if edges.pop(ident, None) is not None:
                        report.applied["edge deleted with its node"] += 1
                    other = ident[2] if ident[0] == spec.key else ident[0]
                    touching.get(other, set()).discard(ident)
                    report.changed_nodes.add(other)
                report.deleted_nodes.add(spec.key)
                report.changed_nodes.discard(spec.key)
                report.applied["node deleted"] += 1
                continue
            assert spec.label is not None
            if spec.label not in labels:
                problems.append(f"{where}: node {spec.key!r} has label {spec.label!r}, which the graph's schema "
                                f"lacks (labels: {', '.join(sorted(labels))})")
                continue
            old = nodes.get(spec.key)
            if old is not None and old.label == spec.label and old.props == spec.props:
                report.skipped["node unchanged"] += 1
                continue
            nodes[spec.key] = Node(spec.key, spec.label, dict(spec.props))
            report.deleted_nodes.discard(spec.key)
            report.changed_nodes.add(spec.key)
            report.applied["node added" if old is None else "node replaced"] += 1
            continue
        assert change.edge is not None
        espec = change.edge
        ident = _edge_id(espec)
        if change.op == "delete":
            if edges.pop(ident, None) is None:
                problems.append(f"{where}: delete of unknown edge {espec.src!r} -[{espec.rel}]-> {espec.dst!r}")
                continue
            for end in (espec.src, espec.dst):
                touching.get(end, set()).discard(ident)
                report.changed_nodes.add(end)
            report.applied["edge deleted"] += 1
            continue
        missing = [end for end in (espec.src, espec.dst) if end not in nodes]
        if missing:
            problems.append(f"{where}: edge {espec.src!r} -[{espec.rel}]-> {espec.dst!r} refers to missing node "
                            f"{missing[0]!r} (add the node first, in this set or the graph)")
            continue
        if espec.rel not in relations:
            problems.append(f"{where}: relation {espec.rel!r} is not in the graph's schema "
                            f"(relations: {', '.join(sorted(relations))})")
            continue
        old_edges = edges.get(ident)
        if old_edges is not None and len(old_edges) == 1 and old_edges[0].props == espec.props:
            report.skipped["edge unchanged"] += 1
            continue
        if old_edges is None:
            order.append(ident)
        edges[ident] = [Edge(espec.src, espec.rel, espec.dst, dict(espec.props))]
        touching.setdefault(espec.src, set()).add(ident)
        touching.setdefault(espec.dst, set()).add(ident)
        report.changed_nodes.update((espec.src, espec.dst))
        report.applied["edge added" if old_edges is None else "edge replaced"] += 1
    if problems:
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise LoaderError(changes.source, f"{len(problems)} change(s) cannot apply: "
                          f"{'; '.join(problems[:SHOWN_PROBLEMS])}{more}",
                          fix="correct or remove those lines; nothing was changed")
    report.changed_nodes -= report.deleted_nodes
    out = SKB(skb.name, skb.node_types.values())
    out.profile = skb.profile
    for node in nodes.values():
        out.add_node(Node(node.key, node.label, node.props), source=changes.source)
    for ident in dict.fromkeys(order):  # an edge deleted and upserted again is listed twice
        for edge in edges.get(ident, ()):
            out.add_edge(edge)
    out.validate(source=changes.source)
    return out, report
