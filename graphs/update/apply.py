"""Applying a change set to a built index: a new generation, swapped in as a build swaps it.

Why through the build: the new generation is the index of the changed graph, built by the same stages
into a temp directory beside the index and exchanged atomically (``graphs.build``), so readers keep the
previous generation until the swap and pick the new one up after it (``IndexBundle`` reloads), and a
crash at any point leaves the previous generation serving (the next run removes the dead temp dir).
The stages re-read what they can from caches: every unchanged text's vector comes from the embedding
cache, so only the changed nodes and the neighbours whose text names them are embedded again.

The manifest of the new generation records its parent generation and the change set's sha256
(``extra["update"]``) and the digests of the change sets applied since the last full build
(``extra["applied_changes"]``): applying a set whose digest is there does nothing. Updates of one
index are serialized by a lock file beside it (``.<name>.update.lock``), which the kernel releases when
its holder dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from graphs.build import BuildSummary, IndexConfig, StageProgress, build_index
from graphs.errors import ConfigError, IndexCorruptError
from graphs.heap import paused_gc
from graphs.manifest import Manifest
from graphs.skb.model import SKB
from graphs.update.changes import ChangeSet, apply_changes, stale_texts

#: Change-set digests kept in the manifest (the newest last): a set applied again within them is a no-op.
HISTORY = 1000
#: How long an update waits for another update of the same index before it gives up.
LOCK_WAIT_S = 600.0


class UpdateSummary(BaseModel):
    """What ``update_index`` did (the CLI prints it; ``--json`` prints it as is)."""

    index_dir: str
    status: Literal["applied", "already applied", "unchanged"]
    changes_sha256: str
    parent: str
    generation: str
    applied: dict[str, int] = Field(default_factory=dict)
    skipped: dict[str, int] = Field(default_factory=dict)
    changed_nodes: int = 0
    deleted_nodes: int = 0
    timings_s: dict[str, float] = Field(default_factory=dict)
    hnsw: dict[str, int | bool] = Field(default_factory=dict)
    """How the parent's parts were reused: the HNSW graphs patched (elements written, marked deleted, graphs rebuilt
    past the deleted-slot threshold) or built (``patched`` false: a sharded index), and whether the phrase index
    (``phrases_patched``), the BM25 index (``bm25_patched``), the compact SKB's arrays (``compact_patched``), the
    graph files' lines (``lines_reused``) and the FalkorDB graph (``store_patched``) were patched rather than
    built, and how many vectors were the parent's (``vectors_reused``)."""
    build: BuildSummary | None = None


def lock_path(index_dir: Path) -> Path:
    """The lock file of an index's updates: beside it, so the swap never replaces it."""
    index_dir = Path(index_dir).resolve()
    return index_dir.parent / f".{index_dir.name}.update.lock"


@contextmanager
def update_lock(index_dir: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the index's update lock (waits up to ``wait_s`` for another update, then ConfigError)."""
    path = lock_path(index_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
                    raise ConfigError(f"another update of {index_dir} is running (pid {holder}) and held its lock "
                                      f"for over {wait_s:.0f}s; wait for it to finish, then run this again") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def config_for_update(manifest: Manifest, index_dir: Path, *,
                      live_source: dict[str, Any] | None = None) -> IndexConfig:
    """The parent's build settings, which the new generation keeps; refuses indexes a change set cannot follow.

    ``live_source``: the record of a live database read again (``read_source``) for an index built from it. Its
    changes are the difference of the two reads, and the new generation records the state read now; without it,
    such an index is refused: a change set of its own would make the index disagree with the database."""
    raw = manifest.extra.get("config")
    if not isinstance(raw, dict):
        raise IndexCorruptError(f"the manifest of {index_dir} records no build settings; rebuild the index with "
                                "`skb index` once, then apply change sets to it")
    config = IndexConfig.model_validate(raw)
    if config.source is not None:
        if live_source is None:
            raise ConfigError(f"the index at {index_dir} serves a live Neo4j database in place; change the database "
                              "and run the same `skb index` command again instead of --update")
        if live_source.get("source") != config.source.get("source"):
            was = config.source.get("source") or {}
            raise ConfigError(f"the index at {index_dir} was built from another database or selection (at "
                              f"{was.get('uri')}, database {was.get('database')}); run the command with --force to "
                              "build it from this one")
        config = config.model_copy(update={"source": live_source})
    elif live_source is not None:
        raise ConfigError(f"the index at {index_dir} was not built from a live database; run `skb index --force` "
                          "to build it from one")
    elif config.store == "neo4j":
        raise ConfigError(f"the index at {index_dir} keeps its graph in a Neo4j server, which an update does not "
                          "write; rebuild it with `skb index` on the changed data")
    if config.tune_encoder is not None:
        raise ConfigError(f"the index at {index_dir} was built with a tuned encoder, which the changed graph would "
                          "train anew; rebuild it with `skb index --tune-encoder` on the changed data")
    return config


@paused_gc()  # the parent's graph and the changed one, millions of objects: see graphs.heap
def update_index(index_dir: Path, changes: ChangeSet, *, progress: StageProgress | None = None,
                 lock_wait_s: float = LOCK_WAIT_S, read: tuple[str, SKB] | None = None,
                 live_source: dict[str, Any] | None = None) -> UpdateSummary:
    """Apply ``changes`` to the index at ``index_dir`` as a new generation (see the module's docstring).

    ``read``: (generation, its graph) as the caller already read them; the graph is used when the index is still
    at that generation under the lock, and read again otherwise. ``live_source``: for an index built from a live
    database, the record of the read the changes came from (``config_for_update``); the database itself is the
    graph store and is never written. Nothing is written when the change set does not
    apply (``LoaderError`` naming its lines), was applied before (``status="already applied"``) or changes
    nothing (``"unchanged"``)."""
    from graphs.loaders.jsonl import load_jsonl
    from graphs.update.engine import PatchEngine

    index_dir = Path(index_dir)
    Manifest.read(index_dir)  # no index: the message says how to build one, before any lock file is made
    timings: dict[str, float] = {}
    with update_lock(index_dir, lock_wait_s):
        t0 = time.perf_counter()
        manifest = Manifest.read(index_dir)  # under the lock: the generation the change applies to
        manifest.verify(index_dir)
        config = config_for_update(manifest, index_dir, live_source=live_source)
        history = [str(d) for d in manifest.extra.get("applied_changes") or []]
        base: dict[str, Any] = {"index_dir": str(index_dir), "changes_sha256": changes.sha256,
                                "parent": manifest.generation, "generation": manifest.generation}
        if changes.sha256 in history:
            return UpdateSummary(status="already applied", **base)
        skb = read[1] if read is not None and read[0] == manifest.generation else load_jsonl(index_dir / "skb")
        timings["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        changed, report = apply_changes(skb, changes)
        timings["apply"] = time.perf_counter() - t0
        counts: dict[str, Any] = {"applied": dict(report.applied), "skipped": dict(report.skipped),
                  "changed_nodes": len(report.changed_nodes), "deleted_nodes": len(report.deleted_nodes)}
        if report.total_applied == 0:
            return UpdateSummary(status="unchanged", **base, **counts, timings_s=_rounded(timings))
        lineage = {
            "update": {"parent": manifest.generation, "changes_sha256": changes.sha256,
                       "applied": dict(report.applied), "skipped": dict(report.skipped)},
            "applied_changes": [*history, changes.sha256][-HISTORY:],
        }
        shards = len(manifest.extra.get("hnsw_shards") or []) or 1
        t0 = time.perf_counter()
        engine = PatchEngine(index_dir, report.changed_nodes | report.deleted_nodes, shards=shards, parent_skb=skb,
                             changed_edges=report.changed_edges, stale_texts=stale_texts(changed, report),
                             node_source=report.node_source, edge_source=report.edge_source)
        build = build_index(changed, index_dir, config, progress=progress, engine=engine,  # type: ignore[arg-type]
                            lineage=lineage)
        timings["build"] = time.perf_counter() - t0
        generation = Manifest.read(index_dir).generation
    patched = engine.report
    hnsw: dict[str, int | bool] = {"patched": patched is not None, "phrases_patched": engine.phrases_patched,
                                   "store_patched": engine.store_patched, "bm25_patched": engine.bm25_patched,
                                   "compact_patched": engine.compact_patched, "lines_reused": engine.lines_reused,
                                   "vectors_reused": engine.reused_vectors}
    if patched is not None:
        hnsw |= {"written": sum(patched.written.values()), "marked_deleted": sum(patched.deleted.values()),
                 "graphs_rebuilt": len(patched.rebuilt)}
    return UpdateSummary(status="applied", **{**base, "generation": generation}, **counts,
                         timings_s=_rounded(timings), build=build, hnsw=hnsw)


def _rounded(timings: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in timings.items()}
