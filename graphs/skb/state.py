"""Derived state stored at index time (``<index>/skb/state/``): the planner's statistics without a scan.

Why: the entity linker's lexicon and the ontology scoring matrices are pure functions of the SKB
(and of the code and domain profile that compute them), yet computing them scanned every node and
edge on each process start (seconds on HPO). ``skb index`` computes them once and stores them as
``<name>.json`` (small values and the digest) plus ``<name>.<array>.npy`` (memory-mapped arrays),
all listed in the manifest with their checksums.

Validity: each record carries a digest of the code that computed it and of the inputs besides
the SKB (the domain profile); a reader recomputes the digest and ignores a record that differs, so
changed code never reads state computed by the old one -- it computes as it would without the
artifact (slower, same answer). The producers (``PRECOMPUTERS``) live with the code that consumes
the state; this module only stores and finds records.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from graphs.errors import IndexCorruptError
from graphs.heap import table, untracked_meta
from graphs.manifest import atomic_write_bytes, atomic_write_json, fsync_dir, rebuild_hint
from graphs.skb.model import SKB, GraphSchema
from graphs.skb.profile import profile_for

STATE_DIR = "state"
_FORMAT = 1

#: Entry-point group of the producers ``skb index`` runs after the SKB is written; each takes
#: ``(skb, state_dir, schema)`` (``skb.schema()``, computed once per build) and writes its records with
#: ``write_state``. The agent registers its lexicon, definition and scoring producers here (pyproject),
#: so the graph layer never imports the agent.
PRECOMPUTERS_GROUP = "skb_agent.index_state"


def _loads(data: bytes) -> Any:
    try:
        import orjson

        return orjson.loads(data)
    except ImportError:  # orjson is optional (third-party): the stdlib parses the same JSON
        return json.loads(data)


def digest_of(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def state_dir_of(skb: SKB) -> Path | None:
    """Where ``skb``'s stored state is, or None (an SKB built in memory or loaded from JSON lines)."""
    directory = getattr(skb, "directory", None)
    if not isinstance(directory, Path):
        return None
    path = directory / STATE_DIR
    return path if path.is_dir() else None


def write_state(directory: Path, name: str, digest: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """One record: ``<name>.json`` with ``meta`` and ``digest``, one ``.npy`` per array."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for key, array in arrays.items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        atomic_write_bytes(directory / f"{name}.{key}.npy", buf.getvalue())
    record = {"format": _FORMAT, "digest": digest, "arrays": sorted(arrays), "meta": meta}
    atomic_write_json(directory / f"{name}.json", record, indent=None)
    fsync_dir(directory)


Record = tuple[dict[str, Any], dict[str, np.ndarray]]
_READ: weakref.WeakKeyDictionary[SKB, dict[tuple[str, str], Record | None]] = weakref.WeakKeyDictionary()
_READ_LOCK = threading.Lock()


def read_state(skb: SKB, name: str, digest: str) -> Record | None:
    """The record ``name`` of ``skb``'s index when it was computed under ``digest``; else None.

    Read once per SKB and digest. A record that exists but cannot be read is an error naming the
    rebuild command (the manifest's checksums were checked at open: this is damage, not an old format)."""
    with _READ_LOCK:
        per = _READ.setdefault(skb, {})
        if (name, digest) not in per:
            per[(name, digest)] = _read(skb, name, digest)
        return per[(name, digest)]


def _read(skb: SKB, name: str, digest: str) -> Record | None:
    directory = state_dir_of(skb)
    if directory is None:
        return None
    path = directory / f"{name}.json"
    if not path.is_file():
        return None
    try:
        record = _loads(path.read_bytes())
        if record.get("format") != _FORMAT or record.get("digest") != digest:
            return None
        arrays = {
            # ndarray views of the read-only maps: a np.memmap slice costs ten times a view's
            str(key): np.asarray(np.load(directory / f"{name}.{key}.npy", mmap_mode="r", allow_pickle=False))
            for key in record["arrays"]
        }
        meta = record["meta"]
        if not isinstance(meta, dict):
            raise TypeError("meta is not an object")
        meta = untracked_meta(meta)  # kept for the process: tables as tuples (graphs.heap)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        index_dir = directory.parent.parent
        raise IndexCorruptError(
            f"the stored state {path} cannot be read ({exc}) -- {rebuild_hint(index_dir)}"
        ) from exc
    return meta, arrays


T = TypeVar("T")


class PerSKB(Generic[T]):
    """A value derived from an SKB once per SKB object: its index's stored record when valid, else computed.

    Why: the linker's lexicon, its definition table and similar statistics are read on every question
    but cost seconds to compute; ``stored`` reads the record ``skb index`` wrote (None when missing or
    computed by other code), ``build`` computes it. Thread-safe; entries go with their SKB."""

    def __init__(self, stored: Callable[[SKB], T | None], build: Callable[[SKB], T]) -> None:
        self._stored, self._build = stored, build
        self._values: weakref.WeakKeyDictionary[SKB, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, skb: SKB) -> T:
        with self._lock:
            value = self._values.get(skb)
            if value is None:
                stored = self._stored(skb)
                value = self._values[skb] = stored if stored is not None else self._build(skb)
            return value

    def __contains__(self, skb: object) -> bool:
        return skb in self._values


def precompute(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Run every producer registered under ``PRECOMPUTERS_GROUP`` on ``skb`` (a build step), by name order.

    Without any (the project not installed as a package) the index has no stored records and the
    agent computes them when first needed: slower to start, same answers."""
    from importlib.metadata import entry_points

    schema = schema if schema is not None else skb.schema()
    for point in sorted(entry_points(group=PRECOMPUTERS_GROUP), key=lambda ep: ep.name):
        func: Callable[[SKB, Path, GraphSchema], None] = point.load()
        func(skb, state_dir, schema)


def write_tables(compact: SKB, skb_dir: Path) -> None:
    """The planner's statistics (every ``precompute`` producer) from the compact SKB written into ``skb_dir``: the
    same files as from the SKB it was written from (same seconds at a million nodes), with the graph's Python objects
    gone.
    Why: made beside those objects, the tables put a 1.9M-node, 39M-edge build process at 9 GB (where the embedded
    store is loaded by a process of its own, that process makes them: ``graphs.store.load_process``)."""
    precompute(compact, skb_dir / STATE_DIR, compact.schema())


def node_keys(skb: SKB) -> tuple[str, ...]:
    """The SKB's node keys in node order: the positions stored records refer to nodes by (the compact SKB's
    own tuple, not a copy)."""
    keys = getattr(skb, "node_keys", None)
    return table(keys()) if callable(keys) else tuple(skb.nodes)


def stored_record(skb: SKB, record: str, digest: Callable[[SKB], str]) -> Record | None:
    """``record``'s (meta, arrays) from ``skb``'s index when stored by the current code, else None."""
    if state_dir_of(skb) is None:
        return None
    return read_state(skb, record, digest(skb))


def profile_section_json(skb: SKB, section: str) -> str:
    """The profile section a record depends on (``linking`` for the lexicon, ``scoring`` for the models):
    a new knob elsewhere in the profile does not retire a valid record."""
    return str(getattr(profile_for(skb), section).model_dump_json())
