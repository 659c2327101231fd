"""Load a STaRK knowledge base (PrimeKG, MAG, Amazon) from its processed directory.

The layout is what ``stark_qa.tools.io.save_files`` writes (e.g. ``<root>/prime/processed/``
or Amazon's ``processed/cache/brand-category-color/``): dicts are pickled (``*.pkl``),
tensors saved with ``torch.save`` (``*.pt``):

- ``node_info.pkl``: ``{node_id: {field: value}}``; PrimeKG has ``id, type, name, source,
  details{...}``, MAG papers ``title, abstract, ...``, authors ``DisplayName``, Amazon
  products ``title, feature, description, ...`` and ``brand_name``/``color_name``/...
- ``node_types.pt`` (LongTensor N), ``edge_index.pt`` (LongTensor 2 x E),
  ``edge_types.pt`` (LongTensor E).
- ``node_type_dict`` / ``edge_type_dict`` (``{type_id: name}``) as ``.pkl`` or ``.pt``. MAG
  keeps them in code, not on disk: pass them as arguments then. A missing
  ``node_type_dict`` is rebuilt from the nodes' ``type`` field when present.

Node keys are ``str(node_id)`` so STaRK's integer ``answer_ids`` map to keys by ``str()``.
Labels become CamelCase (``gene/protein`` -> ``GeneProtein``) and relations UPPER_SNAKE
(``associated with`` -> ``ASSOCIATED_WITH``; MAG's ``author___writes___paper`` -> ``WRITES``)
so Cypher can name them without backticks; the original names are kept in each
NodeType description. Edges are taken as stored (STaRK makes its graph undirected at
runtime; PrimeKG already stores both directions).

Security: a pickle can run arbitrary code while it loads. By default ``*.pkl`` files are read
by a data-only unpickler that refuses every import (plain dicts, lists, strings and numbers
load; anything needing a class or function, numpy scalars included, is refused with a message
naming it); ``trust_pickle=True`` (``skb index --trust-pickle``) allows full pickle for files
from a trusted source (e.g. STaRK's own release). Where both ``X.pt`` and ``X.pkl`` exist the
``.pt`` is read, with ``torch.load(weights_only=True)``, which never runs code.
"""

from __future__ import annotations

import math
import pickle
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphs.errors import LoaderError
from graphs.heap import paused_gc
from graphs.skb.model import SKB, Edge, Node, NodeType

NAME_FIELDS = ("name", "title", "DisplayName")
MAX_TEXT_FIELDS = 6
# Fields that identify rather than describe (ids, provenance, name aliases such as
# PrimeKG's mondo_name): never part of a node's text.
_ID_FIELD = re.compile(r"(^|_)(id|ids|source|name)$", re.IGNORECASE)


def _label_name(raw: str) -> str:
    words = [w for w in re.split(r"[^0-9A-Za-z]+", raw) if w]
    label = "".join(w[:1].upper() + w[1:] for w in words)
    if not label:
        return "Node"
    return label if not label[0].isdigit() else f"N{label}"


def _rel_name(raw: str) -> str:
    parts = raw.split("___")
    if len(parts) == 3:  # MAG: <src type>___<relation>___<dst type>
        raw = parts[1]
    name = re.sub(r"[^0-9A-Za-z]+", "_", raw).strip("_").upper()
    if not name:
        return "RELATED_TO"
    return name if not name[0].isdigit() else f"R_{name}"


def _prop_name(raw: str) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", raw).strip("_")
    return name or "field"


def _simple(value: Any) -> Any:
    """A value a graph store can hold (str, number, bool, list of str/numbers), else None."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, str):
        text = value.strip()
        return text if text and text.lower() != "nan" else None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, (list, tuple)):
        items = [_simple(v) for v in value]
        kept = [v for v in items if v is not None and not isinstance(v, list)]
        if not kept or len(kept) != len(items):
            return None  # nested or mixed structures (reviews, interpro records) are skipped
        if all(isinstance(v, str) for v in kept) or all(isinstance(v, (int, float)) for v in kept):
            return kept
        return None
    return None


class _DataOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain data only: every class or function lookup (how a pickle runs code) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _NeedsImport(f"{module}.{name}")


class _NeedsImport(pickle.UnpicklingError):
    """A pickle wanted to import ``module.name``: only a trusted file may."""


def _find(directory: Path, stem: str, required: bool) -> Path | None:
    for ext in (".pt", ".pkl"):  # .pt first: torch.load(weights_only=True) never runs code
        path = directory / f"{stem}{ext}"
        if path.is_file():
            return path
    if required:
        raise LoaderError(
            str(directory / f"{stem}.pkl|.pt"),
            "file not found",
            fix=f"pass STaRK's processed directory (holding node_info.pkl, node_types.pt, edge_index.pt, "
            f"edge_types.pt) or supply {stem} as an argument",
        )
    return None


def _load_any(path: Path, trust_pickle: bool = False) -> Any:
    try:
        if path.suffix == ".pkl":
            with path.open("rb") as fh:
                if trust_pickle:
                    return pickle.load(fh)  # the caller vouched for the source; see module docstring
                return _DataOnlyUnpickler(fh).load()
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except _NeedsImport as exc:
        raise LoaderError(
            str(path),
            f"this pickle imports {exc} while loading, and a pickle can run any code that way",
            fix="if the file comes from a trusted source (e.g. STaRK's release) pass --trust-pickle "
            "(load_stark(..., trust_pickle=True)), or convert it to a .pt with torch.save",
        ) from exc
    except Exception as exc:  # pickle/torch raise many unrelated types for corrupt files
        raise LoaderError(str(path), f"cannot read ({type(exc).__name__}: {exc})", fix="re-extract the file") from exc


def _int_list(value: Any, path: Path, what: str, dims: int) -> list[Any]:
    """A tensor or array as nested Python int lists, checking its rank."""
    shape = tuple(getattr(value, "shape", ()))
    if len(shape) != dims:
        raise LoaderError(
            str(path), f"{what} must have {dims} dimension(s), found shape {shape}", fix="re-extract the file"
        )
    dtype = str(getattr(value, "dtype", ""))
    if "float" in dtype:
        value = value.long()  # Amazon's unprocessed node_types are torch.zeros (float)
    elif "int" not in dtype:
        raise LoaderError(
            str(path),
            f"{what} must be an integer tensor, found dtype {dtype or type(value)}",
            fix="re-extract the file",
        )
    result = value.tolist()
    assert isinstance(result, list)
    return result


def _type_dict(value: Any, path: str) -> dict[int, str]:
    if not isinstance(value, Mapping):
        raise LoaderError(
            path, f"expected a dict {{type_id: name}}, got {type(value).__name__}", fix="re-extract the file"
        )
    out: dict[int, str] = {}
    for k, v in value.items():
        try:
            out[int(k)] = str(v)
        except (TypeError, ValueError) as exc:
            raise LoaderError(path, f"type id {k!r} is not an integer", record=repr(k), fix="use integer ids") from exc
    return out


def load_stark(
    directory: Path,
    *,
    name: str | None = None,
    node_type_dict: Mapping[int, str] | None = None,
    edge_type_dict: Mapping[int, str] | None = None,
    trust_pickle: bool = False,
) -> SKB:
    """Load a STaRK processed directory; type dicts given here override the files.

    ``*.pkl`` files are read as plain data unless ``trust_pickle`` (full pickle: it can run code,
    so only for files from a trusted source); see the module docstring.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise LoaderError(str(directory), "directory not found", fix="pass STaRK's processed directory")
    with paused_gc():
        return _load(directory, name, node_type_dict, edge_type_dict, trust_pickle)


def _load(
    directory: Path,
    name: str | None,
    node_type_dict: Mapping[int, str] | None,
    edge_type_dict: Mapping[int, str] | None,
    trust_pickle: bool,
) -> SKB:
    info_path = _find(directory, "node_info", True)
    assert info_path is not None
    paths = {stem: _find(directory, stem, True) for stem in ("node_types", "edge_index", "edge_types")}
    node_info = _load_any(info_path, trust_pickle)
    if not isinstance(node_info, Mapping):
        raise LoaderError(
            str(info_path),
            f"expected a dict {{node_id: dict}}, got {type(node_info).__name__}",
            fix="pass STaRK's node_info.pkl as written by stark_qa save_files",
        )
    assert all(p is not None for p in paths.values())
    nt_path, ei_path, et_path = paths["node_types"], paths["edge_index"], paths["edge_types"]
    assert nt_path is not None and ei_path is not None and et_path is not None
    node_types = _int_list(_load_any(nt_path, trust_pickle), nt_path, "node_types", 1)
    edge_index = _int_list(_load_any(ei_path, trust_pickle), ei_path, "edge_index", 2)
    edge_types = _int_list(_load_any(et_path, trust_pickle), et_path, "edge_types", 1)

    n = len(node_types)
    if len(node_info) != n:
        raise LoaderError(
            str(info_path),
            f"{len(node_info)} nodes in node_info but {n} entries in {nt_path.name}",
            fix="both files must come from the same STaRK release",
        )
    info_src = str(info_path)
    infos: list[Mapping[str, Any]] = [{}] * n
    for raw_id, fields in node_info.items():
        try:
            nid = int(raw_id)
        except (TypeError, ValueError) as exc:
            raise LoaderError(
                info_src, f"node id {raw_id!r} is not an integer", record=repr(raw_id), fix="node ids must be 0..N-1"
            ) from exc
        if not 0 <= nid < n:
            raise LoaderError(info_src, f"node id {nid} outside 0..{n - 1}", record=nid, fix="ids must be 0..N-1")
        if not isinstance(fields, Mapping):
            raise LoaderError(
                info_src,
                f"node {nid} info is a {type(fields).__name__}, not a dict",
                record=nid,
                fix="each node_info value must be a dict of fields",
            )
        infos[nid] = fields

    # type dictionaries
    if node_type_dict is not None:
        ntd = _type_dict(node_type_dict, "node_type_dict argument")
    else:
        ntd_path = _find(directory, "node_type_dict", False)
        if ntd_path is not None:
            ntd = _type_dict(_load_any(ntd_path, trust_pickle), str(ntd_path))
        else:
            ntd = {}
            for nid, tid in enumerate(node_types):
                t = infos[nid].get("type")
                if isinstance(t, str):
                    ntd.setdefault(tid, t)
    if edge_type_dict is not None:
        etd = _type_dict(edge_type_dict, "edge_type_dict argument")
    else:
        etd_path = _find(directory, "edge_type_dict", bool(edge_types))
        etd = _type_dict(_load_any(etd_path, trust_pickle), str(etd_path)) if etd_path is not None else {}

    labels: dict[int, str] = {}
    for tid, raw in sorted(ntd.items()):
        lname = _label_name(raw)
        labels[tid] = f"{lname}{tid}" if lname in labels.values() else lname
    rels = {tid: _rel_name(raw) for tid, raw in etd.items()}

    default_name = directory.parent.name if directory.name == "processed" else directory.name
    skb = SKB(name or default_name or "stark")
    name_source: dict[str, Counter[str]] = {}
    coverage: dict[str, Counter[str]] = {}
    for nid, tid in enumerate(node_types):
        label = labels.get(tid)
        if label is None:
            raise LoaderError(
                str(nt_path),
                f"node {nid} has type id {tid}, unknown to node_type_dict {dict(sorted(ntd.items()))}",
                record=nid,
                fix="pass the matching node_type_dict",
            )
        props, used = _props(infos[nid], ntd[tid])
        name_source.setdefault(label, Counter())[used] += 1
        cov = coverage.setdefault(label, Counter())
        for k, v in props.items():
            if isinstance(v, str) or (isinstance(v, list) and isinstance(v[0], str)):
                cov[k] += 1
        if "name" not in props:
            props = {"name": str(nid), **props}
        skb.add_node(Node(str(nid), label, props), source=info_src, record=nid)

    if len(edge_index) != 2:
        raise LoaderError(
            str(ei_path), f"edge_index must have shape 2 x E, found {len(edge_index)} rows", fix="re-extract the file"
        )
    srcs, dsts = edge_index
    if len(srcs) != len(edge_types):
        raise LoaderError(
            str(et_path),
            f"{len(edge_types)} edge types but {len(srcs)} edges in {ei_path.name}",
            fix="both files must come from the same STaRK release",
        )
    ei_src = str(ei_path)
    add = skb.add_edge
    keys = [str(i) for i in range(n)]
    for i, (s, d, t) in enumerate(zip(srcs, dsts, edge_types)):
        if not (0 <= s < n and 0 <= d < n):
            raise LoaderError(
                ei_src, f"edge {i} ({s} -> {d}) refers to a node outside 0..{n - 1}", record=i, fix="re-extract"
            )
        rel = rels.get(t)
        if rel is None:
            raise LoaderError(
                str(et_path),
                f"edge {i} has type id {t}, unknown to edge_type_dict {dict(sorted(etd.items()))}",
                record=i,
                fix="pass the matching edge_type_dict",
            )
        add(Edge(keys[s], rel, keys[d]))

    for tid, label in labels.items():
        if label in coverage:
            skb.node_types[label] = _node_type(label, ntd[tid], coverage[label], name_source[label])
    return skb


def _props(info: Mapping[str, Any], type_name: str) -> tuple[dict[str, Any], str]:
    """Flattened props and the field the name came from ('' when none)."""
    props: dict[str, Any] = {}
    for k, v in info.items():
        if k == "type" or k == "details":
            continue
        value = _simple(v)
        if value is not None:
            if k == "id":  # PrimeKG mixes int and str ids across types; one type per property
                props["source_id"] = str(value)
            else:
                props[_prop_name(str(k))] = value
    details = info.get("details")
    if isinstance(details, Mapping):
        for k, v in details.items():
            value = _simple(v)
            if value is None:
                continue
            pname = _prop_name(str(k))
            props[f"details_{pname}" if pname in props else pname] = value
    candidates = [*NAME_FIELDS, f"{_prop_name(type_name)}_name"]
    used = next((f for f in candidates if isinstance(props.get(f), str)), "")
    if not used:
        used = next((f for f, v in props.items() if f.endswith("_name") and isinstance(v, str)), "")
    if used and used != "name":
        props = {"name": props[used], **{k: v for k, v in props.items() if k != "name"}}
    return props, used


def _node_type(label: str, type_name: str, coverage: Counter[str], name_source: Counter[str]) -> NodeType:
    """Text fields: the name plus the descriptive text fields most nodes of this label have."""
    skip = {"name", *name_source}
    fields = [f for f, _ in coverage.most_common() if f not in skip and not _ID_FIELD.search(f)]
    return NodeType(
        label=label,
        description=f"STaRK node type '{type_name}'",
        text_fields=["name", *fields[:MAX_TEXT_FIELDS]],
    )
