"""The speed guard (``evals.speed_guard``) passes this build against its baseline commit and fails an arm of this
build with every stage slowed by SLOWDOWN (1.3x): both builds index the generated workload with their own code and
answer it in lock-step, and each stage is judged by its CPU ratio to the baseline. The slowed arm makes every call use
SLOWDOWN times its own CPU, so the failure does not depend on how fast the machine is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evals import speed_guard
from evals.speed.baseline import BaselineError, checkout, repo_root, resolve
from evals.speed.lockstep import STAGES, Arm, PairMeasurement
from evals.speed.report import GuardReport, derive_tolerance, spread_markdown, summarise, write_report
from evals.speed.workload import graph_document, guard_questions, guard_skb
from evals.speed_guard import SLOWDOWN, run_guard

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def report() -> GuardReport:
    return run_guard(slow=SLOWDOWN)


def test_this_build_passes_against_its_baseline(report: GuardReport, tmp_path: Path) -> None:
    assert report.baseline == resolve(speed_guard.BASELINE, repo_root())
    assert [s.stage for s in report.stages] == list(STAGES)
    assert report.pairs == speed_guard.PAIRS
    for stage in report.stages:
        assert stage.n == speed_guard.QUESTIONS * speed_guard.REPEATS * speed_guard.PAIRS
        assert 0 < stage.base_p50_ms <= stage.base_p95_ms and 0 < stage.this_p50_ms <= stage.this_p95_ms
        assert 1.0 < stage.tolerance == speed_guard.TOLERANCES[stage.stage] < SLOWDOWN
        plain = next(a for a in stage.arms if a.slow == 1.0)
        assert len(plain.pairs) == speed_guard.PAIRS and 0 <= plain.spread < 0.1
        assert plain.passed, speed_guard.markdown(report)
    assert report.passed, speed_guard.markdown(report)
    json_path, md_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["passed"] is True
    assert "| expand | this |" in md_path.read_text() and "spread (CV)" in md_path.read_text()


def test_every_stage_slowed_by_the_slowdown_fails(report: GuardReport) -> None:
    """Each stage's calls made to use SLOWDOWN times their CPU, in an arm of its own: every stage's ratio to the
    baseline rises past its tolerance and above the plain arm's."""
    assert report.slowed == SLOWDOWN and report.slowed_caught is True
    for stage in report.stages:
        plain, slowed = (next(a for a in stage.arms if (a.slow > 1.0) == s) for s in (False, True))
        assert not slowed.passed and slowed.ratio > stage.tolerance, speed_guard.markdown(report)
        assert slowed.ratio > plain.ratio


def test_a_baseline_missing_from_history_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not in the history.*git fetch --unshallow"):
        resolve("0" * 40, repo_root())
    cli = subprocess.run([sys.executable, "-m", "evals.speed_guard", "--baseline", "0" * 40, "--pairs", "1"],
                         capture_output=True, text=True, cwd=repo_root(), timeout=120, check=False)  # fmt: skip
    assert cli.returncode == 2 and "git fetch --unshallow" in cli.stderr and "Traceback" not in cli.stderr
    with pytest.raises(BaselineError, match="not a checkout of this project"):
        run_guard(baseline_dir=tmp_path, pairs=1)


def test_the_baseline_is_checked_out_without_touching_the_repository() -> None:
    status = ["git", "-C", str(repo_root()), "status", "--porcelain", "--untracked-files=no"]
    worktrees = ["git", "-C", str(repo_root()), "worktree", "list", "--porcelain"]
    before = [subprocess.run(c, capture_output=True, text=True, check=True).stdout for c in (status, worktrees)]
    with checkout(speed_guard.BASELINE) as (commit, tree):
        assert commit == resolve(speed_guard.BASELINE, repo_root())
        assert (tree / "graphs" / "bundle.py").is_file() and (tree / "agent" / "api.py").is_file()
        assert not (tree / "evals").exists() and not (tree / "tests").exists()
        kept = tree
    assert not kept.exists()
    after = [subprocess.run(c, capture_output=True, text=True, check=True).stdout for c in (status, worktrees)]
    assert after == before


def test_the_workload_is_one_graph_for_both_sides() -> None:
    skb = guard_skb()
    doc = graph_document(skb)
    assert len(doc["nodes"]) == len(skb.nodes) and len(doc["edges"]) == len(skb.edges)
    assert graph_document(guard_skb()) == doc  # deterministic: both sides index exactly this
    asked = guard_questions(skb, 4)
    assert asked == guard_questions(guard_skb(), 4) and all(q.startswith("Which item shows") for q, _ in asked)


def test_a_ratio_is_the_median_of_calls_made_side_by_side() -> None:
    pair = PairMeasurement(
        cpu={"base": {"agent": [10.0, 10.0, 20.0]}, "this": {"agent": [11.0, 30.0, 22.0]}},
        wall={"base": {"agent": [10.0, 10.0, 20.0]}, "this": {"agent": [11.0, 30.0, 22.0]}},
    )
    assert pair.ratio("this", "agent") == pytest.approx(1.1)  # one disturbed call (3.0) moves no median
    assert Arm(name="this x1.3", side="this", slow=1.3).side == "this"


def test_tolerances_lie_halfway_between_the_plain_runs_and_the_slowdown() -> None:
    high, low, tolerance = derive_tolerance([0.98, 1.02, 1.0], slowdown=1.3)
    assert (high, low) == (1.02, pytest.approx(1.3 * 0.98))
    assert tolerance == pytest.approx((1.02 + 1.274) / 2, abs=1e-3)
    assert derive_tolerance([0.8, 1.1], slowdown=1.3)[2] is None  # too noisy: a slowed build could pass


def test_the_summary_of_repeated_runs_names_each_stages_spread(report: GuardReport) -> None:
    spread = summarise({f"run-{i}": report for i in range(3)}, STAGES, SLOWDOWN)
    assert [s.stage for s in spread.stages] == list(STAGES)
    assert all(s.runs == 3 and s.low == s.high and s.slowed_low is not None and s.slowed_low > s.high
               for s in spread.stages)  # fmt: skip
    assert "| run-2 |" in spread_markdown(spread, STAGES)
    with pytest.raises(ValueError, match="at least two runs"):
        summarise({"one": report}, STAGES, SLOWDOWN)
