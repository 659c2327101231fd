"""Graph statistics of similarity edges (numbers checked by hand) and `skb graph stats` on a real index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from graphs.sage.edges import SimilarityEdge, SimilarityGraph
from graphs.sage.stats import degree_array, graph_stats, plot_degree_histograms, stats_from_edges

if TYPE_CHECKING:
    from graphs.skb.model import SKB


def test_stats_from_edges_by_hand() -> None:
    # 6 nodes a..f: triangle a-b-c, edge d-e, f isolated; (b, a) repeats a-b, (c, c) is a loop.
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("d", "e"), ("b", "a"), ("c", "c")]
    s = stats_from_edges(edges, nodes=6, candidate_pairs=8)
    assert s["edges"] == 4
    assert s["kept_pct"] == pytest.approx(50.0)
    assert s["avg_degree"] == pytest.approx(8 / 6)
    assert s["density"] == pytest.approx(4 / 15)
    assert s["max_degree"] == 2
    assert s["isolated_pct"] == pytest.approx(100 / 6)


def _edge(a: str, b: str, label: str, score: float = 0.9) -> SimilarityEdge:
    return SimilarityEdge(src=a, dst=b, label=label, fields=["name"], score=score, scores={"name": score})


def test_graph_stats_over_two_labels_by_hand() -> None:
    # Label A: 4 nodes, 3 edges (a1 is the hub); label B: 3 nodes, 1 edge.
    sim = SimilarityGraph(
        edges=[_edge("a1", "a2", "A"), _edge("a1", "a3", "A"), _edge("a1", "a4", "A"), _edge("b1", "b2", "B")],
        percentile=95.0,
        logic="or",
        knn=2,
        thresholds={"A.name": 0.8, "B.name": 0.7},
        candidate_pairs={"A": 5, "A.name": 5, "B": 3, "B.name": 3},
        nodes={"A": 4, "B": 3},
    )
    row = graph_stats(sim)
    assert (row.edges, row.candidate_pairs, row.nodes, row.max_degree) == (4, 8, 7, 3)
    assert row.kept_pct == pytest.approx(50.0)
    assert row.avg_degree == pytest.approx(8 / 7)
    # Possible pairs: C(4,2) + C(3,2) = 6 + 3 = 9 (no cross-label edges exist).
    assert row.density == pytest.approx(4 / 9)
    assert row.isolated_pct == pytest.approx(100 / 7)  # b3
    assert row.per_label["A"].density == pytest.approx(3 / 6)
    assert row.per_label["A"].kept_pct == pytest.approx(60.0)
    assert row.per_label["B"].avg_degree == pytest.approx(2 / 3)
    assert sorted(degree_array(sim).tolist()) == [0, 1, 1, 1, 1, 1, 3]


def test_degree_histogram_png(tmp_path: Path) -> None:
    sim = SimilarityGraph(
        edges=[_edge("a1", "a2", "A")], percentile=90.0, logic="or", knn=2, thresholds={},
        candidate_pairs={"A": 2}, nodes={"A": 3},
    )
    path = plot_degree_histograms({(90.0, "or"): degree_array(sim), (90.0, "and"): degree_array(sim)},
                                  tmp_path / "h" / "deg.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sage_index(tmp_path_factory: pytest.TempPathFactory, hpo_mini_skb: SKB) -> Path:
    """A real index of the mini HPO fixture built with similarity edges (no graph store)."""
    from graphs.build import IndexConfig, SimilarityConfig, build_index

    index_dir = tmp_path_factory.mktemp("sage_index") / "index"
    summary = build_index(
        hpo_mini_skb, index_dir, IndexConfig(dataset="hpo", store="none", similarity=SimilarityConfig(percentile=90))
    )
    assert summary.similarity_edges > 0
    return index_dir


@pytest.mark.integration
def test_build_index_writes_checksummed_similarity_edges(sage_index: Path) -> None:
    from graphs.bundle import IndexBundle
    from graphs.sage.edges import SimilarityGraph as SG

    with IndexBundle.open(sage_index) as bundle:
        assert {"sage/edges.jsonl.gz", "sage/stats.json"} <= set(bundle.manifest.files)
        sim = SG.load(sage_index / "sage")
        assert sim.count > 0 and sim.percentile == 90
        e = sim.edges[0]
        assert (e.dst, pytest.approx(e.score, abs=1e-5)) in bundle.similarity_neighbors(e.src)
        assert all(bundle.skb.nodes[x.src].label == bundle.skb.nodes[x.dst].label == x.label for x in sim.edges)


@pytest.mark.integration
def test_cli_graph_stats_reports_every_setting_without_touching_the_index(sage_index: Path, tmp_path: Path) -> None:
    from agent.cli.graph_stats import graph_app
    from graphs.manifest import checksum_tree

    before = checksum_tree(sage_index)
    out = tmp_path / "stats"
    result = CliRunner().invoke(
        graph_app,
        ["stats", "--index-dir", str(sage_index), "--percentiles", "90,99", "--logic", "or,and", "--knn", "5",
         "--out", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {(r["percentile"], r["logic"]): r for r in report["rows"]}
    assert set(rows) == {(90.0, "or"), (90.0, "and"), (99.0, "or"), (99.0, "and")}
    for p in (90.0, 99.0):
        assert rows[(p, "and")]["edges"] <= rows[(p, "or")]["edges"]
    assert rows[(99.0, "or")]["edges"] <= rows[(90.0, "or")]["edges"]
    r = rows[(90.0, "or")]
    assert r["kept_pct"] == pytest.approx(100 * r["edges"] / r["candidate_pairs"])
    assert r["avg_degree"] == pytest.approx(2 * r["edges"] / r["nodes"])
    assert (out / "degree_hist.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "stats.json").read_text())["rows"][0]["percentile"] == 90.0
    assert checksum_tree(sage_index) == before

    # The rich table names the settings; bad input is a clear error, not a traceback.
    table = CliRunner().invoke(graph_app, ["stats", "--index-dir", str(sage_index), "--percentiles", "95",
                                           "--logic", "or", "--out", str(out)])
    assert table.exit_code == 0, table.output
    assert "SAGE similarity edges" in table.stdout and "OR" in table.stdout
    bad = CliRunner().invoke(graph_app, ["stats", "--index-dir", str(sage_index), "--percentiles", "95,abc"])
    assert bad.exit_code == 2 and "not a number" in bad.output
    inside = CliRunner().invoke(graph_app, ["stats", "--index-dir", str(sage_index), "--out", str(sage_index / "x")])
    assert inside.exit_code == 2 and "inside the index" in inside.output
    missing = CliRunner().invoke(graph_app, ["stats", "--index-dir", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no index" in missing.output
