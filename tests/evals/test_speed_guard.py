"""The speed guard (``evals.speed_guard``) passes on this build and fails on a build whose question path is
slowed: the stages' p50 over a pinned reference workload, measured interleaved in one process, against
the pinned ratios. The slowed build is this one with a delay put into the hot path (the neighbour
aggregate every expansion makes), sized from this machine's own measurement, so the failure does not
depend on how fast the machine is."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tools.search_nodes as search_nodes_module
from evals import speed_guard
from evals.speed_guard import GuardReport, guard_index, run_guard, write_report

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
    for stage in report.stages:
        assert stage.n == speed_guard.QUESTIONS * speed_guard.REPEATS
        assert 0 < stage.p50_ms <= stage.p95_ms
        assert stage.limit == pytest.approx(stage.pinned * speed_guard.TOLERANCE, rel=1e-3)
    assert report.passed, speed_guard.markdown(report)
    json_path, md_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["passed"] is True
    assert "| agent |" in md_path.read_text() and "p95 ms" in md_path.read_text()


def test_the_guard_fails_when_the_hot_path_slows(
    report: GuardReport, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every neighbour aggregate made to burn three times the CPU a whole expansion used here: the expansion
    stage's ratio about quadruples, far past the tolerance (the guard compares CPU time, so the delay is
    work, not a sleep)."""
    expand = next(s for s in report.stages if s.stage == "expand")
    delay = 3 * expand.cpu_p50_ms / 1000.0
    real = search_nodes_module.skb_aggregate

    def slowed(*args: Any, **kwargs: Any) -> Any:
        end = time.process_time() + delay
        while time.process_time() < end:
            pass
        return real(*args, **kwargs)

    monkeypatch.setattr(search_nodes_module, "skb_aggregate", slowed)
    slow = run_guard(index_dir, questions=8, repeats=2)
    verdicts = {s.stage: s.passed for s in slow.stages}
    assert not slow.passed and verdicts["expand"] is False, speed_guard.markdown(slow)
