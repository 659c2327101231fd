"""Index construction: SKB -> embeddings, HNSW, BM25, similarity edges, graph store, manifest.

Everything is built into a sibling temp directory and swapped in at the end, so an
interrupted build leaves the previous index usable and never a half-written one.

What a build may replace (``check_target``): a missing or empty directory, or an skb index
(a ``manifest.json`` this code wrote). Anything else is refused untouched. Inside an index the
build owns ``BUILD_OWNED`` (its parts); every other top-level entry (``traces.sqlite``,
``threads.sqlite``, a user's notes) is moved into the new index at the swap, so an open SQLite
connection keeps writing to the same file. A file the previous build did not list inside a pure
build output directory (``skb/``, ``hnsw/``, ``bm25/``, ``sage/``) makes the rebuild refuse
rather than delete it; ``falkordb/`` is the graph server's data directory and is replaced whole.
Those rules and the swap live in ``graphs.index_dir``.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from graphs.embedding.embedder import DEFAULT_EMBEDDER
from graphs.errors import ConfigError
from graphs.heap import paused_gc, release_heap
from graphs.index_dir import check_target, clean_stale_builds, discard, swap_in
from graphs.sage.edges import SimilarityConfig
from graphs.skb.model import SKB
from graphs.tuning.train import TuneConfig

if TYPE_CHECKING:
    from graphs.engine import BuildEngine
    from graphs.manifest import FileDigest
    from graphs.store.load_process import StoreLoad

StageProgress = Callable[[str, int, int], None]
"""progress(stage, done, total) -- drives the CLI's progress bar."""
T = TypeVar("T")


class IndexConfig(BaseModel):
    """One config for one `skb index` run (recorded in the manifest)."""

    dataset: str = "custom"
    store: Literal["falkordb", "neo4j", "none"] = "falkordb"
    embedder: str = DEFAULT_EMBEDDER
    """See ``graphs.embedding.embedder.DEFAULT_EMBEDDER``; an index keeps the spec it was built with (manifest), so changing
    this default never changes how an existing index embeds its queries."""
    hnsw_m: int = 32
    hnsw_ef_construction: int | None = None
    """Candidates kept while inserting into the HNSW graphs; None: 200, or 100 past 200,000 nodes
    (``graphs.index.hnsw_params.sized_params``)."""
    hnsw_ef: int | None = None
    """Candidates kept while searching them; None: 128, or 256 past 200,000 nodes."""
    hnsw_global_graph: bool | None = None
    """Also build one HNSW graph of all nodes beside the per-label graphs; None: where it pays
    (``graphs.index.hnsw_params.wants_global_graph``: more than one label and up to 200,000 nodes, or many labels)."""
    hnsw_mapped: bool = False
    """Build the HNSW and phrase graphs to be searched from memory-mapped files (``graphs.index.ann``, needs
    ``skb-agent[mapped]``): serving processes on one machine share them instead of each reading its own copy."""
    embed_batch: int = 512
    cache_dir: Path | None = None
    similarity: SimilarityConfig = Field(default_factory=SimilarityConfig)
    source: dict[str, Any] | None = None
    """Where the SKB was read from when the graph stays there (``graphs.loaders.neo4j_source``: the
    database and the state it was read in, ``{"kind": "neo4j", "source": {...}, "state": {...}}``). With
    ``store="neo4j"`` the build then loads nothing into it: the index serves the live database."""
    tune_encoder: TuneConfig | None = None
    """Fine-tune the bundled encoder on this graph's own pairs before embedding (``graphs.tuning``;
    ``skb index --tune-encoder``): the index then stores the tuned model (``encoder/``) and embeds node texts,
    phrases and queries with it. None: the embedder as given."""
    stage: Literal["core", "all"] = "all"
    """``core``: everything that needs no model (the SKB and its stored statistics, BM25, the graph
    store) in about a minute, so a first question is answered before the vectors exist; the index
    records what it lacks (``Manifest.extra["missing"]``) and a later ``all`` build swaps in the
    complete index as a new generation, which open bundles pick up (``IndexBundle`` reloads)."""


#: What a ``core`` build leaves out, with what each part serves (shown to the user while it is missing).
LATER_STAGES: dict[str, str] = {
    "vectors": "node vectors: dense search, embedding links, dense ranking of SAGE",
    "phrases": "phrase vectors: linking described clauses",
    "similarity_edges": "similarity edges: SAGE expansion over similar nodes",
}


class BuildSummary(BaseModel):
    index_dir: str
    nodes: dict[str, int]
    edges: dict[str, int]
    similarity_edges: int = 0
    timings_s: dict[str, float]
    size_bytes: int


def default_cache_dir(index_dir: Path) -> Path:
    """The embedding cache sits beside (not inside) the index so the swap keeps it."""
    return index_dir.resolve().parent / ".skb-cache"


#: Files at least this large are checked at open by size and sampled digest (``FileDigest``), in full by
#: ``skb verify``: hashing every byte of the vectors and arrays on each start would cost a second or more.
LARGE_FILE_BYTES = 1 << 20


def split_large_files(
    root: Path, files: dict[str, str], data_files: dict[str, FileDigest]
) -> tuple[dict[str, str], dict[str, FileDigest]]:
    """Move the large entries of ``files`` (path -> sha256) into ``data_files`` (size + sampled digest)."""
    from graphs.manifest import FileDigest, sample_sha256

    small: dict[str, str] = {}
    large = dict(data_files)
    for rel, digest in files.items():
        path = root / rel
        size = path.stat().st_size
        if size >= LARGE_FILE_BYTES:
            large[rel] = FileDigest(size=size, sha256=digest, sample_sha256=sample_sha256(path, size))
        else:
            small[rel] = digest
    return small, large


def write_fast_start(skb: SKB, skb_dir: Path, engine: BuildEngine | None = None, tables: bool = True) -> None:
    """The artifacts that let an index open without parsing: the SKB as memory-mapped arrays
    (``graphs.skb.compact``; their node and edge parts computed by ``engine`` where it has them: an update's)
    and, with ``tables``, the planner's statistics computed from it (``graphs.skb.state``; otherwise the caller
    computes them later from the compact SKB: ``graphs.skb.state.write_tables``)."""
    from graphs.skb.compact import COMPACT_DIR, compact_arrays, write_compact
    from graphs.skb.compact_write import compact_names, compact_parts
    from graphs.skb.state import STATE_DIR, precompute

    labels, rels = compact_names(skb)
    parts = (engine.compact_parts(skb) if engine is not None else None) or compact_parts(skb, labels, rels)
    node_part, edge_part = parts
    # the schema's relation counts from the arrays just made (a pass over every edge record cost seconds)
    with skb.arrays_fixed(labels, node_part.label, rels, edge_part.rel, edge_part.src, edge_part.dst):
        schema = skb.schema()
    write_compact(skb, skb_dir / COMPACT_DIR, schema, parts=parts)
    del parts, node_part, edge_part
    if not tables:
        return
    # from the SKB in memory (the compact arrays keep its node order, which the records refer to), reading its
    # label and edge id arrays from the compact files just written instead of building them from the records
    with skb.arrays_fixed(*compact_arrays(skb_dir / COMPACT_DIR)):
        precompute(skb, skb_dir / STATE_DIR, schema)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _noop(stage: str, done: int, total: int) -> None:
    return None


@paused_gc()  # millions of objects that live until the build ends: see graphs.heap
def build_index(
    skb: SKB,
    index_dir: Path,
    config: IndexConfig | None = None,
    progress: StageProgress | None = None,
    engine: BuildEngine | None = None,
    lineage: dict[str, Any] | None = None,
    consume: bool = False,
) -> BuildSummary:
    """``engine`` runs the stages that grow with the graph (``graphs.engine``; default: this process);
    ``lineage`` goes into the manifest's ``extra`` (``graphs.update``: the parent generation and change set).

    ``consume``: the build may empty ``skb`` (``SKB.clear``) once the graph's files are written, and the stages
    after the node texts read the compact SKB it wrote (memory-mapped) instead. The graph's Python objects then
    leave the process before the vectors are made (a million generated nodes: the embedding and HNSW stages peak
    1.3-1.5 GB lower, at 2.2-2.3 GB). The index is the same; the caller must not read ``skb`` afterwards (the
    ``skb index`` command passes True). The embedded graph store is then loaded by a spawned process beside the
    vector stages (``graphs.store.load_process``): a script that calls this at import time needs the
    ``if __name__ == "__main__":`` guard that Python's multiprocessing asks for."""
    from graphs.embedding.embedder import check_embedder, get_embedder
    from graphs.engine import LocalEngine
    from graphs.engine.local import EmbedderSpec
    from graphs.index.hnsw_params import sized_params
    from graphs.manifest import GRAPH_FILE, Counts, EmbedderInfo, FileDigest, Manifest, sha256_file

    config = config or IndexConfig()
    report = progress or _noop
    engine = engine or LocalEngine()
    shown_dir = Path(index_dir)
    check_target(shown_dir)
    index_dir = shown_dir.resolve()  # a symlinked index dir: build beside, and swap, its target
    if not skb.nodes:
        raise ConfigError("the SKB has no nodes; check the dataset path and format")
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_builds(index_dir)
    tmp = index_dir.parent / f".{index_dir.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    timings: dict[str, float] = {}
    # the graph files and the fast-start files are written on this thread beside the texts and embedding stages
    # where the engine asks for it (``BuildEngine.beside_embedding``: an update): neither side reads what the
    # other makes
    beside = ThreadPoolExecutor(1, thread_name_prefix="fast_start") if engine.beside_embedding else None
    store_load: StoreLoad | None = None
    try:
        t0 = time.perf_counter()
        skb.validate(source=f"dataset {config.dataset}")
        timings["write_skb"] = time.perf_counter() - t0  # and the graph files' time once they are written
        timings["fast_start"] = 0.0
        report("fast_start", 0, 1)
        graph_lines = getattr(engine, "graph_lines", None)  # graphs.update: the parent's lines of unchanged records
        # consumed: the tables are made from the compact SKB once the graph's Python objects are gone (below)
        written = _submit(beside, _write_skb, skb, tmp / "skb", engine, graph_lines, not consume)

        keys = list(skb.nodes)
        labels = [skb.nodes[k].label for k in keys]
        t0 = time.perf_counter()
        text_stage = getattr(engine, "node_texts", None)  # graphs.update: made only where read
        texts = text_stage(skb, keys) if text_stage is not None else [skb.node_text(k) for k in keys]
        timings["texts"] = time.perf_counter() - t0

        params = sized_params(len(keys), M=config.hnsw_m, ef_construction=config.hnsw_ef_construction,
                              ef=config.hnsw_ef, global_graph=config.hnsw_global_graph, mapped=config.hnsw_mapped)
        files: dict[str, str] = {}
        missing: list[str] = []
        batch = max(1, config.embed_batch)
        cache_dir = config.cache_dir or default_cache_dir(index_dir)
        embedder_spec = config.embedder
        if config.stage != "core" and (config.tune_encoder is not None or embedder_spec.startswith("tuned:")):
            from graphs.tuning.stage import INDEX_ENCODER_DIR, index_encoder

            t0 = time.perf_counter()
            embedder_spec = index_encoder(
                skb, tmp, config.embedder, config.tune_encoder, progress=lambda d, t: report("tune", d, t)
            )
            for path in sorted((tmp / INDEX_ENCODER_DIR).rglob("*")):
                if path.is_file():
                    files[path.relative_to(tmp).as_posix()] = sha256_file(path)
            timings["tune_encoder"] = time.perf_counter() - t0
        if consume:  # the node texts and the tuned encoder were the last to read the records
            skb = _consumed(skb, written, tmp / "skb")
            if config.store == "falkordb" and getattr(engine, "graph_store", None) is None:
                from graphs.store.load_process import StoreLoad

                # the planner's tables, then the graph store, made from the compact files just written in a process
                # of its own while the vectors, the graphs and BM25 are made here (graphs.store.load_process)
                store_load = StoreLoad(tmp / "skb", tmp / "falkordb", tables=True)
            else:
                from graphs.skb.state import write_tables

                timings["tables"] = _timed(write_tables, skb, tmp / "skb")[1]
        # opens no model until used
        spec = EmbedderSpec(embedder_spec, cache_dir / "emb", tmp)
        embedder = get_embedder(spec.spec, cache_dir=spec.cache_dir, base_dir=spec.base_dir)
        if config.stage == "core":
            from graphs.index.phrases import phrase_entries

            missing.append("vectors")
            if next(iter(phrase_entries(skb)), None) is not None:
                missing.append("phrases")
        else:
            t0 = time.perf_counter()
            check_embedder(embedder, embedder_spec)  # opened even when every vector below comes from the cache
            with _cores_left(beside is not None):  # one core writes the graph's files meanwhile
                vectors = engine.embed(embedder, spec, texts, chunk=batch,
                                       progress=lambda d, t: report("embed", d, t))
            timings["embed"] = time.perf_counter() - t0
        for stage, seconds in written.result().items():
            timings[stage] += seconds
        report("fast_start", 1, 1)
        # BM25 is made on another thread while the HNSW graphs are built: hnswlib inserts without Python's lock,
        # so the tokenizer's Python runs meanwhile (a million nodes: the two stages 168 s one after the other)
        report("bm25", 0, 1)
        lexical = ThreadPoolExecutor(1, thread_name_prefix="bm25")
        bm25_made = lexical.submit(_timed, engine.bm25, keys, labels, texts)
        lexical.shutdown(wait=False)  # the thread ends with its one task
        if config.stage != "core":
            t0 = time.perf_counter()
            report("hnsw", 0, 1)
            hnsw, hnsw_files = engine.hnsw(keys, labels, vectors, params, tmp / "hnsw")
            params = hnsw.params.model_copy(update={"global_graph": hnsw.has_global_graph})  # what was built
            del vectors  # the index holds what later stages read
            for rel, digest in hnsw_files.items():
                files[f"hnsw/{rel}"] = digest
            report("hnsw", 1, 1)
            timings["hnsw"] = time.perf_counter() - t0

        bm25, timings["bm25"] = bm25_made.result()
        for rel, digest in bm25.save(tmp / "bm25").items():
            files[f"bm25/{rel}"] = digest
        del bm25, texts, keys, labels  # no later stage reads them: the store stage's peak is the build's
        report("bm25", 1, 1)

        # One vector per name, synonym and definition sentence of the profile's vocabulary labels
        # (graphs.index.phrases): clause linking matches described terms against them.
        from graphs.index.phrases import PHRASE_DIR, build_phrase_index

        t0 = time.perf_counter()
        phrases = None
        batch_embedder, chunk = engine.batch_embedder(embedder, spec, batch)
        if config.stage != "core":  # graphs.update's engine patches the parent generation's phrase index instead
            phrase_stage = getattr(engine, "phrase_index", None) or build_phrase_index
            phrases = phrase_stage(skb, batch_embedder, batch=chunk, progress=lambda d, t: report("phrases", d, t),
                                   mapped=params.mapped)
        if phrases is not None:
            for rel, digest in phrases.save(tmp / PHRASE_DIR).items():
                files[f"{PHRASE_DIR}/{rel}"] = digest
            timings["phrases"] = time.perf_counter() - t0
        del phrases

        n_similar = 0
        if config.similarity.percentile is not None and config.stage == "core":
            missing.append("similarity_edges")
        elif config.similarity.percentile is not None:
            t0 = time.perf_counter()
            from graphs.sage.edges import build_similarity_edges

            sim = build_similarity_edges(skb, hnsw, batch_embedder, config.similarity, progress=report,
                                         **_engine_knn(engine, skb, batch_embedder, chunk))
            for rel, digest in sim.save(tmp / "sage").items():
                files[f"sage/{rel}"] = digest
            n_similar = sim.count
            timings["similarity_edges"] = time.perf_counter() - t0
            del sim
        layout = {"hnsw_shards": hnsw.shard_ranges} if config.stage != "core" and hnsw.sharded else {}
        if config.stage != "core":
            del hnsw
        del batch_embedder
        release_heap()  # the vectors, graphs and texts go back to the system before the graph server loads here

        loaded_beside = store_load is not None
        if store_load is not None:  # it writes the planner's tables under skb/ too: waited for before they are hashed
            report("store", 0, 1)
            timings.update(store_load.result())  # its own seconds (tables, store_load), beside the stages above
            store_load = None
            report("store", 1, 1)
        for path in sorted((tmp / "skb").rglob("*")):
            if path.is_file():
                files[str(path.relative_to(tmp))] = sha256_file(path)

        t0 = time.perf_counter()
        data_files: dict[str, FileDigest] = {}
        if config.store == "falkordb":
            from graphs.store.falkordb_store import FalkorDBStore

            patch_store = getattr(engine, "graph_store", None)  # graphs.update: the parent's graph, patched
            if not loaded_beside and (patch_store is None or not patch_store(
                    skb, tmp / "falkordb", progress=lambda d, t: report("store", d, t))):
                with FalkorDBStore(tmp / "falkordb") as store:
                    store.load(skb, progress=lambda d, t: report("store", d, t))
            # recorded after the server stopped: the dump is final (load() saved it; an unchanged graph is not re-saved)
            data_files[GRAPH_FILE] = FileDigest.of(tmp / GRAPH_FILE)
        elif config.store == "neo4j" and config.source is not None:
            pass  # the graph is the user's database, read in place: never written
        elif config.store == "neo4j":
            from graphs.store.neo4j_store import Neo4jStore

            with Neo4jStore.from_env() as neo:
                neo.load(skb, progress=lambda d, t: report("store", d, t))
        timings["store"] = time.perf_counter() - t0

        files, data_files = split_large_files(tmp, files, data_files)
        stats = skb.stats()
        manifest = Manifest(
            dataset=config.dataset,
            embedder=EmbedderInfo(model_name=embedder.model_name, dim=embedder.dim),
            hnsw=params,
            counts=Counts(nodes=stats["nodes"], edges={**stats["edges"], "IS_SIMILAR": n_similar}),
            files=files,
            data_files=data_files,
            generation=uuid.uuid4().hex,
            extra={"config": config.model_dump(mode="json"), "embedder_spec": embedder_spec, "store": config.store,
                   "missing": missing, **layout, **(lineage or {})},
        )
        manifest.write(tmp)
        swap_in(tmp, index_dir)
    except BaseException:
        if store_load is not None:
            store_load.stop()  # its graph server and files go before the directory does
        if beside is not None:
            beside.shutdown(wait=True)  # a fast-start still writing finishes before its directory goes
        discard(tmp, index_dir)
        raise
    finally:
        if beside is not None:
            beside.shutdown(wait=False)
    return BuildSummary(
        index_dir=str(shown_dir),
        nodes=stats["nodes"],
        edges=stats["edges"],
        similarity_edges=n_similar,
        timings_s={k: round(v, 3) for k, v in timings.items()},
        size_bytes=dir_size(index_dir),
    )


def _cores_left(beside: bool) -> AbstractContextManager[None]:
    """Where the fast-start files are written beside the embedding: an encoder opened meanwhile runs one
    thread fewer than this process's cores (``graphs.embedding.onnx_runtime.batch_threads``)."""
    if not beside:
        return nullcontext()
    from graphs.embedding.onnx_runtime import batch_threads

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return batch_threads(cores - 1)


def _write_skb(skb: SKB, skb_dir: Path, engine: BuildEngine,
               graph_lines: Callable[[SKB], tuple[list[bytes], list[bytes]] | None] | None,
               tables: bool = True) -> dict[str, float]:
    """The graph files (``write_jsonl``), then the fast-start files (``write_fast_start``); the seconds of each."""
    from graphs.loaders.jsonl import write_jsonl

    t0 = time.perf_counter()
    write_jsonl(skb, skb_dir, lines=graph_lines(skb) if graph_lines is not None else None)
    t1 = time.perf_counter()
    write_fast_start(skb, skb_dir, engine, tables)
    return {"write_skb": t1 - t0, "fast_start": time.perf_counter() - t1}


def _consumed(skb: SKB, written: Future[dict[str, float]], skb_dir: Path) -> SKB:
    """The compact SKB the build wrote, in place of ``skb``, which is emptied (``build_index``'s ``consume``)."""
    from graphs.skb.compact import open_compact

    written.result()  # the compact files are complete
    compact = open_compact(skb_dir)
    skb.clear()
    release_heap()  # the records' memory goes back to the system before the vectors are made
    return compact


def _timed(work: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``work(*args)`` and the seconds it took."""
    t0 = time.perf_counter()
    return work(*args), time.perf_counter() - t0


def _submit(pool: ThreadPoolExecutor | None, work: Callable[..., T], *args: Any) -> Future[T]:
    """``work(*args)`` on ``pool``'s thread, or here and now where there is none."""
    if pool is not None:
        return pool.submit(work, *args)
    done: Future[T] = Future()
    done.set_result(work(*args))
    return done


def _engine_knn(engine: BuildEngine, skb: SKB, embedder: Any, chunk: int) -> dict[str, Any]:
    """The similarity stage's options from an engine: none for the in-process one (its call is unchanged)."""
    knn = engine.knn_pairs()
    if knn is None:
        return {}
    engine.prepare_similarity(skb, embedder)
    return {"knn_pairs": knn, "embed_chunk": chunk}
