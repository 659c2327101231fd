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

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from graphs.errors import LoaderError, first_problems
from graphs.skb.model import SKB, Edge, Node

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
    changed_edges: set[tuple[str, str, str]] = field(default_factory=set)
    """(src, rel, dst) of every edge upserted or deleted by a line (not those deleted with their node)."""
    node_source: np.ndarray | None = None
    """Each node of the result's position in the parent's node order (-1: a record a line wrote)."""
    edge_source: np.ndarray | None = None
    """Each edge of the result's position in the parent's edge list (-1: upserted by a line)."""
    replaced_nodes: set[str] = field(default_factory=set)
    """Nodes the parent had whose label or properties a line changed (their neighbours' texts may name them)."""

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


Ident = tuple[str, str, str]


def _parent_edges(skb: SKB, keys: set[str]) -> tuple[dict[Ident, list[int]], dict[str, set[Ident]]]:
    """The parent's edges with an end in ``keys``: (src, rel, dst) -> positions, and key -> those it touches.

    One pass over the edges, keeping only the few a change set names: a dict of every edge cost seconds at
    hundreds of thousands of edges."""
    positions: dict[Ident, list[int]] = {}
    touching: dict[str, set[Ident]] = {}
    for i, edge in enumerate(skb.edges):
        if edge.src in keys or edge.dst in keys:
            ident = (edge.src, edge.rel, edge.dst)
            positions.setdefault(ident, []).append(i)
            touching.setdefault(edge.src, set()).add(ident)
            touching.setdefault(edge.dst, set()).add(ident)
    return positions, touching


def apply_changes(skb: SKB, changes: ChangeSet) -> tuple[SKB, ApplyReport]:
    """A new SKB with the changes applied in order (``skb`` is left as it was), and what was done.

    Every line is checked before the result is returned: any problem raises one LoaderError naming the
    first few by line, and the caller then writes nothing. The result shares the parent's unchanged node
    and edge records (neither is changed by anyone after loading); its edges keep the parent's order, an
    upserted edge taking the place of the edges it replaces and a new one coming last."""
    labels = set(skb.node_types) | {n.label for n in skb.nodes.values()}
    relations = {e.rel for e in skb.edges}
    named = {c.edge.src for c in changes.changes if c.edge is not None}
    named |= {c.node.key for c in changes.changes if c.node is not None and c.op == "delete"}
    old_at, touching = _parent_edges(skb, named)
    nodes: dict[str, Node] = dict(skb.nodes)
    now: dict[Ident, list[Edge] | None] = {}  # the edges of every (src, rel, dst) a line changed (None: none)

    def current(ident: Ident) -> list[Edge] | None:
        if ident in now:
            return now[ident]
        at = old_at.get(ident)
        return [skb.edges[i] for i in at] if at else None

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
                for ident in sorted(touching.pop(spec.key, set())):
                    if current(ident) is None:
                        continue
                    now[ident] = None
                    report.applied["edge deleted with its node"] += 1
                    report.changed_nodes.add(ident[2] if ident[0] == spec.key else ident[0])
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
            if old is not None:
                report.replaced_nodes.add(spec.key)
            report.applied["node added" if old is None else "node replaced"] += 1
            continue
        assert change.edge is not None
        espec = change.edge
        ident = (espec.src, espec.rel, espec.dst)
        if change.op == "delete":
            if current(ident) is None:
                problems.append(f"{where}: delete of unknown edge {espec.src!r} -[{espec.rel}]-> {espec.dst!r}")
                continue
            now[ident] = None
            report.changed_nodes.update((espec.src, espec.dst))
            report.changed_edges.add(ident)
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
        old_edges = current(ident)
        if old_edges is not None and len(old_edges) == 1 and old_edges[0].props == espec.props:
            report.skipped["edge unchanged"] += 1
            continue
        now[ident] = [Edge(espec.src, espec.rel, espec.dst, dict(espec.props))]
        touching.setdefault(espec.src, set()).add(ident)
        touching.setdefault(espec.dst, set()).add(ident)
        report.changed_nodes.update((espec.src, espec.dst))
        report.changed_edges.add(ident)
        report.applied["edge added" if old_edges is None else "edge replaced"] += 1
    if problems:
        raise LoaderError(changes.source, f"{len(problems)} change(s) cannot apply: {first_problems(problems)}",
                          fix="correct or remove those lines; nothing was changed")
    report.changed_nodes -= report.deleted_nodes
    report.replaced_nodes -= report.deleted_nodes
    out = SKB(skb.name, skb.node_types.values())
    out.profile = skb.profile
    # the changed records are checked as a build checks every record (keys, names, storable values)
    probe = SKB(skb.name, skb.node_types.values())
    for key in report.changed_nodes:
        node = nodes.get(key)
        if node is not None and node is not skb.nodes.get(key):
            probe.add_node(node, source=changes.source)
    probe.edges = [edge for edges in now.values() if edges for edge in edges]
    probe.check_storable(changes.source)
    out.nodes = nodes
    position = {key: i for i, key in enumerate(skb.nodes)}
    before = skb.nodes.get
    report.node_source = np.fromiter((position[key] if node is before(key) else -1 for key, node in nodes.items()),
                                     dtype=np.int64, count=len(nodes))
    out.edges, report.edge_source = _edges_after(skb.edges, old_at, now)
    return out, report


def stale_texts(skb: SKB, report: ApplyReport) -> set[str]:
    """The nodes of the changed graph ``skb`` whose text may differ from the parent's: a node's text is made of
    its own record, its edges (in order) and the records of the neighbours they lead to
    (``SKB.node_text``), so it can change only for a node a line changed, added or touched with an edge
    (``changed_nodes``, which holds the neighbours of deleted nodes) and for a neighbour of a node whose record
    changed. Every other node keeps its text, so an update reuses what the parent derived from it."""
    replaced = report.replaced_nodes
    out = set(report.changed_nodes)
    if replaced:
        for edge in skb.edges:
            if edge.src in replaced:
                out.add(edge.dst)
            elif edge.dst in replaced:
                out.add(edge.src)
    return out


def _edges_after(edges: list[Edge], old_at: dict[Ident, list[int]],
                 now: dict[Ident, list[Edge] | None]) -> tuple[list[Edge], np.ndarray]:
    """The parent's edge list with the changed (src, rel, dst) replaced in place, and the new ones appended;
    and each edge's position in the parent's list (-1: a new record)."""
    replace: dict[int, list[Edge]] = {}
    for ident, current in now.items():
        at = old_at.get(ident)
        if at:
            replace.update({i: [] for i in at})
            replace[at[0]] = current or []
    out: list[Edge] = []
    source: list[np.ndarray] = []
    start = 0
    for i in sorted(replace):
        out.extend(edges[start:i])
        out.extend(replace[i])
        source += [np.arange(start, i, dtype=np.int64), np.full(len(replace[i]), -1, dtype=np.int64)]
        start = i + 1
    out.extend(edges[start:])
    source.append(np.arange(start, len(edges), dtype=np.int64))
    added = [edge for ident, current in now.items() if ident not in old_at for edge in current or ()]
    out.extend(added)
    source.append(np.full(len(added), -1, dtype=np.int64))
    return out, np.concatenate(source)
