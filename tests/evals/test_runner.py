"""Runner: resumable results, crash recovery, threaded runs, recorded errors, pinned configs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from evals.bench import Question
from evals.protocol import Retrieval, Retriever
from evals.report import build_metrics, load_run, read_run_info
from evals.runner import RESULTS_FILE, method_dir_name, read_results, run_method
from evals.static import StaticRetriever
from graphs.errors import ConfigError, LoaderError


class Crash(BaseException):
    """Stands in for a kill: not an Exception, so the runner must not swallow it."""


def make_questions(n: int) -> list[Question]:
    return [Question(id=f"q{i}", query=f"question {i}", answer_ids=[f"A{i}"],
                     target_type="disease" if i % 2 else "gene") for i in range(n)]


def rankings(n: int) -> dict[str, list[str]]:
    """Answer of question i at rank (i % 4) + 1, every 5th question missed."""
    table = {}
    for i in range(n):
        filler = [f"N{i}_{j}" for j in range(30)]
        if i % 5 == 4:
            table[f"question {i}"] = filler
        else:
            pos = i % 4
            table[f"question {i}"] = [*filler[:pos], f"A{i}", *filler[pos:]]
    return table


class Counting:
    """Wraps a retriever, counts calls per question, optionally crashes on the (n+1)-th call."""

    def __init__(self, inner: Retriever, crash_after: int | None = None, fail: set[str] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.config = inner.config
        self.crash_after = crash_after
        self.fail = fail or set()
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def retrieve(self, question: str) -> Retrieval:
        with self._lock:
            if self.crash_after is not None and len(self.calls) >= self.crash_after:
                raise Crash()
            self.calls.append(question)
        if question in self.fail:
            raise RuntimeError("backend down")
        return self.inner.retrieve(question)


def _metrics(out: Path) -> dict[str, object]:
    metrics = build_metrics(load_run(out), read_run_info(out))
    return metrics["methods"]["static"]["overall"]  # type: ignore[no-any-return]


def test_resume_after_crash_runs_only_the_rest_and_matches_clean_run(tmp_path: Path) -> None:
    questions = make_questions(20)
    table = rankings(20)

    clean = tmp_path / "clean"
    run_method(StaticRetriever("static", table), questions, clean, progress=False)

    out = tmp_path / "resumed"
    crashing = Counting(StaticRetriever("static", table), crash_after=7)
    with pytest.raises(Crash):
        run_method(crashing, questions, out, progress=False)
    path = out / "static" / RESULTS_FILE
    assert len(read_results(path)) == 7
    # A kill during a write leaves half a line behind.
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "q7", "query": "question 7", "answ')

    again = Counting(StaticRetriever("static", table))
    summary = run_method(again, questions, out, progress=False)
    assert again.calls == [f"question {i}" for i in range(7, 20)], "only unfinished questions run"
    assert (summary.skipped, summary.ran, summary.errors) == (7, 13, 0)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20 and all(json.loads(line) for line in lines), "file is valid JSONL after the resume"
    assert _metrics(out) == _metrics(clean)

    third = Counting(StaticRetriever("static", table))
    assert run_method(third, questions, out, progress=False).ran == 0
    assert third.calls == []


def test_threaded_run_equals_sequential(tmp_path: Path) -> None:
    questions = make_questions(40)
    table = rankings(40)
    run_method(StaticRetriever("static", table), questions, tmp_path / "seq", progress=False)
    summary = run_method(StaticRetriever("static", table), questions, tmp_path / "par", workers=4, progress=False)
    assert summary.ran == 40
    seq = {r.id: r.metrics for r in read_results(tmp_path / "seq" / "static" / RESULTS_FILE)}
    par = {r.id: r.metrics for r in read_results(tmp_path / "par" / "static" / RESULTS_FILE)}
    assert seq == par
    assert _metrics(tmp_path / "seq") == _metrics(tmp_path / "par")


def test_threaded_crash_leaves_valid_file_and_resume_completes(tmp_path: Path) -> None:
    questions = make_questions(30)
    table = rankings(30)
    with pytest.raises(Crash):
        run_method(Counting(StaticRetriever("static", table), crash_after=10), questions, tmp_path, workers=3,
                   progress=False)
    done = {r.id for r in read_results(tmp_path / "static" / RESULTS_FILE)}
    assert 0 < len(done) <= 10
    rest = Counting(StaticRetriever("static", table))
    run_method(rest, questions, tmp_path, workers=3, progress=False)
    assert sorted(rest.calls) == sorted(q.query for q in questions if q.id not in done)
    assert len(read_results(tmp_path / "static" / RESULTS_FILE)) == 30


def test_failed_questions_are_recorded_as_misses_and_retried(tmp_path: Path) -> None:
    questions = make_questions(6)
    table = rankings(6)
    flaky = Counting(StaticRetriever("static", table), fail={"question 0"})
    summary = run_method(flaky, questions, tmp_path, progress=False)
    assert summary.errors == 1
    by_id = {r.id: r for r in read_results(tmp_path / "static" / RESULTS_FILE)}
    assert by_id["q0"].error == "RuntimeError: backend down"
    assert by_id["q0"].metrics["hit@1"] == 0.0
    assert "total" in by_id["q0"].timings_ms
    healed = Counting(StaticRetriever("static", table))
    run_method(healed, questions, tmp_path, progress=False)
    assert healed.calls == ["question 0"]
    assert read_results(tmp_path / "static" / RESULTS_FILE)[0].error is None
    assert {r.id: r.error for r in read_results(tmp_path / "static" / RESULTS_FILE)}["q0"] is None


def test_resume_with_another_config_is_refused(tmp_path: Path) -> None:
    questions = make_questions(3)
    run_method(StaticRetriever("static", rankings(3), config={"k": 10}), questions, tmp_path, progress=False)
    with pytest.raises(ConfigError, match="different configuration.*k"):
        run_method(StaticRetriever("static", rankings(3), config={"k": 20}), questions, tmp_path, progress=False)


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    questions = make_questions(3)
    run_method(StaticRetriever("static", rankings(3)), questions, tmp_path, progress=False)
    path = tmp_path / "static" / RESULTS_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(LoaderError, match="record 2"):
        read_results(path)


def test_result_lines_hold_ranking_metrics_and_unknown_answers(tmp_path: Path) -> None:
    questions = make_questions(4)
    run_method(StaticRetriever("static", rankings(4), timings_ms={"search": 1.5}), questions, tmp_path,
               known={"A0", "A1"}, progress=False)
    by_id = {r.id: r for r in read_results(tmp_path / "static" / RESULTS_FILE)}
    assert by_id["q1"].ranked_keys[1] == "A1" and by_id["q1"].metrics["mrr"] == 0.5
    assert by_id["q1"].n_returned == 31
    assert by_id["q0"].unknown_answers == [] and not by_id["q0"].all_answers_unknown
    assert by_id["q2"].unknown_answers == ["A2"] and by_id["q2"].all_answers_unknown
    assert by_id["q3"].timings_ms["search"] == 1.5 and "total" in by_id["q3"].timings_ms


def test_method_dir_names_are_portable() -> None:
    assert method_dir_name("agent+sage:skip-when-explicit-edges") == "agent+sage_skip-when-explicit-edges"
    assert method_dir_name("hybrid+sage") == "hybrid+sage"


def test_a_sequential_run_freezes_its_heap_once_warm(tmp_path: Path) -> None:
    """After WARM_QUESTIONS questions the survivors are frozen (full collections stop rescanning the
    index's tables); a shorter run leaves the collector alone."""
    import gc

    from evals.runner import WARM_QUESTIONS

    gc.unfreeze()
    try:
        run_method(StaticRetriever("static", rankings(5)), make_questions(5), tmp_path / "short", progress=False)
        assert gc.get_freeze_count() == 0
        n = WARM_QUESTIONS + 3
        run_method(StaticRetriever("static", rankings(n)), make_questions(n), tmp_path / "warm", progress=False)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
