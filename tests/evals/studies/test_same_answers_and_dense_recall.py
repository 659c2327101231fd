"""The two-sided comparison the equivalence studies share (``same_answers.compare``), and the global-graph recall
study (``hnsw_global_recall``) on the real mini HPO index."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.runner import QuestionResult
from evals.studies.hnsw_global_recall import run as global_recall
from evals.studies.same_answers import compare


def _result(qid: str, style: str, hit: float, ranked: list[str]) -> QuestionResult:
    return QuestionResult(id=qid, query=qid, answer_ids=["a"], style=style, metrics={"hit@1": hit},
                          ranked=[(k, 1.0 / (i + 1)) for i, k in enumerate(ranked)])


def test_compare_reports_each_cell_and_the_share_of_identical_top_20s() -> None:
    left = [_result("1", "1-hop", 1.0, ["a", "b"]), _result("2", "2-hop", 0.0, ["c", "a"]),
            _result("3", "2-hop", 1.0, ["a"])]
    right = [_result("1", "1-hop", 1.0, ["a", "b"]), _result("2", "2-hop", 1.0, ["a", "c"]),
             _result("3", "2-hop", 1.0, ["a"]), _result("9", "2-hop", 1.0, ["a"])]  # only on one side: not compared
    out = compare(left, right, ("ray", "in-process"))
    assert out["questions"] == 3
    assert out["hit@1"] == {"ray": pytest.approx(0.6667), "in-process": 1.0, "difference": pytest.approx(-0.3333)}
    assert out["hit@1_by_cell"] == {"1-hop": [1.0, 1.0], "2-hop": [0.5, 1.0]}
    assert out["largest_cell_difference"] == 0.5
    assert out["top20_identical"] == pytest.approx(0.6667) and out["first_different"] == "2"


def test_the_global_graph_and_the_label_graphs_merged_against_exact_search(hpo_index_dir: Path, tmp_path: Path) -> None:
    bench = tmp_path / "bench.csv"
    bench.write_text("id,query,answer_ids\n" + "".join(
        f'{i},"{q}","[]"\n' for i, q in enumerate(["seizures and microcephaly", "tall stature, long fingers",
                                                      "hearing loss", "Which gene is linked to Marfan syndrome?"])))
    report = global_recall(hpo_index_dir, bench, 4, [128], [128])
    assert report["questions"] == 4 and report["labels"] >= 2
    walked, merged = report["rows"]
    assert walked["search"] == "global graph" and merged["search"].endswith("label graphs merged")
    # a graph this small is searched exactly by both ways (fewer rows than the exact-search cutoff per label)
    assert merged["recall@20"] == 1.0 and merged["nearest_found"] == 1.0
    assert 0.0 < walked["recall@20"] <= 1.0 and walked["ms_per_query"] > 0
