"""The generic SKB exchange format: ``nodes.jsonl``, ``edges.jsonl``, ``schema.json``.

Why JSON lines: any tool can produce it, a bad record can be reported by line number,
and it is also how an index directory persists its SKB (``<index_dir>/skb/``), so it
must round-trip exactly (edge order and props included) and load fast: orjson is used
when importable (it is optional), the standard ``json`` module otherwise.

Layout of a directory:

- ``nodes.jsonl`` or ``nodes.jsonl.gz``: one node per line, either nested
  ``{"key": "HP:1", "label": "Phenotype", "props": {"name": "..."}}`` or flat
  ``{"key": "HP:1", "label": "Phenotype", "name": "..."}`` (fields other than key and
  label become props; an explicit ``props`` object wins on conflicts).
- ``edges.jsonl`` or ``edges.jsonl.gz``: ``{"src": ..., "rel": ..., "dst": ..., "props": {...}}``
  (props optional).
- ``schema.json`` (optional): ``{"name": str, "node_types": [NodeType, ...]}``.

Integer keys/endpoints are accepted and turned into strings (STaRK-style numeric ids).
Parallel edges are allowed (same endpoints and rel, e.g. different props); duplicate
node keys are not.
"""

from __future__ import annotations

import gzip as gzip_mod
import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from graphs.errors import LoaderError
from graphs.heap import paused_gc
from graphs.loaders.lines import MAX_LINE_BYTES, line_blocks
from graphs.manifest import atomic_write_bytes
from graphs.skb.model import NO_PROPS, SKB, Edge, Node, NodeType
from graphs.skb.names import NAME_FIX, name_problem
from graphs.skb.profile import Profile, is_default, parse_profile

try:  # optional speed-up; the format is plain JSON either way
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only where orjson is absent
    _orjson = None  # type: ignore[assignment]

NODES = "nodes.jsonl"
EDGES = "edges.jsonl"
SCHEMA = "schema.json"
FORMAT_VERSION = 1
# gzip level 1: an index is written again at every update, and level 6 took 2.4x as long for files a fifth
# smaller (a generated 300k-node graph: 11.7 s against 4.8 s, 43 MB against 53 MB); reading costs the same.
GZIP_LEVEL = 1

_loads: Callable[[bytes], Any]
if _orjson is not None:
    _loads = _orjson.loads

    def _dumps_line(obj: Any) -> bytes:
        return _orjson.dumps(obj) + b"\n"

else:
    _loads = json.loads

    def _dumps_line(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


# -- reading ---------------------------------------------------------------------


def _pick(directory: Path, base: str, required: bool) -> Path | None:
    plain, packed = directory / base, directory / f"{base}.gz"
    if plain.is_file() and packed.is_file():
        raise LoaderError(
            str(directory),
            f"both {base} and {base}.gz exist; cannot tell which is current",
            fix="delete the stale one",
        )
    if packed.is_file():
        return packed
    if plain.is_file():
        return plain
    if required:
        raise LoaderError(str(plain), "file not found", fix=f"write {base} (or {base}.gz) into {directory}")
    return None


#: Bytes of decompressed JSON lines parsed at once. Why chunks: parsing a whole file holds its text, a
#: copy of it and every record as a dict at the same time; at 10 million edges that alone was several GB
#: (the 1M-node scale build peaked at 11.2 GB while loading). A chunk's dicts become nodes/edges and are
#: freed before the next chunk is read, so the transient cost is one chunk, not the file.
CHUNK_BYTES = 4 << 20


def _open_lines(path: Path) -> Any:
    try:
        return gzip_mod.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as exc:
        raise LoaderError(str(path), f"cannot read ({exc})", fix="re-write the file; it may be truncated") from exc


def _parse_lines(raw: list[bytes], src: str, first_line: int) -> tuple[list[Any], list[int] | None]:
    """The records of ``raw`` (lines numbered from ``first_line``) and their line numbers (None: record
    i is on line ``first_line + i``).

    Fast path: the chunk parsed as one JSON array (one C call). If that fails (a blank line, a
    bad record), the slow path parses line by line so the error can name its line.
    """
    stripped = [line.rstrip() for line in raw]
    if stripped and all(stripped) and not any(line[:1].isspace() for line in stripped):
        try:
            objs = _loads(b"[" + b",".join(stripped) + b"]")
            if isinstance(objs, list) and len(objs) == len(stripped):
                return objs, None
        except ValueError:
            pass
    objs, lines = [], []
    for lineno, line in enumerate(stripped, first_line):
        if not line.strip():
            continue
        try:
            objs.append(_loads(line))
        except ValueError as exc:
            raise LoaderError(
                src, f"invalid JSON ({exc})", record=f"line {lineno}", fix="one JSON object per line"
            ) from exc
        lines.append(lineno)
    return objs, lines


def _parse(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[list[Any], list[int] | None, int]]:
    """The records of a JSON-lines file chunk by chunk (:data:`CHUNK_BYTES` of text each): the records,
    their line numbers (None: record i is on line ``first + i``) and ``first``. A line over
    ``max_line_bytes`` is refused before it is read whole (``graphs.loaders.lines``)."""
    src = str(path)
    first = 1
    with _open_lines(path) as fh:
        blocks = line_blocks(fh, src, max_line_bytes=max_line_bytes, block_bytes=CHUNK_BYTES)
        while True:
            try:
                block = next(blocks, None)
            except (OSError, EOFError, gzip_mod.BadGzipFile) as exc:
                raise LoaderError(src, f"cannot read ({exc})", fix="re-write the file; it may be truncated") from exc
            if block is None:
                return
            raw = block.split(b"\n")
            if block.endswith(b"\n"):
                raw.pop()
            objs, lines = _parse_lines(raw, src, first)
            yield objs, lines, first
            first += len(raw)


def _key(value: Any, field: str, src: str, lineno: int) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise LoaderError(src, f"missing '{field}'", record=f"line {lineno}", fix=f"give every record a '{field}'")
    raise LoaderError(
        src, f"'{field}' must be a non-empty string, got {value!r}", record=f"line {lineno}", fix="use string ids"
    )


def _object(obj: Any, src: str, lineno: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise LoaderError(
            src, f"expected a JSON object, got {type(obj).__name__}", record=f"line {lineno}", fix="one object per line"
        )
    return obj


def _node(raw: Any, src: str, lineno: int) -> Node:
    obj = _object(raw, src, lineno)
    key = _key(obj.get("key"), "key", src, lineno)
    label = obj.get("label")
    if not isinstance(label, str) or not label:
        raise LoaderError(
            src,
            f"node {key!r} has no 'label'" if label is None else f"node {key!r} label must be a string, got {label!r}",
            record=f"line {lineno}",
            fix="give every node a non-empty string 'label'",
        )
    nested = obj.get("props")
    if nested is not None and not isinstance(nested, dict):
        raise LoaderError(
            src, f"node {key!r} 'props' must be an object", record=f"line {lineno}", fix='use "props": {}'
        )
    if len(obj) == 2 + (1 if "props" in obj else 0):
        props = nested if nested is not None else {}
    else:
        props = {k: v for k, v in obj.items() if k not in ("key", "label", "props")}
        if nested:
            props.update(nested)
    return Node(key, label, props)


def _edge(raw: Any, src: str, lineno: int) -> Edge:
    obj = _object(raw, src, lineno)
    s = _key(obj.get("src"), "src", src, lineno)
    d = _key(obj.get("dst"), "dst", src, lineno)
    rel = obj.get("rel")
    if not isinstance(rel, str) or not rel:
        raise LoaderError(
            src, f"edge {s!r}->{d!r} has no 'rel'", record=f"line {lineno}", fix="give every edge a 'rel'"
        )
    problem = name_problem(rel)
    if problem:
        raise LoaderError(src, f"edge {s!r}->{d!r} relation {rel!r} {problem}", record=f"line {lineno}", fix=NAME_FIX)
    props = obj.get("props")
    if props is None:
        props = NO_PROPS
    elif not isinstance(props, dict):
        raise LoaderError(src, f"edge {s!r}->{d!r} 'props' must be an object", record=f"line {lineno}", fix="use {}")
    return Edge(s, rel, d, props)


def _schema(path: Path) -> tuple[str | None, list[NodeType]]:
    src = str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LoaderError(src, f"invalid JSON ({exc})", fix="write a JSON object {name, node_types}") from exc
    if not isinstance(data, dict):
        raise LoaderError(src, "expected a JSON object", fix='write {"name": ..., "node_types": [...]}')
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise LoaderError(src, f"'name' must be a string, got {name!r}", fix="use a string name")
    raw_types = data.get("node_types", [])
    if not isinstance(raw_types, list):
        raise LoaderError(src, "'node_types' must be a list", fix="list NodeType objects")
    types: list[NodeType] = []
    for i, raw in enumerate(raw_types):
        try:
            types.append(NodeType.model_validate(raw))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise LoaderError(
                src,
                f"node_types[{i}] is invalid: {where}: {first['msg']}",
                record=f"node_types[{i}]",
                fix="each node type needs at least a 'label'; see graphs.skb.model.NodeType",
            ) from exc
    return name, types


def _profile(path: Path) -> Profile | None:
    """The domain profile stored in schema.json by ``write_jsonl`` (None when there is none)."""
    raw = json.loads(path.read_text(encoding="utf-8")).get("profile")
    return None if raw is None else parse_profile(raw, f"{path} (profile)")


def _load_nodes(skb: SKB, path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> None:
    src = str(path)
    nodes = skb.nodes
    for objs, lines, first in _parse(path, max_line_bytes):
        for i, obj in enumerate(objs):
            lineno = lines[i] if lines is not None else first + i
            node = _node(obj, src, lineno)
            if node.key in nodes:  # SKB.add_node also refuses, but cannot name the first line
                raise LoaderError(
                    src,
                    f"duplicate node key {node.key!r} (labels {nodes[node.key].label!r} and {node.label!r})",
                    record=f"line {lineno}",
                    fix="node keys must be unique across all labels; prefix them by type if needed",
                )
            skb.add_node(node, source=src, record=f"line {lineno}")


def _load_edges(skb: SKB, path: Path, nodes_name: str, max_line_bytes: int = MAX_LINE_BYTES) -> None:
    """Append the file's edges to ``skb``.

    Each edge refers to its endpoints by the node's own key string and to its relation by one shared
    string per relation: a parsed record brings fresh copies of both, which at ten million edges
    cost over a gigabyte of duplicate strings."""
    src = str(path)
    nodes = skb.nodes
    node_of = nodes.get
    add = skb.add_edge
    rels: dict[str, str] = {}  # relation names already checked by _edge (the first edge of each goes there)
    for objs, lines, first in _parse(path, max_line_bytes):
        for i, obj in enumerate(objs):
            # fast path for the well-formed common case; anything odd goes through _edge
            if type(obj) is dict:
                s, r, d, p = obj.get("src"), obj.get("rel"), obj.get("dst"), obj.get("props")
                if type(s) is str and type(d) is str and type(r) is str:
                    rel, sn, dn = rels.get(r), node_of(s), node_of(d)
                    if rel is not None and sn is not None and dn is not None:
                        if p is None or (type(p) is dict and not p):  # one shared map for no properties
                            add(Edge(sn.key, rel, dn.key, NO_PROPS))
                            continue
                        if type(p) is dict:
                            add(Edge(sn.key, rel, dn.key, p))
                            continue
            lineno = lines[i] if lines is not None else first + i
            edge = _edge(obj, src, lineno)
            for end in (edge.src, edge.dst):
                if end not in nodes:
                    raise LoaderError(
                        src,
                        f"edge {edge.src!r} -[{edge.rel}]-> {edge.dst!r} refers to unknown node {end!r}",
                        record=f"line {lineno}",
                        fix=f"add node {end!r} to {nodes_name} or remove the edge",
                    )
            edge.rel = rels.setdefault(edge.rel, edge.rel)
            edge.src, edge.dst = nodes[edge.src].key, nodes[edge.dst].key
            add(edge)
        del objs


def load_jsonl(directory: Path, max_line_bytes: int = MAX_LINE_BYTES) -> SKB:
    """Load and validate an SKB; every error names the file, the line and the fix. A line over
    ``max_line_bytes`` is refused before it is read whole."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LoaderError(str(directory), "directory not found", fix=f"pass a directory holding {NODES} and {EDGES}")
    nodes_path = _pick(directory, NODES, required=True)
    edges_path = _pick(directory, EDGES, required=False)
    assert nodes_path is not None
    schema_path = directory / SCHEMA
    name, types = _schema(schema_path) if schema_path.is_file() else (None, [])
    skb = SKB(name or directory.name, types)
    if schema_path.is_file():
        skb.profile = _profile(schema_path)

    # Creating ~10^6 small objects triggers the cyclic GC over and over; nothing built
    # here is cyclic, so pausing it roughly halves the load time.
    with paused_gc():
        _load_nodes(skb, nodes_path, max_line_bytes)
        if edges_path is not None:
            _load_edges(skb, edges_path, nodes_path.name, max_line_bytes)
    return skb


# -- writing ---------------------------------------------------------------------


def _encode(path_base: str, lines: Iterator[bytes], gzip: bool) -> tuple[str, bytes]:
    """The file's name and bytes. Lines are joined (and compressed) a batch at a time: joining all of
    them at once would hold every line as its own bytes object and the joined text together, over a
    gigabyte at ten million edges, where the compressed result is a tenth of the text."""
    out = io.BytesIO()
    # mtime=0: identical content gives identical bytes, so manifest checksums are stable
    sink: Any = gzip_mod.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=GZIP_LEVEL, mtime=0) \
        if gzip else out
    batch: list[bytes] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= 65536:
            sink.write(b"".join(batch))
            batch.clear()
    sink.write(b"".join(batch))
    if gzip:
        sink.close()
    return (f"{path_base}.gz" if gzip else path_base), out.getvalue()


def schema_of(skb: SKB) -> dict[str, Any]:
    """What ``schema.json`` holds: the name, the node types and the profile (where it is not the default)."""
    schema: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "name": skb.name,
        "node_types": [t.model_dump(mode="json") for t in skb.node_types.values()],
    }
    profile = getattr(skb, "profile", None)
    if profile is not None and not is_default(profile):  # the domain profile travels with the SKB
        schema["profile"] = profile.model_dump(mode="json")
    return schema


def record_line(obj: Any) -> bytes:
    """One record as the files hold it: equal records give equal bytes, whichever loader made them."""
    return _dumps_line(obj)


def node_line(node: Node) -> bytes:
    """A node's line in the files: the nested form."""
    return _dumps_line({"key": node.key, "label": node.label, "props": node.props})


def edge_line(edge: Edge) -> bytes:
    """An edge's line in the files: empty props are omitted."""
    obj: dict[str, Any] = {"src": edge.src, "rel": edge.rel, "dst": edge.dst}
    if edge.props:
        obj["props"] = edge.props
    return _dumps_line(obj)


def record_lines(directory: Path, base: str) -> list[bytes] | None:
    """The lines of ``base`` (``NODES`` or ``EDGES``, plain or gzipped) as written, one per record, without their
    newlines; None where the file is absent."""
    path = _pick(Path(directory), base, required=False)
    if path is None:
        return None
    with _open_lines(path) as fh:
        data = fh.read()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def write_jsonl(skb: SKB, directory: Path, gzip: bool = True, *,
                lines: tuple[Iterable[bytes], Iterable[bytes]] | None = None) -> None:
    """Write nodes, edges and schema, each file atomically; removes a stale other-variant file.

    Nodes are written in the nested form; edges keep their order; empty props are omitted. ``lines``: the node
    and edge lines (``record_line`` of each record, newline included) where the caller has them already
    (``graphs.update`` takes an unchanged record's from the parent generation's files).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def node_lines() -> Iterator[bytes]:
        for node in skb.nodes.values():
            yield node_line(node)

    def edge_lines() -> Iterator[bytes]:
        for edge in skb.edges:
            yield edge_line(edge)

    schema = schema_of(skb)
    try:
        made = lines if lines is not None else (node_lines(), edge_lines())
        for base, records in ((NODES, made[0]), (EDGES, made[1])):
            fname, data = _encode(base, iter(records), gzip)
            atomic_write_bytes(directory / fname, data)
            stale = directory / (base if gzip else f"{base}.gz")
            if stale.exists():
                stale.unlink()
        atomic_write_bytes(directory / SCHEMA, (json.dumps(schema, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise LoaderError(
            str(directory), f"a property value is not JSON-serialisable ({exc})", fix="use str/int/float/bool/list/dict"
        ) from exc
