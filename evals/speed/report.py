"""The speed guard's report: per stage and arm, the ratio to the baseline, its spread, the limit and the verdict;
and the spread over repeated runs that the limits are set from."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from evals.speed.lockstep import Arm, PairMeasurement


class ArmResult(BaseModel):
    arm: str
    slow: float
    """The factor every call of this arm was made to use of its own CPU (1: the build as it is)."""
    ratio: float
    """The mean over pairs of processes of each pair's median CPU ratio to the baseline's call beside it."""
    pairs: list[float]
    spread: float
    """How far the pairs' ratios lie apart: their coefficient of variation (0.02: about 2 %)."""
    passed: bool


class StageResult(BaseModel):
    stage: str
    n: int
    """Timed calls per arm."""
    base_p50_ms: float
    base_p95_ms: float
    this_p50_ms: float
    this_p95_ms: float
    """Wall milliseconds of the baseline's and this build's calls (the A/B a reader compares)."""
    base_cpu_p50_ms: float
    this_cpu_p50_ms: float
    tolerance: float
    arms: list[ArmResult]


class GuardReport(BaseModel):
    baseline: str
    """The baseline's commit id (or the directory given instead)."""
    stages: list[StageResult]
    passed: bool
    """This build is within every stage's tolerance of the baseline."""
    slowed: float | None = None
    """The factor of the extra arm (this build, every stage slowed), when the run had one."""
    slowed_caught: bool | None = None
    """That arm failed on every stage: the proof the limits catch such a slowdown."""
    pairs: int
    questions: int
    repeats: int
    cpu: int
    """The CPU both sides were pinned to (-1: no pinning)."""
    seconds: float
    load: tuple[float, float, float] | None = None
    """The machine's load averages (1, 5, 15 min) when the run ended."""


def _pct(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 3)


def stage_result(stage: str, pairs: Sequence[PairMeasurement], arms: Sequence[Arm], tolerance: float) -> StageResult:
    """One stage's result over pairs of processes for arms."""
    results = []
    for arm in arms:
        if arm.name == "base":
            continue
        ratios = [round(p.ratio(arm.name, stage), 4) for p in pairs]
        mean = statistics.fmean(ratios)
        spread = statistics.pstdev(ratios) / max(mean, 1e-9)
        results.append(ArmResult(arm=arm.name, slow=arm.slow, ratio=round(mean, 4), pairs=ratios,
                                 spread=round(spread, 4), passed=mean <= tolerance))  # fmt: skip
    wall = {side: [t for p in pairs for t in p.wall[side][stage]] for side in ("base", "this")}
    cpu = {side: [t for p in pairs for t in p.cpu[side][stage]] for side in ("base", "this")}
    return StageResult(
        stage=stage, n=len(wall["this"]), base_p50_ms=_pct(wall["base"], 50), base_p95_ms=_pct(wall["base"], 95),
        this_p50_ms=_pct(wall["this"], 50), this_p95_ms=_pct(wall["this"], 95), base_cpu_p50_ms=_pct(cpu["base"], 50),
        this_cpu_p50_ms=_pct(cpu["this"], 50), tolerance=tolerance, arms=results,
    )  # fmt: skip


def markdown(report: GuardReport) -> str:
    load = "" if report.load is None else f" Load {report.load[0]} / {report.load[1]} / {report.load[2]}."
    caught = ""
    if report.slowed is not None:
        caught = f" This build slowed {report.slowed}x on every stage: {'caught' if report.slowed_caught else 'NOT caught'}."
    lines = [
        "# Speed guard",
        "",
        (
            f"This build against the baseline {report.baseline}, in lock-step on CPU {report.cpu}: {report.pairs} pairs "
            f"of processes x {report.questions} questions x {report.repeats} repetitions, {report.seconds} s.{load} "
            f"Verdict: {'pass' if report.passed else 'FAIL'}.{caught}"
        ),
        "",
        (
            "| stage | arm | baseline wall p50 / p95 ms | this wall p50 / p95 ms | CPU p50 ms (baseline / this) "
            "| CPU ratio to baseline (mean) | per pair | spread (CV) | tolerance | verdict |"
        ),
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for s in report.stages:
        for a in s.arms:
            lines.append(
                f"| {s.stage} | {a.arm} | {s.base_p50_ms} / {s.base_p95_ms} | {s.this_p50_ms} / {s.this_p95_ms} "
                f"| {s.base_cpu_p50_ms} / {s.this_cpu_p50_ms} | {a.ratio} | {' / '.join(map(str, a.pairs))} "
                f"| {a.spread:.1%} | {s.tolerance} | {'pass' if a.passed else 'FAIL'} |"
            )
    return "\n".join(lines) + "\n"


def write_report(report: GuardReport, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "speed_guard.json", out_dir / "speed_guard.md"]
    paths[0].write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    return paths


def derive_tolerance(plain: Sequence[float], slowdown: float) -> tuple[float, float, float | None]:
    """(largest plain ratio, smallest ratio a slowed build can show, tolerance): the limit sits halfway between
    the highest ratio an unchanged build showed and `slowdown` times the lowest, or None when those cross."""
    high_plain, low_slowed = max(plain), slowdown * min(plain)
    return high_plain, low_slowed, (round((high_plain + low_slowed) / 2.0, 3) if low_slowed > high_plain else None)


class StageSpread(BaseModel):
    stage: str
    runs: int
    median: float
    low: float
    high: float
    slowed_low: float | None
    """The lowest ratio a slowed arm showed over the runs that had one."""
    tolerance: float | None
    """Halfway between the highest plain ratio and SLOWDOWN x the lowest; None when those cross."""


class SpreadReport(BaseModel):
    slowdown: float
    stages: list[StageSpread]
    runs: list[dict[str, Any]]
    """Per run: its file, load averages, seconds, and its plain and slowed ratios."""


def _arm(report: GuardReport, stage: str, slowed: bool) -> float | None:
    result = next(s for s in report.stages if s.stage == stage)
    found = [a.ratio for a in result.arms if (a.slow > 1.0) == slowed]
    return found[0] if found else None


def summarise(reports: Mapping[str, GuardReport], stages: Sequence[str], slowdown: float) -> SpreadReport:
    """The spread of repeated runs of one build against one baseline, and the tolerances it gives."""
    if len(reports) < 2:
        raise ValueError("summarise needs at least two runs of the same build")
    out = []
    for stage in stages:
        plain = [r for r in (_arm(rep, stage, False) for rep in reports.values()) if r is not None]
        slowed = [r for r in (_arm(rep, stage, True) for rep in reports.values()) if r is not None]
        _, _, tolerance = derive_tolerance(plain, slowdown)
        out.append(StageSpread(stage=stage, runs=len(plain), median=round(statistics.median(plain), 4),
                               low=round(min(plain), 4), high=round(max(plain), 4),
                               slowed_low=round(min(slowed), 4) if slowed else None, tolerance=tolerance))  # fmt: skip
    runs = [
        {"run": name, "load": r.load, "seconds": r.seconds, "passed": r.passed, "slowed_caught": r.slowed_caught,
         **{s: _arm(r, s, False) for s in stages}, **{f"{s} slowed": _arm(r, s, True) for s in stages}}
        for name, r in reports.items()
    ]  # fmt: skip
    return SpreadReport(slowdown=slowdown, stages=out, runs=runs)


def spread_markdown(report: SpreadReport, stages: Sequence[str]) -> str:
    lines = [
        "# Speed guard: spread over repeated runs",
        "",
        (
            f"{len(report.runs)} runs of one build against one baseline. Tolerances are set to catch a "
            f"{report.slowdown}x slowdown of one stage."
        ),
        "",
        "| stage | runs | median ratio | low | high | lowest slowed ratio | tolerance |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s.stage} | {s.runs} | {s.median} | {s.low} | {s.high} | {s.slowed_low} "
        f"| {s.tolerance if s.tolerance is not None else 'too noisy'} |"
        for s in report.stages
    ]
    lines += ["", "| run | load (1 / 5 / 15 min) | seconds | " + " | ".join(stages) + " | slowed: "
              + " | ".join(stages) + " | verdict | slowed caught |",
              "|---|---|---:|" + "---:|" * (2 * len(stages)) + "---|---|"]  # fmt: skip
    for run in report.runs:
        load = " / ".join(str(x) for x in run["load"]) if run["load"] else "?"
        plain = " | ".join(str(run[s]) for s in stages)
        slowed = " | ".join(str(run[f"{s} slowed"]) for s in stages)
        lines.append(f"| {run['run']} | {load} | {run['seconds']} | {plain} | {slowed} "
                     f"| {'pass' if run['passed'] else 'FAIL'} | {run['slowed_caught']} |")  # fmt: skip
    return "\n".join(lines) + "\n"
