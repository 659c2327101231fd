"""The interleaved A/B: every side, each in its own warm process, answers every question of every pass, and
the report gives each side's p50/p95 wall and CPU times per pass."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from evals.studies.ab_latency import run
from tests.paths import REPO


def test_two_sides_answer_every_question_of_every_pass(hpo_index_dir: Path, tmp_path: Path) -> None:
    bench = tmp_path / "q.csv"
    with bench.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "query"])
        for i in range(8):  # the first five warm the worker up; all eight are timed
            writer.writerow([i, f"Which disease is characterized by seizures ({i})?"])
    sides = [("a", REPO, hpo_index_dir), ("b", REPO, hpo_index_dir)]
    report = run(sides, bench, n=8, passes=2, python=sys.executable)
    assert set(report["results"]) == {"a pass 1", "a pass 2", "b pass 1", "b pass 2"}
    for stats in report["results"].values():
        assert stats["n"] == 8
        assert 0 < stats["p50"] <= stats["p95"]
        assert 0 < stats["cpu_p50"] <= stats["cpu_p95"]
    assert all(len(times) == 8 for times in report["raw"].values())
