"""The speed guard (``evals.speed_guard``) passes on this build and fails on a build with any one stage slowed by
1.5x (SLOWDOWN): each stage's CPU lower quartile over a pinned reference workload's, measured interleaved in several fresh
processes, against per-stage limits set from the guard's measured spread. The slowed build is this one with every
call of a stage made to use SLOWDOWN times its own CPU (``run_guard(slow=...)``, the mechanism ``--slow`` uses), so the
failure does not depend on how fast the machine is."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evals import speed_guard
from evals.speed_guard import (
    SLOWDOWN,
    GuardReport,
    Measurement,
    derive_limits,
    guard_index,
    run_guard,
    spread_markdown,
    summarise,
    write_report,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with guard_index(tmp_path_factory.mktemp("speed-guard")) as path:
        yield path


@pytest.fixture(scope="module")
def report(index_dir: Path) -> GuardReport:
    return run_guard(index_dir)


def test_the_guard_passes_and_reports_every_stage(report: GuardReport, tmp_path: Path) -> None:
    assert [s.stage for s in report.stages] == list(speed_guard.STAGES)
    assert speed_guard.PROCESSES <= report.processes <= 2 * speed_guard.PROCESSES
    assert len(report.judged) == len(report.cpus) == len(report.reference_p25_ms) == report.processes
    # more processes run until half of them count, up to twice as many
    assert sum(report.judged) >= (speed_guard.PROCESSES + 1) // 2 or report.processes == 2 * speed_guard.PROCESSES
    base = speed_guard.undisturbed_base(report.reference_p25_ms)
    assert sum(report.judged) >= 2  # the base and the fastest always count
    for judged, ms in zip(report.judged, report.reference_p25_ms):  # the report rounds to 1 microsecond
        assert ms <= speed_guard.UNDISTURBED * base + 0.002 if judged else ms >= speed_guard.UNDISTURBED * base - 0.002
    for stage in report.stages:
        assert stage.n == speed_guard.QUESTIONS * speed_guard.REPEATS * report.processes
        assert len(stage.attempts) == report.processes
        assert 0 < stage.p50_ms <= stage.p95_ms
        assert stage.tolerance == speed_guard.TOLERANCES[stage.stage] < SLOWDOWN
        assert stage.limit == pytest.approx(stage.pinned * stage.tolerance, rel=1e-3)
        assert 0 < stage.spread < 0.5
    assert report.passed, speed_guard.markdown(report)
    assert report.slowed == {}
    json_path, md_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["passed"] is True
    assert "| agent |" in md_path.read_text() and "spread (CV)" in md_path.read_text()


def test_every_stage_slowed_by_the_slowdown_fails(report: GuardReport, index_dir: Path) -> None:
    """Each stage's calls made to use SLOWDOWN times their CPU (all three in one run: each stage is measured against the
    reference on its own): every stage's ratio rises past its limit, and the guard fails."""
    slow = run_guard(index_dir, slow=dict.fromkeys(speed_guard.STAGES, SLOWDOWN))
    plain = {s.stage: s.ratio for s in report.stages}
    assert slow.slowed == dict.fromkeys(speed_guard.STAGES, SLOWDOWN)
    assert not slow.passed
    for stage in slow.stages:  # the verdict is what must hold; the two runs' ratios only have to be in order
        assert not stage.passed, speed_guard.markdown(slow)
        assert stage.ratio > plain[stage.stage], speed_guard.markdown(slow)


def test_one_process_measures_every_stage_beside_the_reference_on_one_cpu(index_dir: Path) -> None:
    found = speed_guard.measure(index_dir, questions=4, repeats=1)
    assert isinstance(found, Measurement)
    assert {k: len(v) for k, v in found.cpu.items()} == {"reference": 12, "agent": 4, "search": 4, "expand": 4}
    assert found.on_cpu is None or found.on_cpu in os.sched_getaffinity(0)
    assert all(found.ratio(stage) > 0 for stage in speed_guard.STAGES)
    with pytest.raises(ValueError, match="slow: stages are"):
        speed_guard.measure(index_dir, slow={"answer": 2.0})


def test_limits_lie_halfway_between_the_spread_and_the_slowdown() -> None:
    pin, deviation, tolerance = derive_limits([1.0, 1.04, 0.98, 1.02], slowdown=1.3)
    assert (pin, deviation) == (pytest.approx(1.01), pytest.approx(0.03 / 1.01))
    assert tolerance is not None and 1 + deviation < tolerance < 1.3 * (1 - deviation)
    assert tolerance - (1 + deviation) == pytest.approx(1.3 * (1 - deviation) - tolerance, abs=1e-3)
    assert derive_limits([1.0, 1.2, 0.85, 1.19, 0.86], slowdown=1.3)[2] is None  # too noisy: a slowed run could pass


def test_the_summary_of_repeated_runs_names_each_stages_spread(report: GuardReport) -> None:
    runs = {f"run-{i}": report for i in range(3)}
    spread = summarise(runs)
    assert [s.stage for s in spread.stages] == list(speed_guard.STAGES)
    assert all(s.deviation == 0 and s.runs == 3 for s in spread.stages)
    assert "| run-2 |" in spread_markdown(spread)
    with pytest.raises(ValueError, match="at least two plain runs"):
        summarise({"one": report})
