"""evals.studies.embedder_recall on the real mini HPO index: an index compared with itself agrees everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evals.studies.embedder_recall import _questions, _segments, compare


def test_an_index_compared_with_itself_agrees_fully(hpo_bundle: Any) -> None:
    texts = ["seizures and microcephaly", "tall stature, long fingers", "hearing loss"]
    report = compare(hpo_bundle, hpo_bundle, {"q": texts}, k=3)
    nodes = report["nodes/q"]
    assert nodes["n"] == 3 and nodes["query_cosine_min"] == pytest.approx(1.0, abs=1e-5)
    assert nodes["topk_candidate_exact_vs_baseline_exact"] == 1.0
    assert nodes["top1_agreement"] == 1.0
    assert report["nodes"] == len(hpo_bundle.hnsw.keys)


def test_questions_and_segments_from_csv(tmp_path: Path) -> None:
    bench = tmp_path / "b.csv"
    bench.write_text('id,query,answer_ids\n1,"Which disease has seizures, tall stature and hearing loss?",["A"]\n'
                     '2,x,["B"]\n')
    questions = _questions([bench], limit=1)
    assert questions == ["Which disease has seizures, tall stature and hearing loss?"]
    assert _segments(questions, 10) == ["Which disease has seizures", "tall stature", "hearing loss?"]


def test_a_missing_benchmark_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    from evals.studies.embedder_recall import main

    with pytest.raises(SystemExit, match="benchmark file not found"):
        main(["--baseline", str(tmp_path), "--candidate", str(tmp_path), "--bench", str(tmp_path / "none.csv")])
