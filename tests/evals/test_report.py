"""Report files and plots, unknown-key reporting, and paired comparison of synthetic runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.bench import Question, check_answers
from evals.compare import compare_runs, render_comparison
from evals.report import PLOT_FILES, RUN_FILE, RunInfo, write_report
from evals.runner import run_method
from evals.static import StaticRetriever
from graphs.errors import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N = 60


def questions() -> list[Question]:
    return [Question(id=str(i), query=f"q{i}", answer_ids=[f"A{i}"] if i % 10 else [f"A{i}", f"MISSING{i}"],
                     target_type="disease" if i % 3 else "gene", style="names") for i in range(N)]


def perfect() -> dict[str, list[str]]:
    return {f"q{i}": [f"A{i}", "X", "Y"] for i in range(N)}


def half() -> dict[str, list[str]]:
    """Answer at rank 1 for even questions, absent for odd ones."""
    return {f"q{i}": ([f"A{i}", "X"] if i % 2 == 0 else ["X", "Y"]) for i in range(N)}


def make_run(out: Path, methods: dict[str, dict[str, list[str]]], known: set[str] | None = None) -> Path:
    qs = questions()
    coverage = check_answers(qs, known) if known is not None else None
    info = RunInfo(bench="synthetic.csv", methods=list(methods), question_ids=[q.id for q in qs],
                   coverage=None if coverage is None else coverage.model_dump())
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN_FILE).write_text(info.model_dump_json())
    for name, table in methods.items():
        run_method(StaticRetriever(name, table, timings_ms={"search": 2.0}), qs, out, known=known, progress=False)
    return out


def test_report_files_and_pngs_are_written(tmp_path: Path) -> None:
    known = {f"A{i}" for i in range(N)}
    out = make_run(tmp_path / "run", {"half": half(), "perfect": perfect()}, known=known)
    metrics = write_report(out)
    for name in PLOT_FILES:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 5_000, f"{name} is suspiciously small"
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(metrics))
    assert list(on_disk["methods"]) == ["half", "perfect"], "methods keep the requested order"
    perfect_m = on_disk["methods"]["perfect"]
    assert perfect_m["overall"]["hit@1"]["mean"] == 1.0
    assert perfect_m["overall"]["recall@20"]["mean"] == pytest.approx((54 * 1.0 + 6 * 0.5) / 60)
    assert on_disk["methods"]["half"]["overall"]["hit@1"]["mean"] == 0.5
    assert set(perfect_m["groups"]["target_type"]) == {"disease", "gene"}
    assert perfect_m["groups"]["target_type"]["gene"]["hit@1"]["n"] == 20
    assert len(perfect_m["recall_curve"]) == 100
    assert perfect_m["latency_ms"]["search"]["p50"] == 2.0
    assert {"p50", "p95"} <= set(perfect_m["latency_ms"]["total"])
    assert perfect_m["config"]["method"] == "perfect"
    assert perfect_m["cost"]["llm_calls_mean"] == 0

    report = (out / "report.md").read_text()
    for needle in ("Hit@1", "R@20", "MRR", "p95 ms", "LLM calls/q", "## By target_type", "## Method configurations",
                   "`perfect`", "recall_at_k.png", "1.000 [1.000, 1.000]"):
        assert needle in report, needle


def test_unknown_answer_keys_are_reported_not_dropped(tmp_path: Path) -> None:
    known = {f"A{i}" for i in range(N) if i != 7}
    out = make_run(tmp_path / "run", {"perfect": perfect()}, known=known)
    metrics = write_report(out)
    cov = metrics["unknown_answers"]
    assert cov["unknown_count"] == 7, "six MISSING keys plus A7"
    assert "A7" in cov["unknown_examples"] and "MISSING10" in cov["unknown_examples"]
    assert cov["all_unknown_questions"] == ["7"]
    # Kept in the denominators: the questions with a missing second answer have recall 0.5.
    assert metrics["methods"]["perfect"]["overall"]["recall@20"]["mean"] < 1.0
    assert metrics["methods"]["perfect"]["questions_all_answers_unknown"] == ["7"]
    answerable = metrics["methods"]["perfect"]["overall_answerable"]
    assert answerable["hit@1"]["n"] == N - 1 and answerable["hit@1"]["mean"] == 1.0
    report = (out / "report.md").read_text()
    assert "Answer keys missing from the index" in report and "**7** of" in report and "MISSING10" in report
    assert "## Overall, questions with at least one answer in the index" in report


def test_unknown_answers_reported_from_results_without_run_info(tmp_path: Path) -> None:
    qs = questions()
    run_method(StaticRetriever("perfect", perfect()), qs, tmp_path, known={"A1"}, progress=False)
    cov = write_report(tmp_path)["unknown_answers"]
    assert cov["unknown_count"] == N - 1 + 6
    assert len(cov["all_unknown_questions"]) == N - 1


def test_report_is_deterministic(tmp_path: Path) -> None:
    out = make_run(tmp_path / "run", {"half": half()})
    first = write_report(out)
    assert write_report(out) == first


def test_compare_synthetic_runs_with_known_difference(tmp_path: Path) -> None:
    out = make_run(tmp_path / "run", {"half": half(), "perfect": perfect()})
    (comparison,) = compare_runs(out / "half", out / "perfect")
    assert comparison.n_paired == N
    by_metric = {d.metric: d for d in comparison.metrics}
    hit1 = by_metric["hit@1"]
    assert (hit1.mean_a, hit1.mean_b, hit1.mean_diff) == (0.5, 1.0, 0.5)
    assert hit1.ci_low <= 0.5 <= hit1.ci_high and hit1.ci_low > 0.3
    assert hit1.p_value < 0.01
    assert by_metric["mrr"].mean_diff == pytest.approx(0.5)
    text = render_comparison([comparison])
    assert "+0.500" in text and "`perfect` minus `half`" in text

    (same,) = compare_runs(out / "perfect", out / "perfect")
    assert all(d.mean_diff == 0.0 and d.p_value == 1.0 for d in same.metrics)


def test_compare_run_directories_matches_methods_by_name(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {"m1": half(), "m2": half()})
    b = make_run(tmp_path / "b", {"m1": perfect(), "other": perfect()})
    (only,) = compare_runs(a, b)
    assert (only.a, only.b) == ("m1", "m1")
    assert only.metrics[0].mean_diff == 0.5
    c = make_run(tmp_path / "c", {"x": half(), "y": half()})
    with pytest.raises(ConfigError, match="share no method"):
        compare_runs(a, c)
