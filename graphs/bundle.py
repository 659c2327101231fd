"""The runtime handle on an index directory: SKB, indexes, embedder and store, opened once.

Tools, the agent, SAGE expansion and the eval harness all take an IndexBundle so that
the expensive parts (SKB in memory, model weights, server process) load once and are
shared across questions and threads.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel

from graphs.bundle_load import (
    _check_artifacts,
    _check_graph,
    _dir_identity,
    _load_similarity,
    _load_skb,
    _manifest_stamp,
    _Parts,
    _share_keys,
)
from graphs.bundle_source import SourceWatch, live_source
from graphs.errors import ConfigError, IndexNotFoundError, StageMissingError
from graphs.heap import give_back_freed_memory
from graphs.loaders import DATASETS
from graphs.skb.model import SKB, GraphSchema, Node

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from graphs.embedding.embedder import Embedder
    from graphs.index.bm25 import BM25Index
    from graphs.index.hnsw import HNSWIndex
    from graphs.manifest import Manifest
    from graphs.store.base import GraphStore

SearchMode = Literal["bm25", "vss", "hybrid"]
FusionMethod = Literal["minmax", "rrf", "dice"]
#: Seconds between two checks that a live source database (``--dataset neo4j``) is still the one indexed.
SOURCE_CHECK_INTERVAL_S = 30.0
#: Node texts whose content words a bundle keeps for Dice fusion (then the cache starts over).
DICE_WORDS_CACHE = 100_000


class SearchHit(BaseModel):
    key: str
    label: str
    name: str
    score: float
    source: str


_PINNED: contextvars.ContextVar[dict[int, _Parts] | None] = contextvars.ContextVar("skb_pinned_parts", default=None)
"""The parts each bundle serves inside ``IndexBundle.pinned()``, keyed by ``id(bundle)``.

A context variable rather than a thread-local: LangChain/LangGraph executors copy the context into
their worker threads, so a question's concurrent tool calls see the same pinned build."""


class IndexBundle:
    """Open with `IndexBundle.open(dir)`; thread-safe for concurrent reads.

    A rebuild swaps a new index into place while processes (an MCP server, a notebook) hold the old
    one open. Every access to ``manifest``, ``skb``, ``hnsw``, ``bm25``, ``store`` and ``embedder``
    first compares the manifest file's identity (one ``stat``) with the one loaded; when a rebuild
    replaced it (a new ``generation``), all parts are reloaded together and the derived caches and
    the store connection dropped, so no call mixes the new graph with the old SKB or vectors. If the
    new index cannot be opened, every access raises its error (naming the rebuild command) rather
    than serving the old parts beside the new graph.
    """

    _dice_words: tuple[object, dict[str, frozenset[str]]] | None = None
    """Dice fusion's content words of node texts, for the SKB object they were computed from."""

    def __init__(
        self,
        index_dir: Path,
        manifest: Manifest,
        skb: SKB,
        hnsw: HNSWIndex,
        bm25: BM25Index,
        store_kind: str | None = None,
        *,
        stamp: tuple[int, ...] | None = None,
        verify: bool = True,
    ) -> None:
        self.index_dir = index_dir
        self._manifest_path = os.path.join(index_dir, "manifest.json")
        self._parts: _Parts | None = _Parts(manifest, skb, hnsw, bm25, stamp if stamp is not None else _manifest_stamp(index_dir))
        """None after ``close``: the next access opens the index again."""
        self._store_arg = store_kind
        self._verify = verify
        self.store_kind = store_kind or str(manifest.extra.get("store", "falkordb"))
        self.reloads = 0
        """How many times a rebuild was detected and the parts reloaded."""
        self._embedder: Embedder | None = None
        self._store: GraphStore | None = None
        self._lock = threading.RLock()
        self._lexicon: dict[str, list[str]] | None = None
        self._similar: dict[str, list[tuple[str, float]]] | None = None
        self._schema: GraphSchema | None = None
        self._source = SourceWatch()
        self._on_close: dict[str, Callable[[], None]] = {}

    # -- the parts of the current build ----------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        return self._current().manifest

    @property
    def skb(self) -> SKB:
        return self._current().skb

    @property
    def hnsw(self) -> HNSWIndex:
        return self._current().hnsw

    @property
    def bm25(self) -> BM25Index:
        return self._current().bm25

    @property
    def missing(self) -> list[str]:
        """Parts of a staged index not built yet (``IndexConfig.stage``): ``[]`` for a complete index.

        Searches and the agent answer from what exists (a missing ``vectors`` part is an empty
        HNSW index: dense lists are empty, so rankings are BM25's and the graph's); callers say so
        with ``missing_note``. A complete build swapped in later is picked up like any rebuild."""
        value = self.manifest.extra.get("missing") or []
        return [str(part) for part in value] if isinstance(value, list) else []

    def missing_note(self) -> str | None:
        """One line naming what a partial index lacks and how to complete it; None when complete."""
        missing = self.missing
        if not missing:
            return None
        from graphs.build import LATER_STAGES

        parts = "; ".join(LATER_STAGES.get(part, part) for part in missing)
        return (f"partial index (stage core): not built yet -- {parts}; answers use the graph, its names and BM25. "
                f"Complete it with the same `skb index` command without --stage core")

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Serve one build, checked once, for everything run inside (one question).

        Without a pin every access stats the manifest (tens of thousands of ``stat`` calls per
        question set); inside, the build is checked on entry and then held, so a question never
        mixes two generations even if a rebuild lands midway -- the next question sees the new one.
        Nested pins of the same bundle keep the outer one.
        """
        held = _PINNED.get()
        if held is not None and id(self) in held:
            yield
            return
        parts = self._current()
        if self._live_source(parts.manifest) is not None:  # no further stat of the manifest for other indexes
            self.check_source()  # a question on a live database that changed since the build fails here, by name
        token = _PINNED.set({**(held or {}), id(self): parts})
        try:
            yield
        finally:
            _PINNED.reset(token)

    def replaced(self) -> bool:
        """Whether the build this caller reads (the pinned one inside ``pinned()``) is no longer the one on disk.

        Why: a rebuild or update swaps the new build in and then stops the old build's graph server, so a call
        still reading the old one can fail on a closed connection before any caller has followed the swap; a
        server runs such a call again rather than return that failure."""
        held = _PINNED.get()
        parts = (held or {}).get(id(self)) or self._parts
        return parts is None or _manifest_stamp(self.index_dir) != parts.stamp

    def _current(self) -> _Parts:
        held = _PINNED.get()
        if held is not None:
            pinned = held.get(id(self))
            if pinned is not None:
                if self._parts is not None and pinned.skb is not self._parts.skb:  # another caller followed a rebuild
                    from graphs.errors import IndexMismatchError

                    raise IndexMismatchError(
                        f"the index at {self.index_dir} was rebuilt while this question ran; ask it again"
                    )
                return pinned
        parts = self._parts
        if parts is None:  # closed: open again
            return self._reload(None)
        try:
            st = os.stat(self._manifest_path)
        except OSError:
            return self._follow(parts)
        if (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size) == parts.stamp:
            return parts
        return self._follow(parts)

    def _follow(self, parts: _Parts) -> _Parts:
        """``_reload``; when it replaced the build, one garbage collection once nothing here refers to the old
        parts: objects built on a graph (agents, linkers, callbacks) can form reference cycles, and the
        replaced build's mapped files -- descriptors and disk space -- are released only when those are
        collected. Once per rebuild; at a million nodes a full collection is under 100 ms."""
        before = self.reloads
        fresh = self._reload(parts)
        if self.reloads != before:
            del parts
            gc.collect()
            give_back_freed_memory()
        return fresh

    def _reload(self, seen: _Parts | None) -> _Parts:
        """Follow a rebuild: all parts of the new build at once, or its error on every access. The replaced
        build's parts (and the files they map) are let go here: nothing of this bundle refers to them after."""
        from graphs.errors import IndexNotFoundError
        from graphs.manifest import Manifest, rebuild_hint

        with self._lock:
            if self._parts is not seen and self._parts is not None:
                return self._parts  # another thread reloaded meanwhile
            stamp = _manifest_stamp(self.index_dir)
            if seen is not None and stamp == seen.stamp:
                return seen
            if stamp is None:
                raise IndexNotFoundError(
                    f"the index at {self.index_dir} was removed while this process served it -- "
                    f"{rebuild_hint(self.index_dir)}, then retry"
                )
            manifest = Manifest.read(self.index_dir)
            if seen is not None and manifest.generation and manifest.generation == seen.manifest.generation:
                self._parts = _Parts(seen.manifest, seen.skb, seen.hnsw, seen.bm25, stamp)  # same build, touched
                return self._parts
            fresh = type(self).open(self.index_dir, store=self._store_arg, verify=self._verify)
            old_store, old_model = self._store, seen.manifest.embedder_model if seen is not None else None
            assert fresh._parts is not None
            self._parts = fresh._parts
            self._dice_words = None
            self.store_kind = fresh.store_kind
            self._store = None
            self._source.error = None
            self._lexicon = self._similar = None
            self._schema = None
            if self._embedder is not None and fresh._parts.manifest.embedder_model != old_model:  # (None: closed)
                self._embedder = None
            self.reloads += seen is not None
            if old_store is not None:
                with contextlib.suppress(Exception):  # its server was stopped by the rebuild already
                    old_store.close()
            return self._parts

    @classmethod
    def open(cls, index_dir: Path | str, *, store: str | None = None, verify: bool = True) -> IndexBundle:
        """Load the index; retried when a rebuild swapped the directory while we were reading it
        (the manifest of one build and files of the other would otherwise fail their checksums)."""
        from graphs.errors import IndexError_

        index_dir = Path(index_dir)
        for attempt in range(3):
            before = _dir_identity(index_dir)
            try:
                return cls._open_once(index_dir, store=store, verify=verify)
            except (IndexError_, OSError, ValueError):
                if attempt == 2 or before is None or _dir_identity(index_dir) == before:
                    raise  # a real problem, not a swap under our feet
        raise AssertionError("unreachable")  # pragma: no cover

    @classmethod
    def _open_once(cls, index_dir: Path, *, store: str | None, verify: bool) -> IndexBundle:
        from graphs.index.bm25 import BM25Index
        from graphs.index.hnsw import HNSWIndex
        from graphs.manifest import Manifest

        if not (index_dir / "manifest.json").exists():
            from graphs.index_dir import missing_index_message

            raise IndexNotFoundError(
                missing_index_message(index_dir, f"skb index --dataset <{'|'.join(DATASETS)}> --data PATH")
            )
        stamp = _manifest_stamp(index_dir)  # before reading: a swap after this is seen on the next access
        manifest = Manifest.read(index_dir)
        if verify:
            manifest.verify(index_dir)
        skb = _load_skb(index_dir, manifest)
        if "vectors" in (manifest.extra.get("missing") or []):
            hnsw = HNSWIndex.empty(manifest.embedder.dim, manifest.hnsw)  # a staged index before its vectors
        else:
            hnsw = HNSWIndex.load(index_dir / "hnsw")
        bm25 = BM25Index.load(index_dir / "bm25")
        _check_artifacts(index_dir, manifest, skb, hnsw, bm25)
        _share_keys(skb, hnsw, bm25)
        return cls(index_dir, manifest, skb, hnsw, bm25, store_kind=store, stamp=stamp, verify=verify)

    # -- lazily opened parts ------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        self._current()
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    from graphs.build import default_cache_dir
                    from graphs.embedding.embedder import get_embedder
                    from graphs.errors import IndexMismatchError

                    spec = str(self.manifest.extra.get("embedder_spec", "minilm"))
                    emb = get_embedder(spec, cache_dir=default_cache_dir(self.index_dir) / "emb", base_dir=self.index_dir)
                    if emb.model_name != self.manifest.embedder_model:
                        raise IndexMismatchError(
                            f"index {self.index_dir} was built with embedder {self.manifest.embedder_model!r} but "
                            f"{emb.model_name!r} is configured; rebuild with `skb index` or use the same model"
                        )
                    self._embedder = emb
        return self._embedder

    @property
    def store(self) -> GraphStore:
        self._current()
        if self._store is None:
            with self._lock:
                if self._store is None:
                    if self.store_kind == "none":
                        raise ConfigError(
                            f"index {self.index_dir} was built with --store none; rebuild with --store falkordb or neo4j"
                        )
                    from graphs.store import open_store

                    source = self._live_source()
                    if source is not None:
                        from graphs.loaders.neo4j_source import open_source_store

                        # the user's live database, checked against the state the build read
                        self._store = open_source_store(source, self.index_dir)
                        self._source.checked = time.monotonic()
                        return self._store
                    store = open_store(self.store_kind, self.index_dir)  # type: ignore[arg-type]
                    if self.store_kind == "falkordb":
                        _check_graph(store, self.manifest, self.index_dir)
                    self._store = store
        return self._store

    def _live_source(self, manifest: Manifest | None = None) -> dict[str, Any] | None:
        """The source record of an index that serves the user's live database (built with --dataset neo4j)."""
        return live_source(manifest or self.manifest, self.store_kind)

    def check_source(self, max_age_s: float = SOURCE_CHECK_INTERVAL_S, *, wait: bool = False) -> None:
        """For an index serving a live database: raise (IndexMismatchError, naming the rebuild command) when
        the database changed since the build; free for every other index.

        Checked when the store opens (the caller waits: a few count queries, milliseconds on Neo4j, which
        answers them from its count store; seconds on servers that scan). Later, once the last check is older
        than ``max_age_s``, the check runs again in a background thread so no question waits for it; a change
        it finds fails every following question until the database matches again or the index is rebuilt.
        ``wait=True`` runs a due check in the caller. The clock, thread and remembered mismatch are
        `graphs.bundle_source.SourceWatch`'s."""
        if self._live_source() is None:
            return
        if self._store is None:
            _ = self.store  # opening checks
            return
        self._source.check(self._recheck_source, max_age_s, wait)

    def _recheck_source(self) -> None:
        store, source = self._store, self._live_source()
        if store is None or source is None:
            return
        self._source.recheck(store, source, self.index_dir)

    # Derived caches are filled under the lock from the current parts: a reload (which takes the same
    # lock and clears them) can never leave one computed from the previous build in place.
    def schema(self) -> GraphSchema:
        """The SKB's schema from memory: identical to the store's, without a round trip."""
        self._current()
        schema = self._schema
        if schema is None:
            with self._lock:
                parts = self._current()
                if self._schema is None:
                    self._schema = parts.skb.schema()
                schema = self._schema
        return schema

    @property
    def lexicon(self) -> dict[str, list[str]]:
        """Lower-cased names and synonyms -> node keys (the entity linker normalises further)."""
        self._current()
        lexicon = self._lexicon
        if lexicon is None:
            with self._lock:
                skb = self._current().skb
                if self._lexicon is None:
                    table: dict[str, list[str]] = defaultdict(list)
                    for node in skb.nodes.values():
                        ntype = skb.node_types.get(node.label)
                        names = [node.name]
                        if ntype is not None and ntype.synonym_field:
                            syn = node.props.get(ntype.synonym_field) or []
                            names.extend(syn if isinstance(syn, list) else [syn])
                        for name in names:
                            table[str(name).strip().lower()].append(node.key)
                    self._lexicon = dict(table)
                lexicon = self._lexicon
        return lexicon

    def similarity_neighbors(self, key: str) -> list[tuple[str, float]]:
        """SAGE similarity edges of a node (empty when the index was built without them)."""
        from graphs.errors import IndexCorruptError

        self._current()
        similar = self._similar
        if similar is None:
            with self._lock:
                for attempt in range(2):
                    parts = self._current()
                    if self._similar is not None:
                        break
                    try:
                        expected = parts.manifest.counts.edges.get("IS_SIMILAR", 0)
                        self._similar = _load_similarity(self.index_dir / "sage", expected)
                    except IndexCorruptError:
                        if attempt == 1 or _manifest_stamp(self.index_dir) == parts.stamp:
                            raise  # really damaged, not a rebuild swapped in between
                similar = self._similar
                assert similar is not None
        return similar.get(key, [])

    def warm_up(self) -> threading.Thread:
        """Open the embedder and the graph store in a background thread; returns the (daemon) thread.

        Why: a cold ``skb ask`` spends about a second importing the agent (Python, holding the GIL)
        while starting the graph server and creating the ONNX session mostly wait on a child process
        or run native code; overlapping them takes that time off the start. A part that fails here is
        left unopened: the caller's own access raises the same error with its message.
        """

        def run() -> None:
            try:
                embedder = self.embedder
                getattr(embedder, "inner", embedder).embed_query("warm up")  # session and first-run buffers
            except Exception as exc:  # noqa: BLE001 - reported by the caller's own access
                _log.debug("warm-up: embedder not opened (%s)", exc)
            if self.store_kind != "none":
                try:
                    _ = self.store
                except Exception as exc:  # noqa: BLE001 - reported by the caller's own access
                    _log.debug("warm-up: graph store not opened (%s)", exc)

        thread = threading.Thread(target=run, name="skb-warm-up", daemon=True)
        thread.start()
        return thread

    def node(self, key: str) -> Node | None:
        return self.skb.nodes.get(key)

    # -- search --------------------------------------------------------------------------
    def search(
        self,
        text: str,
        mode: SearchMode = "hybrid",
        k: int = 20,
        label: str | None = None,
        weight: float = 0.5,
        fusion: FusionMethod = "minmax",
    ) -> list[SearchHit]:
        """Search node texts. ``fusion`` (hybrid mode only): ``minmax`` / ``rrf`` fuse the BM25 and
        dense lists (``graphs.index.hybrid.fuse``); ``dice`` ranks text passages and the one-hop triples of
        the best hits by Dice overlap with the text (``graphs.index.hybrid.dice_fuse``)."""
        from graphs.index.hybrid import fuse
        from graphs.text_safety import clean_text

        text = clean_text(text)  # lone surrogates make the embedder's tokenizer raise TypeError
        if label is not None and label not in self.skb.node_types:
            raise ConfigError(f"unknown node type {label!r}; choose one of {sorted(self.skb.node_types)}")
        if fusion not in ("minmax", "rrf", "dice"):
            raise ConfigError(f"unknown fusion {fusion!r}; use minmax, rrf or dice")
        if mode == "bm25":
            ranked = self.bm25.search(text, k, label=label)
        elif mode == "vss":
            if "vectors" in self.missing:
                raise StageMissingError(
                    f"the index at {self.index_dir} has no node vectors yet (built with --stage core), so dense "
                    "search cannot run; use --mode bm25 or hybrid (BM25 until the vectors exist), or complete the "
                    "index with the same `skb index` command without --stage core")
            ranked = self.hnsw.search(self.embedder.embed_query(text), k, label=label)
        elif mode == "hybrid" and fusion == "dice":
            ranked = self._dice_search(text, k, label, weight)
        elif mode == "hybrid":
            pool = max(k * 5, 100)
            ranked = fuse(
                self.bm25.search(text, pool, label=label),
                self.hnsw.search(self.embedder.embed_query(text), pool, label=label),
                weight=weight,
                method=fusion,  # type: ignore[arg-type]  # dice is handled above
            )[:k]
        else:
            raise ConfigError(f"unknown search mode {mode!r}; use bm25, vss or hybrid")
        return [self._hit(key, score, mode) for key, score in ranked]

    def _dice_search(self, text: str, k: int, label: str | None, weight: float) -> list[tuple[str, float]]:
        """Dice fusion (``graphs.index.hybrid.dice_search``) over the current build, with the content words
        of node texts kept per build: a reload brings a new SKB object, and with it an empty cache."""
        from graphs.index.hybrid import dice_search

        skb = self.skb
        query = self.embedder.embed_query(text)
        cached = self._dice_words
        if cached is None or cached[0] is not skb or len(cached[1]) > DICE_WORDS_CACHE:
            cached = self._dice_words = (skb, {})
        return dice_search(skb, self.bm25, self.hnsw, query, text, k, label, weight, cached[1])

    def _hit(self, key: str, score: float, source: str) -> SearchHit:
        node = self.skb.nodes[key]
        return SearchHit(key=key, label=node.label, name=node.name, score=float(score), source=source)

    def close(self) -> None:
        """Close the store connection and let go of the build's parts, so their mapped files (descriptors
        and disk space of a replaced build) are released once no question holds them; a later access
        opens the index again."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            self._parts = None
            self._dice_words = None
            self._lexicon = self._similar = None
            self._schema = None
            hooks, self._on_close = list(self._on_close.values()), {}
        for hook in hooks:  # outside the lock: a hook may take its own
            hook()

    def on_close(self, name: str, hook: Callable[[], None]) -> None:
        """Call ``hook`` at ``close`` (once; one hook per ``name``, a later one replaces it): a layer above that
        caches objects built on this bundle's build lets go of them, so ``close`` releases the build's files."""
        with self._lock:
            self._on_close[name] = hook

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


