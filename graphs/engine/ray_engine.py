"""The Ray build engine: the stages that grow with the graph run as Ray work, on a laptop (a local Ray
started here) or on a cluster (``address``: ``auto`` or ``ray://HOST:PORT``).

- embedding: Ray Data ``map_batches`` over an actor pool, each actor opening the embedder once;
- HNSW: one task per shard (``graphs.index.hnsw_shards``), each writing its graphs into the index's
  temporary directory, which must therefore be on storage every node reaches;
- similarity kNN: one task per shard of a (label, field)'s vectors, merged exactly per row;
- BM25: one task per partition tokenises and counts its documents' terms; the index and its statistics are built
  once from the merged counts, so the scores equal a one-process build's;
- the compact SKB is written by the build process, as in-process (``compact_parts`` says why).

Tasks are retried by Ray (``MAX_RETRIES``) when a worker dies; a stage that still fails raises
`EngineError` naming the stage, and the build then discards its temporary directory: the index being
served is never touched. Ray's own logs stay off the terminal (``log_to_driver=False``, warnings only).
The module imports ``ray`` only when an engine is made, so the default build never loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphs.engine.local import EmbedderSpec, KnnPairs, Progress
from graphs.engine.stages import (
    bm25_terms,
    hnsw_shard,
    knn_merge,
    knn_shard,
    merged_terms,
    partitions,
)
from graphs.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.index.bm25 import BM25Index
    from graphs.index.hnsw import HNSWIndex
    from graphs.manifest import HNSWParams
    from graphs.skb.compact_write import EdgePart, NodePart
    from graphs.skb.model import SKB

__all__ = ["INSTALL_HINT", "MAX_RETRIES", "RayEngine"]

INSTALL_HINT = "pip install 'skb-agent[ray]'"
MAX_RETRIES = 3
"""How often Ray re-runs a task whose worker died (embedding actors are restarted by Ray Data)."""
_QUIET = ("ray", "ray.data", "ray.serve", "ray._private", "ray.train", "ray.tune")


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigError(f"--engine ray needs the ray package, which is not installed: {INSTALL_HINT}") from exc
    return ray


class _EmbedActor:
    """One embedding worker of the Ray Data actor pool: opens the embedder once, embeds batch after batch.
    The spec travels as a class attribute of a subclass made per job (`_actor_for`), not as a constructor
    argument, which Ray would keep in its object store for restarts (and warn about)."""

    spec: EmbedderSpec

    def __init__(self) -> None:
        self.embedder = self.spec.open()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = np.asarray(self.embedder.embed([str(t) for t in batch["text"]]), dtype=np.float32)
        return {"i": np.asarray(batch["i"]), "vec": vectors}


class _RayEmbedder:
    """The build's embedder, whose ``embed`` runs on the actor pool (the phrase and similarity stages call
    it); queries stay local."""

    def __init__(self, engine: RayEngine, local: Embedder, spec: EmbedderSpec) -> None:
        self._engine, self._local, self._spec = engine, local, spec
        self.model_name = local.model_name
        self.dim = local.dim
        self._memo: dict[str, np.ndarray] = {}

    def prefetch(self, texts: Sequence[str]) -> None:
        """Embed ``texts`` in one pool job and keep their vectors for the next ``embed`` calls: the similarity
        stage embeds each (node type, field) apart, and a pool per call would cost more than the work."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            vectors = self._engine.embed(self._local, self._spec, todo, chunk=self._engine.chunk, progress=None)
            self._memo.update(zip(todo, vectors, strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Prefetched vectors leave the memo as they are asked for (each field text is asked for once)."""
        items = list(texts)
        uniq = list(dict.fromkeys(items))
        found = {t: self._memo.pop(t) for t in uniq if t in self._memo}
        todo = [t for t in uniq if t not in found]
        if todo:
            vectors = self._engine.embed(self._local, self._spec, todo, chunk=self._engine.chunk, progress=None)
            found.update(zip(todo, vectors, strict=True))
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in items]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._local.embed_query(text)


class RayEngine:
    """Build stages as Ray work; ``shards`` HNSW shards (default: the cluster's CPUs)."""

    name = "ray"
    beside_embedding = False  # the compact SKB's tasks would wait for the embedding actors' CPUs

    def __init__(self, address: str | None = None, shards: int | None = None) -> None:
        ray = _ray()  # with ray.data, which configures Ray Data's loggers: ours are set after
        for name in _QUIET:
            logging.getLogger(name).setLevel(logging.ERROR)
        self._started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
            if address is None:
                kwargs["include_dashboard"] = False
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"cannot reach the Ray cluster at {address!r} ({exc}); start one with `ray start --head` on "
                    "the head node, or drop --ray-address to build on a local Ray"
                ) from exc
            self._started = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.shards = max(1, int(shards or self.workers))
        self.chunk = 512
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        ctx.verbose_stats_logs = False

    # -- stages -----------------------------------------------------------------------------------------
    def embed(self, embedder: Embedder, spec: EmbedderSpec, texts: Sequence[str], *, chunk: int,
              progress: Progress | None) -> np.ndarray:
        """Distinct texts, shortest first (as the one-process embedding batches them), through the actor
        pool; each text's vector back in the order of ``texts``. Fewer than two batches are embedded here:
        starting a pool costs more than they do."""
        import pyarrow as pa

        ray = _ray()
        items = list(texts)
        uniq = list(dict.fromkeys(items))
        if len(uniq) < 2 * max(1, chunk):
            from graphs.embedding.embedder import embed_all

            return embed_all(embedder, items, chunk=chunk, progress=progress)
        out = np.zeros((len(uniq), embedder.dim), dtype=np.float32)
        if uniq:
            order = np.asarray(sorted(range(len(uniq)), key=lambda i: len(uniq[i])), dtype=np.int64)
            table = pa.table({"i": order, "text": [uniq[i] for i in order]})
            blocks = max(1, min(self.workers * 4, len(uniq) // max(1, chunk) + 1))
            # Ray Data restarts a dead actor and retries its batch by itself (its actor pools' default)
            ds = ray.data.from_arrow(table).repartition(blocks).map_batches(
                type("EmbedActor", (_EmbedActor,), {"spec": spec}),
                batch_size=max(1, chunk),
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(min_size=1, max_size=min(self.workers, blocks)),
                num_cpus=1,
            )
            done = 0
            with self._stage("embedding"):
                for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                    vecs = np.asarray(batch["vec"], dtype=np.float32)
                    if vecs.ndim != 2 or vecs.shape[1] != embedder.dim:
                        raise ConfigError(f"embedder {embedder.model_name!r} returned vectors of shape {vecs.shape}"
                                          f", expected (n, {embedder.dim})")
                    out[np.asarray(batch["i"], dtype=np.int64)] = vecs
                    done += len(vecs)
                    if progress is not None:
                        progress(done, len(uniq))
        if len(uniq) == len(items):
            return out
        at = {text: i for i, text in enumerate(uniq)}
        return out[[at[t] for t in items]]

    def batch_embedder(self, embedder: Embedder, spec: EmbedderSpec, chunk: int) -> tuple[Embedder, int]:
        """The actor-pool embedder, called once per stage input (one Ray Data job each, not one per chunk)."""
        self.chunk = max(1, chunk)
        return _RayEmbedder(self, embedder, spec), 1 << 62

    def hnsw(self, keys: list[str], labels: list[str], vectors: np.ndarray, params: HNSWParams,
             out: Path) -> tuple[HNSWIndex, dict[str, str]]:
        """One task per shard writes that shard's graphs into ``out``; this process writes the id table and
        ``vectors.npy``. One shard: the unsharded layout, built here."""
        from graphs.index.hnsw import HNSWIndex, label_file, write_sharded_meta
        from graphs.index.hnsw_shards import shard_ranges

        ranges = shard_ranges(len(keys), self.shards)
        if len(ranges) == 1:
            index = HNSWIndex.build(keys, labels, vectors, params)
            return index, index.save(out)
        ray = _ray()
        out.mkdir(parents=True, exist_ok=True)
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(hnsw_shard)
        vec_ref, lab_ref = ray.put(np.ascontiguousarray(vectors, dtype=np.float32)), ray.put(list(labels))
        names = {lab: label_file(lab) for lab in set(labels)}
        with self._stage("HNSW"):
            results = ray.get([task.remote(out, i, vec_ref, lab_ref, a, b, params, names)
                               for i, (a, b) in enumerate(ranges)])
        files: dict[str, str] = {}
        for _, written in results:
            files.update(written)
        files.update(write_sharded_meta(out, keys, labels, vectors, params, ranges, [n for n, _ in results]))
        return HNSWIndex.load(out), files

    def bm25(self, keys: list[str], labels: list[str], texts: Sequence[str]) -> BM25Index:
        from graphs.index.bm25 import STEMMER, STOPWORDS, BM25Index

        ray = _ray()
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(bm25_terms)
        parts = partitions(len(texts), 2 * self.workers)
        with self._stage("BM25"):
            counted = ray.get([task.remote(list(texts[a:b]), STEMMER, STOPWORDS) for a, b in parts])
        vocab, docs = merged_terms(counted)
        return BM25Index.from_terms(keys, labels, vocab, docs, stemmer=STEMMER, stopwords=STOPWORDS)

    def compact_parts(self, skb: SKB) -> tuple[NodePart, EdgePart] | None:
        """None: the compact SKB's arrays are made in the build process, as in-process. Why not by partition tasks:
        the records start in this process, and shipping one to a task pickles it, which costs about what encoding
        it does; the pickles also stay in this process's object-store pages (1.9M generated nodes: 1.6 GB of its
        8.4 GB peak, with the edges already made here)."""
        return None

    def knn_pairs(self) -> KnnPairs | None:
        return self._knn_pairs

    def prepare_similarity(self, skb: SKB, embedder: Embedder) -> None:
        """Embed every field text the similarity stage will ask for (its default node types and fields) in
        one pool job before it starts."""
        from graphs.sage.edges import TEXT_FIELD, default_fields, field_text

        if not isinstance(embedder, _RayEmbedder):
            return
        texts: list[str] = []
        for label, names in default_fields(skb).items():
            for fname in names:
                if fname != TEXT_FIELD:
                    texts.extend(t for nd in skb.nodes_of(label) if (t := field_text(nd, fname)) is not None)
        embedder.prefetch(texts)

    def _knn_pairs(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's top-k over every shard, merged exactly; small inputs take the one-process kNN."""
        from graphs.sage.edges import knn_candidate_pairs

        n = len(vectors)
        k = min(k, n - 1)
        if self.shards < 2 or n < max(256, 8 * self.shards * (k + 1)):
            return knn_candidate_pairs(vectors, k)
        ray = _ray()
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(knn_shard)
        ref = ray.put(np.ascontiguousarray(vectors, dtype=np.float32))
        with self._stage("similarity kNN"):
            parts = ray.get([task.remote(ref, a, b, k + 1) for a, b in partitions(n, self.shards)])
        return knn_merge(parts, k)

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False

    @contextmanager
    def _stage(self, stage: str) -> Iterator[None]:
        """Ray's failures (a worker that died past its retries, a task that raised) as one clear error."""
        ray = _ray()
        try:
            yield
        except ray.exceptions.RayError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            tries = f"{MAX_RETRIES} time{'s' if MAX_RETRIES != 1 else ''}"
            raise EngineError(
                f"the Ray {stage} stage failed ({type(exc).__name__}: {first}); a task whose worker died was "
                f"retried up to {tries}. The index being served is unchanged: check the workers "
                "(`ray status`) and run the build again"
            ) from exc
