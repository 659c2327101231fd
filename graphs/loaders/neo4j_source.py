"""An existing Neo4j (or other Bolt) database as the source of an index, read and never written.

Why: a user whose graph already lives in Neo4j should not have to export it to JSON lines, build a
copy elsewhere and keep the two in sync. ``read_neo4j`` reads the schema, the nodes and the
relationships through READ sessions with fixed query text, page by page (keyset pagination on the
``key`` property, then the out-edges of each page's nodes), and returns an SKB from which the build
makes the side indexes (vectors, BM25, lexicon, statistics); the graph itself stays where it is and
is served live (``--store neo4j``). ``source_state`` records what the database looked like (node
count per label, relationship count per type, the last committed transaction where the server
tells it); ``check_fresh`` compares it when the index is served, so a database that changed since
the build is reported as stale with the command that rebuilds the index.

What the agent needs from the database: every node it should see carries a unique string property
``key`` (the agent addresses nodes by it). Node text comes from the node types of a schema file
(``--profile schema.json``: ``{"name", "node_types": [...], "profile": {...}}``, the jsonl format's
schema) or is induced from the database: the display name is ``name`` (else ``title``), the text is
``--text-properties`` (default: the name). Nothing here ever opens a write session.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from graphs.errors import ConfigError, IndexMismatchError, LoaderError
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.store.props import quote_name

if TYPE_CHECKING:
    from graphs.store.neo4j_store import Neo4jStore

ProgressFn = Callable[[int, int], None]
#: Nodes (and the out-edges of that many nodes) read per query.
DEFAULT_BATCH = 5000
#: Properties tried, in order, as the display name of an induced node type.
NAME_PROPERTIES = ("name", "title")
_SHOW_TX = "SHOW DATABASES YIELD name, lastCommittedTxn WHERE name = $db RETURN lastCommittedTxn"


class Neo4jSource(BaseModel):
    """Where the graph is and what to read of it (recorded in the manifest, the password never is)."""

    uri: str
    user: str = "neo4j"
    database: str | None = None
    labels: list[str] | None = Field(default=None, description="node labels to read (default: all)")
    text_properties: list[str] | None = Field(
        default=None, description="induced node types: the properties embedded and BM25-indexed (default: the name)"
    )
    schema_file: str | None = Field(default=None, description="a jsonl-format schema.json giving the node types")
    batch_size: int = Field(default=DEFAULT_BATCH, ge=1, le=1_000_000)

    def rebuild_command(self, index_dir: Path | str) -> str:
        """The command that built the index: run again, it applies what changed in the database (``--force``
        rebuilds in full)."""
        parts = ["skb index --dataset neo4j", f"--uri {self.uri}"]
        if self.database:
            parts.append(f"--database {self.database}")
        if self.labels:
            parts.append(f"--labels {','.join(self.labels)}")
        if self.text_properties:
            parts.append(f"--text-properties {','.join(self.text_properties)}")
        if self.schema_file:
            parts.append(f"--profile {self.schema_file}")
        parts.append(f"--index-dir {index_dir}")
        return " ".join(parts)


class SourceState(BaseModel):
    """What the database held when an index was built from it: compared when the index is served."""

    nodes: dict[str, int]
    relationships: dict[str, int]
    last_tx: int | None = None


def connect(source: Neo4jSource, password: str | None = None, **kwargs: Any) -> Neo4jStore:
    """A store on the source database; the password comes from ``NEO4J_PASSWORD`` unless given."""
    import os

    from graphs.store.neo4j_store import Neo4jStore

    secret = password if password is not None else os.environ.get("NEO4J_PASSWORD", "")
    if not secret:
        raise ConfigError(
            f"reading the Neo4j database at {source.uri} needs its password in the environment variable "
            "NEO4J_PASSWORD (it is never written to the index)"
        )
    return Neo4jStore(source.uri, source.user, secret, source.database, **kwargs)


def _labels(store: Neo4jStore, source: Neo4jSource) -> list[str]:
    present = store.labels()
    if source.labels is None:
        return present
    unknown = [label for label in source.labels if label not in present]
    if unknown:
        raise LoaderError(
            source.uri,
            f"the database has no nodes labelled {', '.join(map(repr, unknown))}",
            fix=f"choose --labels from {', '.join(present) or '(none: the database is empty)'}",
        )
    return list(dict.fromkeys(source.labels))


def _check_keys(store: Neo4jStore, label: str, source: Neo4jSource) -> None:
    """Every node of ``label`` has a string ``key``: the agent addresses nodes by it."""
    q = quote_name(label)
    rows = store._read(f"MATCH (n:{q}) WHERE n.key IS NULL RETURN count(n)")
    missing = int(rows[0][0]) if rows else 0
    if missing:
        raise LoaderError(
            source.uri,
            f"{missing} node(s) labelled {label!r} have no 'key' property",
            record=label,
            fix="the agent addresses nodes by a unique string property named key: set one on them in your "
            "database, or leave the label out with --labels",
        )


def _induced_types(store: Neo4jStore, labels: Sequence[str], source: Neo4jSource) -> list[NodeType]:
    """Node types from the database's own properties: the name is ``name`` (else ``title``), the text
    ``--text-properties`` (those the label has) or only the name."""
    schema = store.schema()
    props = {info.label: {p.name for p in info.properties} for info in schema.labels}
    types: list[NodeType] = []
    for label in labels:
        have = props.get(label, set())
        name_field = next((p for p in NAME_PROPERTIES if p in have), "name")
        wanted = [p for p in (source.text_properties or []) if p in have]
        types.append(NodeType(label=label, name_field=name_field, text_fields=wanted or [name_field]))
    return types


def _schema_types(path: Path) -> tuple[str | None, list[NodeType], Any]:
    from graphs.loaders.jsonl import _profile, _schema

    if not path.is_file():
        raise LoaderError(str(path), "file not found", fix="pass a schema.json ({name, node_types, profile})")
    name, types = _schema(path)
    return name, types, _profile(path)


def _plain_props(raw: Any, source: Neo4jSource, label: str, key: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise LoaderError(source.uri, f"node {key!r} came back without its properties", record=label)
    return {str(k): v for k, v in raw.items() if k != "key" and v is not None}


def read_neo4j(
    source: Neo4jSource,
    *,
    password: str | None = None,
    store: Neo4jStore | None = None,
    progress: ProgressFn | None = None,
) -> SKB:
    """The SKB of the database (READ sessions only), nodes in (label, key) order, edges in
    (source key, relationship, target key, properties) order: two reads of one database give one SKB."""
    owned = store is None
    db = store if store is not None else connect(source, password)
    try:
        labels = _labels(db, source)
        for label in labels:
            _check_keys(db, label, source)
        if source.schema_file:
            name, types, profile = _schema_types(Path(source.schema_file))
            known = {t.label for t in types}
            types += [t for t in _induced_types(db, labels, source) if t.label not in known]
        else:
            name, types, profile = None, _induced_types(db, labels, source), None
        skb = SKB(name or (source.database or "neo4j"), types)
        totals = {label: db._count(label) for label in labels}
        total, done = sum(totals.values()), 0
        if progress:
            progress(0, total)
        keys_by_label: dict[str, list[str]] = {}
        element_of: dict[str, str] = {}
        batch = source.batch_size
        for label in labels:
            q = quote_name(label)
            page = (
                f"MATCH (n:{q}) WHERE n.key > $after RETURN n.key AS k, properties(n) AS p, elementId(n) AS e "
                "ORDER BY k LIMIT $n"
            )
            first = f"MATCH (n:{q}) RETURN n.key AS k, properties(n) AS p, elementId(n) AS e ORDER BY k LIMIT $n"
            keys: list[str] = []
            after: str | None = None
            while True:
                rows = db._read(first if after is None else page, {"n": batch} if after is None else
                                {"n": batch, "after": after})
                for key, props, element in rows:
                    if not isinstance(key, str) or not key:
                        raise LoaderError(
                            source.uri,
                            f"a node labelled {label!r} has key {key!r}; keys must be non-empty strings",
                            record=label,
                            fix="store the key as a string (e.g. SET n.key = toString(n.key) in your own tooling)",
                        )
                    seen = element_of.get(key)
                    if seen is not None and seen == str(element):
                        continue  # the same node under a second selected label: read once, first label wins
                    skb.add_node(Node(key, label, _plain_props(props, source, label, key)),
                                 source=source.uri, record=label)
                    element_of[key] = str(element)
                    keys.append(key)
                done += len(rows)
                if progress:
                    progress(min(done, total), total)
                if len(rows) < batch:
                    break
                after = str(rows[-1][0])
            keys_by_label[label] = keys
        edges: list[Edge] = []
        for label in labels:
            q = quote_name(label)
            cypher = (
                f"MATCH (a:{q})-[r]->(b) WHERE a.key IN $keys "
                "RETURN a.key AS s, type(r) AS t, b.key AS d, properties(r) AS p"
            )
            keys = keys_by_label[label]
            for start in range(0, len(keys), batch):
                for src, rel, dst, props in db._read(cypher, {"keys": keys[start : start + batch]}):
                    if isinstance(dst, str) and dst in skb.nodes:  # edges to nodes left out are left out
                        edges.append(Edge(str(src), str(rel), dst, {str(k): v for k, v in (props or {}).items()}))
        edges.sort(key=lambda e: (e.src, e.rel, e.dst, json.dumps(e.props, sort_keys=True, default=str)))
        for edge in edges:
            skb.add_edge(edge)
        # the profile (given in schema.json) wins field by field over what the graph says (graphs.skb.induce)
        from graphs.skb.induce import merge_for_skb

        skb.profile = merge_for_skb(skb, profile)
        return skb
    finally:
        if owned:
            db.close()


def read_source(
    source: Neo4jSource, *, password: str | None = None, progress: ProgressFn | None = None
) -> tuple[SKB, dict[str, Any]]:
    """The SKB and the record an index keeps of its source (``IndexConfig.source``): the database's
    state is taken before and after the read, and a database that changed meanwhile is refused."""
    with connect(source, password) as store:
        labels = _labels(store, source)
        before = source_state(store, labels)
        skb = read_neo4j(source, store=store, progress=progress)
        after = source_state(store, labels)
    if after != before:
        raise LoaderError(
            source.uri,
            "the database changed while it was read (node, relationship or transaction counts moved)",
            fix="run skb index again when writes have settled",
        )
    record = {"kind": "neo4j", "source": source.model_dump(mode="json"), "state": before.model_dump(mode="json")}
    return skb, record


def current_state(source: Neo4jSource, password: str | None = None) -> SourceState:
    """The database's state now (a few count queries), e.g. to tell whether an index is up to date."""
    with connect(source, password) as store:
        return source_state(store, _labels(store, source))


def open_source_store(record: dict[str, Any], index_dir: Path | str) -> Neo4jStore:
    """The live database of an index built from one, checked against the state the build recorded.

    The recorded URI, user and database are used unless ``NEO4J_URI`` / ``NEO4J_USER`` /
    ``NEO4J_DATABASE`` say otherwise; the password is ``NEO4J_PASSWORD``."""
    import os

    try:
        source = Neo4jSource.model_validate(record["source"])
        state = SourceState.model_validate(record["state"])
    except (KeyError, TypeError, ValueError) as exc:
        from graphs.errors import IndexCorruptError
        from graphs.manifest import rebuild_hint

        raise IndexCorruptError(
            f"the manifest of {index_dir} has an unreadable source record ({exc}) -- {rebuild_hint(Path(index_dir))}"
        ) from exc
    overrides = {
        "uri": os.environ.get("NEO4J_URI", "").strip() or source.uri,
        "user": (os.environ.get("NEO4J_USER") or os.environ.get("NEO4J_USERNAME") or "").strip() or source.user,
        "database": os.environ.get("NEO4J_DATABASE", "").strip() or source.database,
    }
    source = source.model_copy(update=overrides)
    store = connect(source)
    try:
        check_fresh(store, source, state, index_dir)
    except BaseException:
        store.close()
        raise
    return store


def source_state(store: Neo4jStore, labels: Sequence[str]) -> SourceState:
    """Node count per label, relationship count per type, and the last transaction id.

    Every query is one Neo4j answers from its count store (``MATCH (n:L)``, ``MATCH ()-[r:T]->()``), so
    checking a large database costs milliseconds, not a scan."""
    nodes = {label: store._count(label) for label in labels}
    relationships: dict[str, int] = {}
    for rel in _relationship_types(store):
        rows = store._read(f"MATCH ()-[r:{quote_name(rel)}]->() RETURN count(r)")
        count = int(rows[0][0]) if rows else 0
        if count:
            relationships[rel] = count
    return SourceState(nodes=nodes, relationships=dict(sorted(relationships.items())), last_tx=_last_tx(store))


def _relationship_types(store: Neo4jStore) -> list[str]:
    """``db.relationshipTypes()`` (types without relationships are dropped by their count of 0)."""
    from graphs.errors import StoreError, StoreUnavailableError

    try:
        return sorted({str(r[0]) for r in store._read("CALL db.relationshipTypes()")})
    except StoreUnavailableError:
        raise
    except StoreError:
        return sorted({str(r[0]) for r in store._read("MATCH ()-[r]->() RETURN DISTINCT type(r)")})


def _last_tx(store: Neo4jStore) -> int | None:
    """Neo4j 5's last committed transaction of the database; None where the server does not say."""
    from graphs.errors import StoreError, StoreUnavailableError

    try:
        rows = store._read(_SHOW_TX, {"db": store.database or "neo4j"})
    except StoreUnavailableError:
        raise
    except StoreError:
        return None
    try:
        return int(rows[0][0]) if rows and rows[0][0] is not None else None
    except (TypeError, ValueError):
        return None


def check_recorded(store: Neo4jStore, record: dict[str, Any], index_dir: Path | str) -> None:
    """``check_fresh`` against the source record an index keeps in its manifest."""
    check_fresh(store, Neo4jSource.model_validate(record["source"]), SourceState.model_validate(record["state"]),
                index_dir)


def check_fresh(store: Neo4jStore, source: Neo4jSource, recorded: SourceState, index_dir: Path | str) -> None:
    """Raise IndexMismatchError naming what changed and the rebuild command when the database is not
    the one the index was built from."""
    now = source_state(store, list(recorded.nodes))
    changes: list[str] = []
    for label, before in recorded.nodes.items():
        if now.nodes.get(label) != before:
            changes.append(f"{label} nodes {before} -> {now.nodes.get(label, 0)}")
    for rel in sorted(set(recorded.relationships) | set(now.relationships)):
        before, after = recorded.relationships.get(rel, 0), now.relationships.get(rel, 0)
        if before != after:
            changes.append(f"{rel} relationships {before} -> {after}")
    if recorded.last_tx is not None and now.last_tx is not None and now.last_tx != recorded.last_tx:
        changes.append(f"last committed transaction {recorded.last_tx} -> {now.last_tx}")
    if changes:
        raise IndexMismatchError(
            f"the index at {index_dir} is stale: the database at {source.uri} changed since the build "
            f"({'; '.join(changes[:8])}{' ...' if len(changes) > 8 else ''}); bring it up to date with "
            f"`{source.rebuild_command(index_dir)}` (NEO4J_PASSWORD in the environment), which applies what changed"
        )


__all__ = [
    "Neo4jSource", "SourceState", "check_fresh", "check_recorded", "connect", "current_state", "open_source_store", "read_neo4j", "read_source",
    "source_state",
]
