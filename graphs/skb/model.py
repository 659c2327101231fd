"""The semi-structured knowledge base (SKB): typed nodes with text, typed directed edges.

Nodes and edges are plain slotted dataclasses because an SKB holds hundreds of
thousands of them and pydantic validation per edge costs seconds; the schema and
node-type descriptions are pydantic because they are small, user-facing and are
rendered into prompts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from graphs.errors import LoaderError, first_problems
from graphs.heap import paused_gc
from graphs.skb.names import NAME_FIX, key_problem, name_problem
from graphs.skb.storable import KEY_FIX, KEY_TRIMMED, PROPERTY_FIX, SHOWN, props_problem, store_key_problem

Direction = Literal["out", "in"]


@dataclass(slots=True)
class Node:
    """A node: a globally unique external key (``HP:0001250``, ``OMIM:147791``, ``FGFR2``)."""

    key: str
    label: str
    props: dict[str, Any] = field(default_factory=dict)
    name_field: str = field(default="name", repr=False, compare=False)
    """The prop holding the display name (the node type's ``name_field``; set by ``SKB.add_node``)."""

    @property
    def name(self) -> str:
        value = self.props.get(self.name_field)
        if value is None and self.name_field != "name":
            value = self.props.get("name")
        return str(value) if value is not None else self.key


class EmptyProps(dict[str, Any]):
    """The one shared, read-only property map of the edges a loader read without properties.

    Why: a graph of forty million edges gives each its own empty dict otherwise, 64 bytes apiece (2.5 GB).
    It is a ``dict`` for every reader (JSON, ``==``, ``isinstance``); a write raises, naming the fix, since it
    would change every such edge at once."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("this edge's props are the shared empty map of edges read without properties; "
                        "assign a new dict (edge.props = {...}) instead of changing it in place")

    __setitem__ = __delitem__ = __ior__ = _refuse
    setdefault = update = pop = popitem = clear = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_no_props, ())


def _no_props() -> EmptyProps:
    return NO_PROPS


NO_PROPS = EmptyProps()
"""Shared by every edge without properties that a loader reads (``EmptyProps``)."""


@dataclass(slots=True)
class Edge:
    """A typed directed edge between two node keys."""

    src: str
    rel: str
    dst: str
    props: dict[str, Any] = field(default_factory=dict)


class NeighborText(BaseModel):
    """Adds neighbor names to a node's text (as STaRK does for its documents).

    Why: a disease in HPO has only a name; without its phenotypes in its text, lexical
    and dense baselines cannot match a phenotype question at all.
    """

    rel: str
    direction: Direction = "out"
    title: str
    field: str = "name"
    max_items: int = Field(default=10, ge=1)
    other_label: str | None = None
    """Only neighbors with this label (a relation may point at several labels)."""


class NodeType(BaseModel):
    """How nodes of one label turn into text for the embedder and BM25."""

    label: str
    description: str = ""
    name_field: str = "name"
    synonym_field: str | None = None
    text_fields: list[str] = Field(default_factory=lambda: ["name"])
    neighbor_text: list[NeighborText] = Field(default_factory=list)


class PropertyInfo(BaseModel):
    name: str
    type: str
    samples: list[str] = Field(default_factory=list)


class LabelInfo(BaseModel):
    label: str
    count: int
    description: str = ""
    properties: list[PropertyInfo] = Field(default_factory=list)


class RelationInfo(BaseModel):
    rel: str
    src_label: str
    dst_label: str
    count: int = 0
    description: str = ""
    """What the relation means in words (from the domain profile), shown to planners."""


#: Character budget (~chars/4 tokens) of the domain-profile part of a rendered schema (relation
#: descriptions are one line each; example questions are added until this budget is spent).
PROFILE_PROMPT_CHARS = 2400


class GraphSchema(BaseModel):
    """Labels, relation types with endpoints, properties with types and sample values."""

    labels: list[LabelInfo] = Field(default_factory=list)
    relations: list[RelationInfo] = Field(default_factory=list)
    examples: list[str] = Field(default_factory=list)
    """Example questions with their relation paths (the profile's exemplars), ``question -> >rel <rel``."""

    def label_names(self) -> list[str]:
        return [info.label for info in self.labels]

    def relation_names(self) -> list[str]:
        return sorted({info.rel for info in self.relations})

    def properties_of(self, label: str) -> list[str]:
        for info in self.labels:
            if info.label == label:
                return [p.name for p in info.properties]
        return []

    def render(self, max_samples: int = 0, max_sample_chars: int = 40) -> str:
        """Compact text for prompts: one line per label and per relation pattern.

        No property values by default: this text goes into system prompts, and graph text reaches a model
        only as quoted JSON inside tool results (a node's definition shown as a sample read as an
        instruction). ``max_samples`` > 0 is for text a person reads."""
        lines = ["Node labels:"]
        for info in self.labels:
            props = []
            for prop in info.properties:
                samples = ", ".join(repr(s[:max_sample_chars]) for s in prop.samples[:max_samples])
                props.append(f"{prop.name}:{prop.type}" + (f" (e.g. {samples})" if samples else ""))
            desc = f" -- {info.description}" if info.description else ""
            lines.append(f"- {info.label} [{info.count}]{desc}; properties: " + "; ".join(props))
        lines.append("Relationships:")
        for rel in self.relations:
            desc = f" -- {rel.description}" if rel.description else ""
            lines.append(f"- (:{rel.src_label})-[:{rel.rel}]->(:{rel.dst_label}) [{rel.count}]{desc}")
        if self.examples:
            budget = PROFILE_PROMPT_CHARS - sum(len(r.description) for r in self.relations)
            shown = []
            for example in self.examples:
                if budget - len(example) < 0:
                    break
                budget -= len(example) + 3
                shown.append(f"- {example}")
            if shown:
                lines.append("Example questions -> relation paths from the [bracketed] entity "
                             "(>rel follows the arrow, <rel goes against it):")
                lines.extend(shown)
        return "\n".join(lines)


def _sentence(text: str) -> str:
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def value_type_name(value: Any) -> str:
    """Cypher-style type names for schema rendering (shared with the stores' introspection)."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "FLOAT"
    if isinstance(value, list):
        return "LIST"
    return "STRING"


class SKB:
    """An in-memory SKB; loaders build one, stores and indexes consume it."""

    #: The arrays ``arrays_fixed`` holds (a class default: a subclass that stores its own need not set it).
    _arrays: tuple[list[str], np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray] | None = None

    def __init__(self, name: str, node_types: Iterable[NodeType] = ()) -> None:
        self.name = name
        self.node_types: dict[str, NodeType] = {t.label: t for t in node_types}
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []
        self._out: dict[str, list[int]] | None = None
        self._in: dict[str, list[int]] | None = None
        self._position: dict[str, int] | None = None
        #: The domain profile (graphs.skb.profile.Profile) the SKB was loaded with, if any;
        #: ``profiles.profile_for`` resolves and caches it. Typed loosely: the model must not import loaders.
        self.profile: Any = None
        self._checked_labels: set[str] = set()

    # -- building -------------------------------------------------------------
    def add_node(self, node: Node, *, source: str = "<memory>", record: str | int | None = None) -> None:
        if not node.key:
            raise LoaderError(source, "node has an empty key", record=record, fix="give every node a non-empty 'key'")
        problem = key_problem(node.key)
        if problem:
            shown = f"{node.key[:60]!r}{'...' if len(node.key) > 60 else ''}"
            raise LoaderError(source, f"node key {shown} {problem}", record=record, fix=KEY_FIX)
        if node.key in self.nodes:
            other = self.nodes[node.key]
            raise LoaderError(
                source,
                f"duplicate node key {node.key!r} (labels {other.label!r} and {node.label!r})",
                record=record,
                fix="node keys must be unique across all labels; prefix them by type if needed",
            )
        if node.label not in self._checked_labels:
            problem = name_problem(node.label)
            if problem:
                raise LoaderError(source, f"label {node.label!r} of node {node.key!r} {problem}", record=record,
                                  fix=NAME_FIX)
            self._checked_labels.add(node.label)
        ntype = self.node_types.get(node.label)
        if ntype is None:
            ntype = self.node_types[node.label] = NodeType(label=node.label)
        if ntype.name_field != node.name_field:
            node.name_field = ntype.name_field
        self.nodes[node.key] = node
        self._out = self._in = None
        self._position = None

    def add_edge(self, edge: Edge) -> None:
        self.edges.append(edge)
        self._out = self._in = None

    def clear(self) -> None:
        """Drop every node and edge, and what was derived from them; the name, node types and profile stay.

        Why: a build that has written the graph's compact form reads that from then on (``graphs.build``,
        ``consume``), and the records of a large graph are gigabytes of Python objects no later stage needs."""
        self.nodes = {}
        self.edges = []
        self._out = self._in = None
        self._position = None

    def validate(self, source: str = "<memory>") -> None:
        """Refuse dangling edges (a store would silently drop them), relation names no store can hold, and keys,
        property names and values a store would change (``graphs.skb.storable``)."""
        for rel in {edge.rel for edge in self.edges}:
            problem = name_problem(rel)
            if problem:
                first = next(i for i, e in enumerate(self.edges) if e.rel == rel)
                raise LoaderError(source, f"relation {rel!r} {problem}", record=f"edge {first}", fix=NAME_FIX)
        for i, edge in enumerate(self.edges):
            for end in (edge.src, edge.dst):
                if end not in self.nodes:
                    raise LoaderError(
                        source,
                        f"edge {edge.src!r} -[{edge.rel}]-> {edge.dst!r} refers to unknown node {end!r}",
                        record=i,
                        fix="add the node or remove the edge",
                    )
        self.check_storable(source)

    def check_storable(self, source: str = "<memory>") -> None:
        """Every key, property name and value a graph store holds exactly, or an error naming the first few."""
        keys: list[str] = []
        props: list[str] = []
        names_ok: set[str] = set()
        for key, node in self.nodes.items():
            if "\x00" in key or "\x01" in key or key[:1] in KEY_TRIMMED or key[-1:] in KEY_TRIMMED:
                problem = store_key_problem(key)
                if problem:
                    keys.append(f"node key {key[:60]!r} {problem}")
            problem = props_problem(node.props, names_ok) if node.props else None
            if problem:
                props.append(f"node {key[:60]!r} ({node.label}): {problem}")
        for edge in self.edges:
            problem = props_problem(edge.props, names_ok) if edge.props else None
            if problem:
                props.append(f"edge {edge.src[:40]!r} -[{edge.rel}]-> {edge.dst[:40]!r}: {problem}")
        found = keys + props
        if found:
            raise LoaderError(
                source,
                f"{len(found)} key(s) or value(s) the graph store cannot hold exactly: {first_problems(found, SHOWN)}",
                fix="; ".join(([KEY_FIX] if keys else []) + ([PROPERTY_FIX] if props else [])),
            )

    # -- access ---------------------------------------------------------------
    def labels(self) -> list[str]:
        return sorted({n.label for n in self.nodes.values()})

    def nodes_of(self, label: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.label == label]

    def iter_nodes(self) -> Iterator[Node]:
        """Every node once, in node order. Why not ``nodes.values()``: a compact SKB keeps each node that
        ``nodes`` builds, so a pass over the whole graph would rebuild it in memory; this one keeps none."""
        return iter(self.nodes.values())

    def _adjacency(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        if self._out is None or self._in is None:
            out: dict[str, list[int]] = defaultdict(list)
            inc: dict[str, list[int]] = defaultdict(list)
            with paused_gc():  # hundreds of thousands of small lists: the cyclic GC would rescan them repeatedly
                for i, edge in enumerate(self.edges):
                    out[edge.src].append(i)
                    inc[edge.dst].append(i)
            self._out, self._in = dict(out), dict(inc)
        return self._out, self._in

    def out_edges(self, key: str) -> Iterator[Edge]:
        out, _ = self._adjacency()
        return (self.edges[i] for i in out.get(key, ()))

    def in_edges(self, key: str) -> Iterator[Edge]:
        _, inc = self._adjacency()
        return (self.edges[i] for i in inc.get(key, ()))

    def degree(self, key: str) -> int:
        """How many edges touch ``key`` (out + in), without building them."""
        out, inc = self._adjacency()
        return len(out.get(key, ())) + len(inc.get(key, ()))

    def relations_at(self, key: str) -> list[tuple[str, Literal["out", "in"]]]:
        """The (relation, direction) pairs of the node's edges, outgoing first, each in first-edge order.
        Why: planners ask which relations a hub has; they need not materialise its thousands of edges."""
        seen: dict[tuple[str, Literal["out", "in"]], None] = {}
        for edge in self.out_edges(key):
            seen.setdefault((edge.rel, "out"))
        for edge in self.in_edges(key):
            seen.setdefault((edge.rel, "in"))
        return list(seen)

    def edge_count(
        self,
        key: str,
        rels: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        label: str | None = None,
    ) -> int:
        """How many edges of ``key`` one-hop expansion would read: of ``rels`` (None: any), in ``direction``,
        to neighbours of ``label`` (None: any); a self-loop counts once, as a store's undirected match reads it.
        Why: a hub's neighbourhood can be a sizeable share of the graph; tools decide from this count,
        without materialising the edges, whether to read all of them or a bounded sample."""
        allowed = None if rels is None else set(rels)
        count = 0
        sides: list[tuple[Iterator[Edge], bool]] = []
        if direction in ("out", "both"):
            sides.append((self.out_edges(key), True))
        if direction in ("in", "both"):
            sides.append((self.in_edges(key), False))
        nodes = self.nodes
        for edges, outgoing in sides:
            for e in edges:
                if allowed is not None and e.rel not in allowed:
                    continue
                if direction == "both" and not outgoing and e.src == e.dst:
                    continue  # counted on the outgoing side
                if label is not None:
                    other = nodes.get(e.dst if outgoing else e.src)
                    if other is None or other.label != label:
                        continue
                count += 1
        return count

    # -- arrays for vectorised consumers (a memory-mapped SKB stores them; this builds them per call) ----
    def node_keys(self) -> Sequence[str]:
        """Node keys in node order (the order of ``label_ids`` and ``edge_arrays``)."""
        return list(self.nodes)

    @contextmanager
    def arrays_fixed(self, labels: list[str], node_label: np.ndarray, rels: list[str], rel_ids: np.ndarray,
                     src_ids: np.ndarray, dst_ids: np.ndarray) -> Iterator[SKB]:
        """Within the block, ``label_ids`` and ``edge_arrays`` return these arrays instead of building them from
        the records (the build has them as the compact graph's). Why: several index-time computations read them,
        and building them per call costs seconds at millions of edges. The SKB must not change in the block."""
        if len(node_label) != len(self.nodes) or not len(rel_ids) == len(src_ids) == len(dst_ids) == len(self.edges):
            raise ValueError(f"arrays of {len(node_label)} nodes and {len(rel_ids)} edges for an SKB of "
                             f"{len(self.nodes)} and {len(self.edges)}")
        self._arrays = (labels, node_label, rels, rel_ids, src_ids, dst_ids)
        try:
            yield self
        finally:
            self._arrays = None

    @property
    def arrays_are_fixed(self) -> bool:
        """Whether ``label_ids`` and ``edge_arrays`` return stored arrays (``arrays_fixed``, or a compact SKB's
        own) rather than building them from the records: then they cost nothing to call."""
        return self._arrays is not None

    def label_ids(self) -> tuple[list[str], np.ndarray]:
        """Label names and the label id of every node (in node order)."""
        if self._arrays is not None:
            return self._arrays[0], self._arrays[1]
        labels = sorted({node.label for node in self.nodes.values()} | set(self.node_types))
        index = {label: i for i, label in enumerate(labels)}
        return labels, np.fromiter((index[n.label] for n in self.nodes.values()), dtype=np.int64, count=len(self.nodes))

    def edge_arrays(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Relation names and the (rel id, src id, dst id) arrays of every edge (in edge order)."""
        if self._arrays is not None:
            return self._arrays[2], self._arrays[3], self._arrays[4], self._arrays[5]
        position = {key: i for i, key in enumerate(self.nodes)}
        rels = list(dict.fromkeys(e.rel for e in self.edges))
        rel_id = {rel: i for i, rel in enumerate(rels)}
        n = len(self.edges)
        return (
            rels,
            np.fromiter((rel_id[e.rel] for e in self.edges), dtype=np.int64, count=n),
            np.fromiter((position[e.src] for e in self.edges), dtype=np.int64, count=n),
            np.fromiter((position[e.dst] for e in self.edges), dtype=np.int64, count=n),
        )

    def neighbor_keys(
        self, key: str, rel: str, direction: Literal["out", "in", "both"] = "both", label: str | None = None
    ) -> list[str]:
        """Keys of the nodes one ``rel`` edge away from ``key`` (outgoing first, in edge order; a parallel edge
        repeats its neighbour), optionally only those of ``label``.
        Why: planners choose tool arguments from the graph's structure (the broader and narrower terms of a
        mentioned one) without materialising a hub's thousands of other edges."""
        found: list[str] = []
        if direction in ("out", "both"):
            found.extend(e.dst for e in self.out_edges(key) if e.rel == rel)
        if direction in ("in", "both"):
            found.extend(e.src for e in self.in_edges(key) if e.rel == rel)
        if label is None:
            return found
        return [k for k in found if k in self.nodes and self.nodes[k].label == label]

    def neighbor_ids(
        self, key: str, rel: str, direction: Literal["out", "in", "both"] = "both", label: str | None = None
    ) -> np.ndarray:
        """``neighbor_keys`` as node ids (positions in node order, those of ``node_keys``; a parallel edge
        repeats its neighbour). Why: a planner intersects the neighbourhoods of named entities, a hub's
        hundreds of thousands of neighbours included, as arrays (the memory-mapped SKB builds no key strings)."""
        if self._position is None:
            self._position = {k: i for i, k in enumerate(self.nodes)}
        position = self._position
        found = self.neighbor_keys(key, rel, direction, label)
        return np.fromiter((position[k] for k in found), dtype=np.int64, count=len(found))

    def node_text(self, key: str) -> str:
        """The text embedded and BM25-indexed for a node, from its type's template."""
        node = self.nodes[key]
        ntype = self.node_types.get(node.label) or NodeType(label=node.label)
        parts = [_sentence(f"{node.label}: {node.name}")]
        for fname in ntype.text_fields:
            if fname == ntype.name_field:
                continue
            value = node.props.get(fname)
            if value in (None, "", []):
                continue
            if isinstance(value, list):
                value = "; ".join(str(v) for v in value)
            parts.append(_sentence(f"{fname}: {value}"))
        for spec in ntype.neighbor_text:
            edges = self.out_edges(key) if spec.direction == "out" else self.in_edges(key)
            names: list[str] = []
            for edge in edges:
                if edge.rel != spec.rel:
                    continue
                other = self.nodes.get(edge.dst if spec.direction == "out" else edge.src)
                if other is None or (spec.other_label is not None and other.label != spec.other_label):
                    continue
                name = str(other.props.get(spec.field, other.key))
                if name in names:
                    continue
                names.append(name)
                if len(names) >= spec.max_items:
                    break
            if names:
                parts.append(_sentence(f"{spec.title}: {', '.join(names)}"))
        return " ".join(parts)

    def schema(self, max_samples: int = 3) -> GraphSchema:
        counts = Counter(n.label for n in self.nodes.values())
        props: dict[str, dict[str, PropertyInfo]] = defaultdict(dict)
        for node in self.nodes.values():
            table = props[node.label]
            for pname, value in node.props.items():
                info = table.get(pname)
                if info is None:
                    info = table[pname] = PropertyInfo(name=pname, type=value_type_name(value))
                if len(info.samples) < max_samples and value not in (None, "", []):
                    info.samples.append(str(value)[:80])
        rel_counts = self.relation_patterns()
        labels = [
            LabelInfo(
                label=label,
                count=counts[label],
                description=self.node_types[label].description if label in self.node_types else "",
                properties=[PropertyInfo(name="key", type="STRING")] + list(props[label].values()),
            )
            for label in sorted(counts)
        ]
        # the domain profile (duck-typed: the model does not import loaders) adds words for planners
        rel_specs = getattr(self.profile, "relations", None) or {}
        relations = [
            RelationInfo(
                rel=rel, src_label=s, dst_label=d, count=c,
                description=getattr(rel_specs.get(rel), "description", "") or "",
            )
            for (rel, s, d), c in sorted(rel_counts.items())
        ]
        # round-robin over path lengths, so a cut by the prompt budget keeps every path shape
        by_len: dict[int, list[str]] = defaultdict(list)
        for ex in getattr(self.profile, "exemplars", None) or []:
            by_len[len(ex.path)].append(f"{ex.question} -> {' '.join(ex.path)}")
        examples = [
            group[i] for i in range(max((len(g) for g in by_len.values()), default=0))
            for _, group in sorted(by_len.items()) if i < len(group)
        ]
        return GraphSchema(labels=labels, relations=relations, examples=examples)

    def relation_patterns(self) -> Counter[tuple[str, str, str]]:
        """``(rel, source label, target label) -> edge count``; from the label and edge id arrays wherever they
        are stored (a compact SKB's, or a build's under ``arrays_fixed``) without building an edge: a schema of
        550,000 edges took 0.6 s edge by edge."""
        if self.arrays_are_fixed:
            labels, node_label = self.label_ids()
            rels, rel_ids, src_ids, dst_ids = self.edge_arrays()
            return relation_counts(labels, node_label, rels, rel_ids, src_ids, dst_ids)
        counts: Counter[tuple[str, str, str]] = Counter()
        for edge in self.edges:
            counts[(edge.rel, self.nodes[edge.src].label, self.nodes[edge.dst].label)] += 1
        return counts

    def stats(self) -> dict[str, Any]:
        return {
            "nodes": dict(Counter(n.label for n in self.nodes.values())),
            "edges": dict(Counter(e.rel for e in self.edges)),
        }


#: Edges per slice in ``relation_counts``: its temporaries are a few arrays of this many 8-byte codes.
PATTERN_CHUNK = 1 << 22


def relation_counts(labels: Sequence[str], node_label: np.ndarray, rels: Sequence[str], rel_ids: np.ndarray,
                    src_ids: np.ndarray, dst_ids: np.ndarray) -> Counter[tuple[str, str, str]]:
    """``(rel, source label, target label) -> edge count`` from the label and edge id arrays, in order of first
    occurrence (as a Counter filled edge by edge holds them): ``SKB.relation_patterns`` without an edge object.
    Counted ``PATTERN_CHUNK`` edges at a time: over 39M edges at once, the codes and the sort's temporaries took
    about 2 GB beside the graph."""
    n_labels = max(len(labels), 1)
    node_label = np.asarray(node_label)
    first: dict[int, int] = {}  # pattern code -> its first edge
    totals: Counter[int] = Counter()
    for start in range(0, len(rel_ids), PATTERN_CHUNK):
        stop = start + PATTERN_CHUNK
        src_label = node_label[np.asarray(src_ids[start:stop])].astype(np.int64)
        dst_label = node_label[np.asarray(dst_ids[start:stop])].astype(np.int64)
        code = (np.asarray(rel_ids[start:stop], dtype=np.int64) * n_labels + src_label) * n_labels + dst_label
        uniq, at, counts = np.unique(code, return_index=True, return_counts=True)
        for value, index, count in zip(uniq.tolist(), at.tolist(), counts.tolist(), strict=True):
            first.setdefault(value, start + index)
            totals[value] += count
    out: Counter[tuple[str, str, str]] = Counter()
    for value in sorted(first, key=first.__getitem__):
        rel, rest = divmod(value, n_labels * n_labels)
        src, dst = divmod(rest, n_labels)
        out[(rels[rel], labels[src], labels[dst])] = totals[value]
    return out
