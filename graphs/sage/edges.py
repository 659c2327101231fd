"""SAGE offline graph construction: IS_SIMILAR edges between nodes with similar text fields.

Why similarity edges: many useful neighbours in a semi-structured KB are not linked by
any schema edge (two phenotypes phrased alike in different branches of HPO, two diseases
of the same family). SAGE adds undirected ``IS_SIMILAR`` edges so query-time expansion
can reach them in one hop.

How, and why this way:

- Per text-rich node type and per metadata field (name, synonyms, definition, ...), the
  field text is embedded on its own: a match on names and a match on definitions are
  different evidence, and a long definition would drown the name in one joined text.
- Candidate pairs are each node's top-``knn`` neighbours from a temporary hnswlib index
  built per (label, field); all-pairs similarity is quadratic (19k phenotypes = 181M
  pairs) and almost all of those pairs are noise anyway.
- The empirical similarity distribution of a field is taken over its kNN candidate
  pairs, and an edge is kept when the similarity *exceeds* that field's chosen percentile
  (default 95th): an absolute cosine cut-off would mean different things for short names
  and long definitions, and for different embedding models.
- Fields combine with OR (any field above its threshold) or AND (every field present on
  both nodes above its threshold; fields missing on either node do not veto).

Incremental rebuilds: field texts go through the given embedder, which in an index build
is a content-hash ``CachedEmbedder``, so only changed texts are re-embedded. The kNN
search and the thresholds are always recomputed over the whole candidate set: a
percentile is a property of the whole distribution, so a changed node can move the
threshold (slightly) for every other pair, and edges elsewhere may appear or disappear.

Computation is split in two so that statistics for several percentiles and both logics
(``skb graph stats``) reuse the embeddings and the kNN search:
``compute_candidates(...)`` then ``SimilarityCandidates.select(percentile, logic)``.
"""

from __future__ import annotations

import gzip
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from graphs.errors import ConfigError, IndexCorruptError, IndexNotFoundError
from graphs.skb.model import SKB, Edge, Node

if TYPE_CHECKING:
    from graphs.embedding.embedder import Embedder
    from graphs.index.hnsw import HNSWIndex

__all__ = [
    "EDGES_FILE",
    "REL",
    "STATS_FILE",
    "TEXT_FIELD",
    "LabelCandidates",
    "SimilarityCandidates",
    "SimilarityEdge",
    "SimilarityGraph",
    "add_similarity_edges",
    "build_similarity_edges",
    "compute_candidates",
    "default_fields",
    "field_text",
    "knn_candidate_pairs",
]

Logic = Literal["or", "and"]
StageProgress = Callable[[str, int, int], None]
KnnPairs = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
"""(vectors, k) -> directed (i, j) pairs, j among i's top-k cosine neighbours, i != j."""

REL = "IS_SIMILAR"
EDGES_FILE = "edges.jsonl.gz"
STATS_FILE = "stats.json"
#: Pseudo-field: the node's whole embedded text, whose vectors the main HNSW index already holds.
TEXT_FIELD = "@text"
#: A label takes part by default when its field texts average at least this many words:
#: gene symbols ("FGFR2") embed to near-arbitrary vectors and would only add noise edges.
MIN_MEAN_WORDS = 2.0
#: Below this many nodes an exact scan replaces hnswlib (which can fail to return k results
#: from tiny graphs); its cost is at most 256^2 dot products, not an all-pairs pass at scale.
_EXACT_BELOW = 256
_EMBED_BATCH = 1024
_PAIR_BATCH = 65536
_FORMAT = 1


class SimilarityConfig(BaseModel):
    """SAGE similarity edges; `percentile=None` disables them."""

    percentile: float | None = Field(default=None, ge=0, le=100)
    logic: Literal["or", "and"] = "or"
    knn: int = Field(default=20, ge=1)


# -- field texts ---------------------------------------------------------------------------------
def field_text(node: Node, fname: str) -> str | None:
    """A field's text for embedding; list fields (synonyms) are joined, empty ones are absent."""
    value = node.props.get(fname)
    if value is None:
        return None
    if isinstance(value, list | tuple):
        parts = [str(v).strip() for v in value if v is not None and str(v).strip()]
        text = "; ".join(parts)
    else:
        text = str(value).strip()
    return text or None


def default_fields(skb: SKB, min_mean_words: float = MIN_MEAN_WORDS) -> dict[str, list[str]]:
    """Text-rich labels and their fields: the type's ``text_fields`` present on some node.

    A label qualifies when it has at least two nodes and its field texts average at least
    ``min_mean_words`` words (identifier-like names such as gene symbols do not).
    """
    out: dict[str, list[str]] = {}
    by_label: dict[str, list[Node]] = {}
    for node in skb.iter_nodes():
        by_label.setdefault(node.label, []).append(node)
    for label in sorted(by_label):
        nodes = by_label[label]
        if len(nodes) < 2:
            continue
        ntype = skb.node_types.get(label)
        names = list(ntype.text_fields) if ntype is not None else ["name"]
        if ntype is not None and ntype.name_field not in names:
            names.insert(0, ntype.name_field)
        present: list[str] = []
        words = 0
        texts = 0
        for fname in dict.fromkeys(names):
            found = False
            for node in nodes:
                text = field_text(node, fname)
                if text is not None:
                    found = True
                    words += len(text.split())
                    texts += 1
            if found:
                present.append(fname)
        if present and texts and words / texts >= min_mean_words:
            out[label] = present
    return out


# -- candidates ------------------------------------------------------------------------------------
@dataclass
class LabelCandidates:
    """The kNN candidate pairs of one label and each field's similarity on every pair.

    ``a``/``b`` index ``keys`` with ``a < b`` by key order; ``sims[f][i]`` is NaN when
    field ``f`` is missing on either node of pair ``i``; ``in_knn[f][i]`` says whether the
    pair came out of field ``f``'s own kNN search (the set its percentile is taken over).
    """

    label: str
    keys: list[str]
    fields: list[str]
    a: np.ndarray
    b: np.ndarray
    sims: dict[str, np.ndarray]
    in_knn: dict[str, np.ndarray]
    field_nodes: dict[str, int]

    @property
    def n_pairs(self) -> int:
        return len(self.a)


@dataclass
class SimilarityCandidates:
    """Everything needed to choose similarity edges at any percentile and logic."""

    knn: int
    labels: dict[str, LabelCandidates]
    timings_s: dict[str, float] = field(default_factory=dict)

    def thresholds(self, percentile: float) -> dict[str, float]:
        """``{"Label.field": similarity at the percentile of that field's kNN candidate pairs}``."""
        _check_percentile(percentile)
        out: dict[str, float] = {}
        for label, cand in self.labels.items():
            for fname in cand.fields:
                sims = cand.sims[fname][cand.in_knn[fname]]
                if len(sims):
                    out[f"{label}.{fname}"] = float(np.percentile(sims, percentile))
        return out

    def candidate_pairs(self) -> dict[str, int]:
        """``{"Label.field": kNN candidate pairs, "Label": union over fields}``."""
        out: dict[str, int] = {}
        for label, cand in self.labels.items():
            out[label] = cand.n_pairs
            for fname in cand.fields:
                out[f"{label}.{fname}"] = int(cand.in_knn[fname].sum())
        return out

    def total_candidates(self) -> int:
        return sum(c.n_pairs for c in self.labels.values())

    def node_counts(self) -> dict[str, int]:
        return {label: len(c.keys) for label, c in self.labels.items()}

    def select(self, percentile: float, logic: Logic = "or") -> SimilarityGraph:
        """Keep the candidate pairs above the per-field percentile thresholds, combined by ``logic``."""
        _check_percentile(percentile)
        if logic not in ("or", "and"):
            raise ConfigError(f"unknown similarity logic {logic!r}; use 'or' or 'and'")
        thresholds = self.thresholds(percentile)
        edges: list[SimilarityEdge] = []
        for label, cand in self.labels.items():
            n = cand.n_pairs
            if n == 0:
                continue
            passing: dict[str, np.ndarray] = {}
            present_any = np.zeros(n, dtype=bool)
            all_pass = np.ones(n, dtype=bool)
            any_pass = np.zeros(n, dtype=bool)
            for fname in cand.fields:
                sims = cand.sims[fname]
                present = ~np.isnan(sims)
                thr = thresholds.get(f"{label}.{fname}")
                ok = present & (sims > thr) if thr is not None else np.zeros(n, dtype=bool)
                passing[fname] = ok
                present_any |= present
                any_pass |= ok
                all_pass &= ok | ~present
            keep = any_pass if logic == "or" else (all_pass & present_any)
            for i in np.flatnonzero(keep):
                scores = {f: float(cand.sims[f][i]) for f in cand.fields if passing[f][i]}
                edges.append(
                    SimilarityEdge(
                        src=cand.keys[int(cand.a[i])],
                        dst=cand.keys[int(cand.b[i])],
                        label=label,
                        fields=list(scores),
                        score=max(scores.values()),
                        scores=scores,
                    )
                )
        edges.sort(key=lambda e: (e.src, e.dst))
        return SimilarityGraph(
            edges=edges,
            percentile=float(percentile),
            logic=logic,
            knn=self.knn,
            thresholds=thresholds,
            candidate_pairs=self.candidate_pairs(),
            nodes=self.node_counts(),
            fields={label: list(c.fields) for label, c in self.labels.items()},
            timings_s=dict(self.timings_s),
        )


def _check_percentile(percentile: float | None) -> None:
    if percentile is None or not 0.0 <= float(percentile) <= 100.0:
        raise ConfigError(f"similarity percentile must be a number in [0, 100], got {percentile!r} (e.g. 95)")


def knn_candidate_pairs(vectors: np.ndarray, k: int, *, seed: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Directed (i, j) pairs: j among i's top-k cosine neighbours, i != j."""
    n = len(vectors)
    k = min(k, n - 1)
    if k <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if n < _EXACT_BELOW:
        sims = vectors @ vectors.T
        np.fill_diagonal(sims, -np.inf)
        nbrs = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    else:
        import hnswlib

        index = hnswlib.Index(space="cosine", dim=vectors.shape[1])
        index.init_index(max_elements=n, ef_construction=100, M=16, random_seed=seed)
        # One insertion thread: a multi-threaded build is not reproducible, and the edges (and
        # their file's checksum) should not change between two builds of the same SKB.
        index.add_items(vectors, np.arange(n), num_threads=1)
        index.set_ef(max(2 * (k + 1), 64))
        ids, _ = index.knn_query(vectors, k=k + 1, num_threads=-1)
        ids = ids.astype(np.int64)
        rows = np.arange(n)[:, None]
        not_self = ids != rows
        # Drop self where returned; where it is not (exact duplicates outrank it), drop the last hit.
        nbrs = np.empty((n, k), dtype=np.int64)
        for i in range(n):
            row = ids[i][not_self[i]]
            nbrs[i] = row[:k]
    src = np.repeat(np.arange(n, dtype=np.int64), nbrs.shape[1])
    return src, nbrs.reshape(-1)


_knn_pairs = knn_candidate_pairs


def compute_candidates(
    skb: SKB,
    hnsw: HNSWIndex | None,
    embedder: Embedder | None,
    *,
    knn: int = 20,
    fields: dict[str, list[str]] | None = None,
    labels: Sequence[str] | None = None,
    progress: StageProgress | None = None,
    knn_pairs: KnnPairs | None = None,
    embed_chunk: int = _EMBED_BATCH,
) -> SimilarityCandidates:
    """Embed every (label, field), find kNN candidate pairs, score them on every field.

    ``fields`` maps label -> field names (``"@text"`` = the node's whole indexed text,
    taken from ``hnsw``); default: :func:`default_fields`. ``labels`` restricts the labels.
    ``knn_pairs`` replaces the one-process kNN (a build engine's sharded kNN: ``graphs.engine``), and
    ``embed_chunk`` the number of texts per embedder call.
    """
    from graphs.embedding.embedder import embed_all

    if knn < 1:
        raise ConfigError(f"similarity knn must be >= 1, got {knn}")
    plan = dict(fields) if fields is not None else default_fields(skb)
    if labels is not None:
        unknown = [lab for lab in labels if lab not in skb.node_types and not skb.nodes_of(lab)]
        if unknown:
            raise ConfigError(f"unknown node type(s) {unknown} for similarity edges; choose from {skb.labels()}")
        if fields is None:
            # An explicitly requested label takes part even if it is not text-rich by the default rule.
            for lab in labels:
                if lab not in plan:
                    ntype = skb.node_types.get(lab)
                    plan[lab] = list(ntype.text_fields) if ntype is not None else ["name"]
        plan = {lab: plan[lab] for lab in labels if lab in plan}
    for lab, names in plan.items():
        if not names:
            raise ConfigError(f"no similarity fields given for node type {lab!r}; name at least one (e.g. name)")
    report = progress or (lambda stage, done, total: None)
    steps = sum(len(v) for v in plan.values())
    done = 0
    timings = {"embed": 0.0, "knn": 0.0}
    out: dict[str, LabelCandidates] = {}
    for label in sorted(plan):
        nodes = sorted(skb.nodes_of(label), key=lambda nd: nd.key)
        keys = [nd.key for nd in nodes]
        if len(nodes) < 2:
            done += len(plan[label])
            continue
        n = len(nodes)
        field_vecs: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # field -> (node positions, vectors)
        directed: list[np.ndarray] = []
        knn_codes: dict[str, np.ndarray] = {}
        for fname in dict.fromkeys(plan[label]):
            t0 = time.perf_counter()
            if fname == TEXT_FIELD:
                if hnsw is None:
                    raise ConfigError(f"field {TEXT_FIELD!r} needs the main HNSW index; pass hnsw")
                pos = np.arange(n, dtype=np.int64)
                vecs = np.ascontiguousarray(hnsw.vectors(keys), dtype=np.float32)
            else:
                if embedder is None:
                    raise ConfigError("similarity edges over text fields need an embedder; pass one")
                texts: list[str] = []
                positions: list[int] = []
                for i, nd in enumerate(nodes):
                    text = field_text(nd, fname)
                    if text is not None:
                        texts.append(text)
                        positions.append(i)
                if not texts:
                    done += 1
                    report("similarity", done, steps)
                    continue
                pos = np.asarray(positions, dtype=np.int64)
                vecs = embed_all(embedder, texts, chunk=embed_chunk)
            timings["embed"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            src, dst = (knn_pairs or _knn_pairs)(vecs, knn)
            ga, gb = pos[src], pos[dst]
            lo, hi = np.minimum(ga, gb), np.maximum(ga, gb)
            codes = np.unique(lo * n + hi)
            knn_codes[fname] = codes
            directed.append(codes)
            full = np.full((n, vecs.shape[1]), np.nan, dtype=np.float32)
            full[pos] = vecs
            field_vecs[fname] = (pos, full)
            timings["knn"] += time.perf_counter() - t0
            done += 1
            report("similarity", done, steps)
        if not directed:
            continue
        t0 = time.perf_counter()
        union = np.unique(np.concatenate(directed))
        a, b = union // n, union % n
        sims: dict[str, np.ndarray] = {}
        in_knn: dict[str, np.ndarray] = {}
        for fname, (pos, full) in field_vecs.items():
            # NaN rows (field missing) propagate to NaN similarities, which never pass a threshold.
            sims[fname] = _pair_sims_nan(full, a, b)
            in_knn[fname] = np.isin(union, knn_codes[fname], assume_unique=True)
        timings["knn"] += time.perf_counter() - t0
        out[label] = LabelCandidates(
            label=label,
            keys=keys,
            fields=list(field_vecs),
            a=a,
            b=b,
            sims=sims,
            in_knn=in_knn,
            field_nodes={f: len(p) for f, (p, _) in field_vecs.items()},
        )
    return SimilarityCandidates(knn=knn, labels=out, timings_s={k: round(v, 3) for k, v in timings.items()})


def _pair_sims_nan(full: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(len(a), dtype=np.float32)
    for s in range(0, len(a), _PAIR_BATCH):
        va = full[a[s : s + _PAIR_BATCH]]
        vb = full[b[s : s + _PAIR_BATCH]]
        out[s : s + _PAIR_BATCH] = np.einsum("ij,ij->i", va, vb)
    return np.where(np.isnan(out), np.nan, np.clip(out, -1.0, 1.0)).astype(np.float32)


# -- the result ------------------------------------------------------------------------------------
@dataclass(slots=True)
class SimilarityEdge:
    """An undirected IS_SIMILAR edge (``src < dst``); ``score`` is the best passing field's similarity."""

    src: str
    dst: str
    label: str
    fields: list[str]
    score: float
    scores: dict[str, float]

    def to_record(self, percentile: float | None) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "rel": REL,
            "label": self.label,
            "fields": self.fields,
            "score": round(self.score, 6),
            "scores": {k: round(v, 6) for k, v in self.scores.items()},
            "percentile": percentile,
        }


@dataclass
class SimilarityGraph:
    """The chosen similarity edges plus what chose them (thresholds, candidate counts)."""

    edges: list[SimilarityEdge]
    percentile: float | None
    logic: Logic
    knn: int
    thresholds: dict[str, float]
    candidate_pairs: dict[str, int]
    nodes: dict[str, int] = field(default_factory=dict)
    fields: dict[str, list[str]] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.edges)

    def neighbors(self) -> dict[str, list[tuple[str, float]]]:
        table: dict[str, list[tuple[str, float]]] = {}
        for e in self.edges:
            table.setdefault(e.src, []).append((e.dst, e.score))
            table.setdefault(e.dst, []).append((e.src, e.score))
        return table

    def stats(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "rel": REL,
            "edges": self.count,
            "percentile": self.percentile,
            "logic": self.logic,
            "knn": self.knn,
            "thresholds": self.thresholds,
            "candidate_pairs": self.candidate_pairs,
            "nodes": self.nodes,
            "fields": self.fields,
            "edges_per_label": _count_by(e.label for e in self.edges),
            "timings_s": self.timings_s,
        }

    def save(self, dir: Path) -> dict[str, str]:
        """Write ``edges.jsonl.gz`` and ``stats.json`` atomically; returns {file: sha256}."""
        from graphs.manifest import atomic_write_bytes, atomic_write_json, sha256_file

        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        raw = io.BytesIO()
        # mtime=0: identical edges give an identical file (and checksum) on every rebuild.
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
            for e in self.edges:
                gz.write((json.dumps(e.to_record(self.percentile), ensure_ascii=False) + "\n").encode("utf-8"))
        atomic_write_bytes(dir / EDGES_FILE, raw.getvalue())
        atomic_write_json(dir / STATS_FILE, self.stats())
        return {EDGES_FILE: sha256_file(dir / EDGES_FILE), STATS_FILE: sha256_file(dir / STATS_FILE)}

    @classmethod
    def load(cls, dir: Path) -> SimilarityGraph:
        dir = Path(dir)
        epath, spath = dir / EDGES_FILE, dir / STATS_FILE
        if not epath.is_file() or not spath.is_file():
            raise IndexNotFoundError(
                f"no similarity edges in {dir} ({EDGES_FILE} or {STATS_FILE} missing) -- build them with "
                "`skb index --similarity-percentile 95`"
            )
        try:
            stats = json.loads(spath.read_text(encoding="utf-8"))
            edges: list[SimilarityEdge] = []
            with gzip.open(epath, "rt", encoding="utf-8") as fh:
                for line in fh:
                    rec = json.loads(line)
                    edges.append(
                        SimilarityEdge(
                            src=str(rec["src"]),
                            dst=str(rec["dst"]),
                            label=str(rec.get("label", "")),
                            fields=[str(f) for f in rec.get("fields", [])],
                            score=float(rec["score"]),
                            scores={str(k): float(v) for k, v in rec.get("scores", {}).items()},
                        )
                    )
            return cls(
                edges=edges,
                percentile=stats.get("percentile"),
                logic=stats.get("logic", "or"),
                knn=int(stats.get("knn", 0)),
                thresholds={str(k): float(v) for k, v in stats.get("thresholds", {}).items()},
                candidate_pairs={str(k): int(v) for k, v in stats.get("candidate_pairs", {}).items()},
                nodes={str(k): int(v) for k, v in stats.get("nodes", {}).items()},
                fields={str(k): list(v) for k, v in stats.get("fields", {}).items()},
                timings_s={str(k): float(v) for k, v in stats.get("timings_s", {}).items()},
            )
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            raise IndexCorruptError(
                f"similarity edges in {dir} cannot be read ({exc}) -- rebuild with `skb index`"
            ) from exc


def _count_by(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


# -- entry points --------------------------------------------------------------------------------
def build_similarity_edges(
    skb: SKB,
    hnsw: HNSWIndex | None,
    embedder: Embedder | None,
    config: SimilarityConfig,
    progress: StageProgress | None = None,
    *,
    fields: dict[str, list[str]] | None = None,
    labels: Sequence[str] | None = None,
    knn_pairs: KnnPairs | None = None,
    embed_chunk: int = _EMBED_BATCH,
) -> SimilarityGraph:
    """IS_SIMILAR edges for ``skb`` by ``config`` (percentile, logic, knn); schema edges are untouched.

    ``fields``/``labels`` override which node types and fields take part (see
    :func:`compute_candidates`).
    """
    _check_percentile(config.percentile)
    assert config.percentile is not None
    t0 = time.perf_counter()
    cands = compute_candidates(skb, hnsw, embedder, knn=config.knn, fields=fields, labels=labels, progress=progress,
                               knn_pairs=knn_pairs, embed_chunk=embed_chunk)
    graph = cands.select(config.percentile, config.logic)
    graph.timings_s["total"] = round(time.perf_counter() - t0, 3)
    return graph


def add_similarity_edges(skb: SKB, sim: SimilarityGraph) -> int:
    """Add the edges to ``skb`` as ``IS_SIMILAR`` (one direction, ``src < dst``); returns how many were added.

    Existing IS_SIMILAR edges between the same pair are not duplicated.
    """
    existing = {(e.src, e.dst) for e in skb.edges if e.rel == REL}
    added = 0
    for e in sim.edges:
        if e.src not in skb.nodes or e.dst not in skb.nodes:
            raise ConfigError(
                f"similarity edge {e.src!r} -- {e.dst!r} names a node this SKB lacks; build the edges from this SKB"
            )
        if (e.src, e.dst) in existing or (e.dst, e.src) in existing:
            continue
        skb.add_edge(Edge(src=e.src, rel=REL, dst=e.dst, props={"score": round(e.score, 6), "fields": list(e.fields)}))
        existing.add((e.src, e.dst))
        added += 1
    return added
