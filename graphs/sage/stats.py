"""Statistics of SAGE similarity graphs across percentiles and OR/AND logic.

Why: the percentile trades recall of useful neighbours against noise and fan-out at
query time; SAGE picks it by looking at how many edges each setting keeps and how
dense the result is. These numbers are computed from one candidate set (one embedding
pass, one kNN search) for every setting, and never write into the index.

Definitions (over the node types that take part in similarity edges):

- ``edges``: undirected IS_SIMILAR edges kept.
- ``kept_pct``: ``100 * edges / candidate_pairs`` (candidate pairs = distinct kNN pairs,
  union over fields, summed over labels).
- ``avg_degree``: ``2 * edges / nodes``.
- ``density``: ``edges / sum_label C(n_label, 2)``: edges only join nodes of the same
  label, so that is the number of possible edges.
- ``isolated_pct``: share of nodes with no similarity edge; ``max_degree``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
from pydantic import BaseModel, Field

from graphs.errors import ConfigError

if TYPE_CHECKING:
    from graphs.embedding.base import Embedder
    from graphs.index.hnsw import HNSWIndex
    from graphs.sage.edges import SimilarityCandidates, SimilarityGraph
    from graphs.skb.model import SKB

__all__ = [
    "GraphStatsReport",
    "GraphStatsRow",
    "LabelStats",
    "collect_stats",
    "degree_array",
    "graph_stats",
    "plot_degree_histograms",
    "stats_from_edges",
    "sweep",
]

Logic = Literal["or", "and"]


class LabelStats(BaseModel):
    nodes: int
    edges: int
    candidate_pairs: int
    kept_pct: float
    avg_degree: float
    density: float


class GraphStatsRow(BaseModel):
    """One (percentile, logic) setting: the table SAGE reports, plus degree extremes."""

    percentile: float
    logic: str
    edges: int
    candidate_pairs: int
    kept_pct: float
    nodes: int
    avg_degree: float
    density: float
    max_degree: int
    isolated_pct: float
    thresholds: dict[str, float] = Field(default_factory=dict)
    per_label: dict[str, LabelStats] = Field(default_factory=dict)


class GraphStatsReport(BaseModel):
    index_dir: str
    knn: int
    fields: dict[str, list[str]]
    nodes: dict[str, int]
    candidate_pairs: dict[str, int]
    rows: list[GraphStatsRow]
    timings_s: dict[str, float] = Field(default_factory=dict)
    histogram_png: str | None = None


def _pairs_possible(n: int) -> int:
    return n * (n - 1) // 2


def stats_from_edges(
    edges: Iterable[tuple[str, str]],
    nodes: int,
    candidate_pairs: int,
    possible_pairs: int | None = None,
) -> dict[str, float]:
    """The headline numbers for one undirected edge list over ``nodes`` nodes.

    ``possible_pairs`` defaults to ``C(nodes, 2)`` (one label).
    """
    pairs = {(a, b) if a < b else (b, a) for a, b in edges if a != b}
    e = len(pairs)
    degree: Counter[str] = Counter()
    for a, b in pairs:
        degree[a] += 1
        degree[b] += 1
    if len(degree) > nodes:
        raise ConfigError(f"{len(degree)} nodes have edges but the graph was said to have only {nodes} nodes")
    possible = _pairs_possible(nodes) if possible_pairs is None else possible_pairs
    return {
        "edges": e,
        "candidate_pairs": candidate_pairs,
        "kept_pct": 100.0 * e / candidate_pairs if candidate_pairs else 0.0,
        "nodes": nodes,
        "avg_degree": 2.0 * e / nodes if nodes else 0.0,
        "density": e / possible if possible else 0.0,
        "max_degree": max(degree.values(), default=0),
        "isolated_pct": 100.0 * (nodes - len(degree)) / nodes if nodes else 0.0,
    }


def graph_stats(sim: SimilarityGraph) -> GraphStatsRow:
    """Stats of one similarity graph, overall and per label."""
    per_label: dict[str, LabelStats] = {}
    for label, n in sorted(sim.nodes.items()):
        lab_edges = [(e.src, e.dst) for e in sim.edges if e.label == label]
        s = stats_from_edges(lab_edges, n, sim.candidate_pairs.get(label, 0))
        per_label[label] = LabelStats(
            nodes=n,
            edges=int(s["edges"]),
            candidate_pairs=int(s["candidate_pairs"]),
            kept_pct=s["kept_pct"],
            avg_degree=s["avg_degree"],
            density=s["density"],
        )
    total_nodes = sum(sim.nodes.values())
    total = stats_from_edges(
        ((e.src, e.dst) for e in sim.edges),
        total_nodes,
        sum(sim.candidate_pairs.get(label, 0) for label in sim.nodes),
        possible_pairs=sum(_pairs_possible(n) for n in sim.nodes.values()),
    )
    return GraphStatsRow(
        percentile=float(sim.percentile if sim.percentile is not None else float("nan")),
        logic=sim.logic,
        edges=int(total["edges"]),
        candidate_pairs=int(total["candidate_pairs"]),
        kept_pct=total["kept_pct"],
        nodes=total_nodes,
        avg_degree=total["avg_degree"],
        density=total["density"],
        max_degree=int(total["max_degree"]),
        isolated_pct=total["isolated_pct"],
        thresholds=dict(sim.thresholds),
        per_label=per_label,
    )


def degree_array(sim: SimilarityGraph) -> np.ndarray:
    """Degree of every participating node, zeros included (for histograms)."""
    degree: Counter[str] = Counter()
    for e in sim.edges:
        degree[e.src] += 1
        degree[e.dst] += 1
    nodes = sum(sim.nodes.values())
    values = np.zeros(max(nodes, len(degree)), dtype=np.int64)
    values[: len(degree)] = list(degree.values())
    return values


def sweep(
    cands: SimilarityCandidates, percentiles: Sequence[float], logics: Sequence[Logic]
) -> tuple[list[GraphStatsRow], dict[tuple[float, str], np.ndarray]]:
    """Rows and degree arrays for every (percentile, logic), from one candidate set."""
    rows: list[GraphStatsRow] = []
    degrees: dict[tuple[float, str], np.ndarray] = {}
    for p in percentiles:
        for logic in logics:
            sim = cands.select(p, logic)
            rows.append(graph_stats(sim))
            degrees[(float(p), logic)] = degree_array(sim)
    return rows, degrees


def plot_degree_histograms(
    degrees: dict[tuple[float, str], np.ndarray], path: Path, title: str = "IS_SIMILAR degree distribution"
) -> Path:
    """One panel per (logic, percentile), log-scaled counts; written atomically as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from graphs.manifest import atomic_write_bytes

    if not degrees:
        raise ConfigError("no degree data to plot; give at least one percentile and one logic")
    percentiles = sorted({p for p, _ in degrees})
    logics = sorted({lg for _, lg in degrees}, key=lambda lg: (lg != "or", lg))
    fig, axes = plt.subplots(
        len(logics), len(percentiles), figsize=(3.2 * len(percentiles), 2.8 * len(logics)), squeeze=False
    )
    top = max(int(d.max(initial=0)) for d in degrees.values())
    bins = np.arange(0, top + 2) - 0.5
    for r, logic in enumerate(logics):
        for c, p in enumerate(percentiles):
            ax = axes[r][c]
            deg = degrees.get((p, logic))
            if deg is None:
                ax.set_visible(False)
                continue
            ax.hist(deg, bins=bins, color="#4c72b0" if logic == "or" else "#dd8452")
            ax.set_yscale("log")
            ax.set_title(f"p{p:g} {logic.upper()}: mean {deg.mean():.2f}", fontsize=9)
            ax.set_xlabel("degree", fontsize=8)
            if c == 0:
                ax.set_ylabel("nodes", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path


class IndexParts(Protocol):
    """What `collect_stats` reads of an open index (an `IndexBundle` has these). A protocol, not the bundle
    class: SAGE sits below the bundle, and naming it here would point an import upwards."""

    @property
    def index_dir(self) -> Path: ...

    @property
    def skb(self) -> SKB: ...

    @property
    def hnsw(self) -> HNSWIndex: ...

    @property
    def embedder(self) -> Embedder: ...


def collect_stats(
    bundle: IndexParts,
    percentiles: Sequence[float],
    logics: Sequence[Logic],
    *,
    knn: int = 20,
    fields: dict[str, list[str]] | None = None,
    labels: Sequence[str] | None = None,
    out_dir: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> GraphStatsReport:
    """Sweep an index's SKB; writes ``stats.json`` and ``degree_hist.png`` to ``out_dir`` (never the index)."""
    import time

    from graphs.sage.edges import compute_candidates

    if not percentiles:
        raise ConfigError("give at least one percentile, e.g. --percentiles 90,95,97,99")
    for logic in logics:
        if logic not in ("or", "and"):
            raise ConfigError(f"unknown logic {logic!r}; use or, and, or or,and")
    if out_dir is not None:
        index_dir = Path(bundle.index_dir).resolve()
        target = Path(out_dir).resolve()
        if target == index_dir or index_dir in target.parents:
            raise ConfigError(f"--out {out_dir} is inside the index {bundle.index_dir}; choose a directory outside it")
    t0 = time.perf_counter()
    cands = compute_candidates(bundle.skb, bundle.hnsw, bundle.embedder, knn=knn, fields=fields, labels=labels,
                               progress=progress)
    t_cand = time.perf_counter() - t0
    t0 = time.perf_counter()
    if progress is not None:
        progress("sweep", 0, 1)
    rows, degrees = sweep(cands, percentiles, logics)
    if progress is not None:
        progress("sweep", 1, 1)
    t_sweep = time.perf_counter() - t0
    report = GraphStatsReport(
        index_dir=str(bundle.index_dir),
        knn=knn,
        fields={label: list(c.fields) for label, c in cands.labels.items()},
        nodes=cands.node_counts(),
        candidate_pairs=cands.candidate_pairs(),
        rows=rows,
        timings_s={"candidates": round(t_cand, 3), **cands.timings_s, "sweep": round(t_sweep, 3)},
    )
    if out_dir is not None:
        from graphs.manifest import atomic_write_text

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if degrees:
            report.histogram_png = str(plot_degree_histograms(degrees, out / "degree_hist.png"))
        atomic_write_text(out / "stats.json", report.model_dump_json(indent=2) + "\n")
    return report
