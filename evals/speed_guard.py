"""Speed guard: the question path of this build timed against a baseline build of the project, in lock-step, as ratios.

Why a baseline build in the same run: absolute milliseconds differ between machines (a CI runner, a laptop, a loaded
2-core box) by more than the regressions worth catching, and on one machine they drift with its state; a pinned
ratio to a reference workload drifted too, because the stages and any fixed reference slow by different factors
(8-11 % between processes, 14 % in a faster state of the machine). So the guard runs the baseline (the project at
:data:`BASELINE`, taken from git) and this build side by side: a process per side, both pinned to one CPU, each
stage call of one made next to the same call of the other, in every order in turn (``evals.speed.lockstep``). What
the machine does to one it does to both, and the ratio of their CPU times holds the code's difference.

The workload is a small generated graph of neutral labels (no dataset) indexed by each side with its own code and
the hash embedder (no model), and three stages on the question path: the offline agent (``ask``), a hybrid search
(``IndexBundle.search``) and a one-hop expansion (the ``search_nodes`` tool). A stage fails when this build's CPU
ratio to the baseline, the mean over :data:`PAIRS` pairs of fresh processes of each pair's median, exceeds its
:data:`TOLERANCES`. The report gives each stage's wall-time p50 and p95 for both builds.

Why these tolerances: from repeated runs of one build (``--summarise``), a limit only has to sit above the highest
ratio an unchanged build showed and below :data:`SLOWDOWN` (1.3) times the lowest: it is put halfway
(``evals/reports/speed-guard/``). ``--slow FACTOR`` adds an arm: this build with every call of every stage made to
use FACTOR times its own CPU (the call is timed, then the thread burns the difference), the proof that the limits
catch it.

Re-pin :data:`BASELINE` (to the commit that makes it) after a deliberate change of the path's cost, or when the
baseline's code no longer runs under the project's current dependencies; re-derive the tolerances from ten runs.

``python -m evals.speed_guard --out DIR`` writes ``speed_guard.json`` and ``speed_guard.md``; ``--summarise RUN.json
... --out DIR`` writes the spread over runs and the tolerances it gives (``spread.json``, ``spread.md``). Exit 0 when
this build passes, 1 when it fails, 2 when the baseline cannot be had. ``tests/evals/test_speed_guard.py`` runs it in
``make test``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evals.speed.baseline import BaselineError, checkout, repo_root
from evals.speed.lockstep import STAGES, Arm, PairMeasurement, build_side, measure_pair, measuring_cpu
from evals.speed.report import GuardReport, markdown, spread_markdown, stage_result, summarise, write_report
from evals.speed.workload import graph_document, guard_questions, guard_skb

#: The build this one is measured against: a commit of this repository.
BASELINE = "bed8cce561f68aacb49766c64bf3d0d7018a1dde"
#: A stage fails when its CPU ratio to the baseline exceeds this (``--summarise`` of ten runs; see the docstring).
TOLERANCES: dict[str, float] = {"agent": 1.141, "search": 1.12, "expand": 1.125}
#: The slowdown of one stage the tolerances are set to catch.
SLOWDOWN = 1.3
#: Pairs of fresh processes (one per side); a stage's ratio is the mean of the pairs'.
PAIRS = 4
#: Questions per repetition, and repetitions, in each pair.
QUESTIONS = 16
REPEATS = 2


def _load() -> tuple[float, float, float] | None:
    """The load averages now, where the system has them."""
    try:
        return tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[return-value]
    except (AttributeError, OSError):
        return None


@contextmanager
def baseline_tree(rev: str = BASELINE, directory: Path | None = None) -> Iterator[tuple[str, Path]]:
    """(what the baseline is, its tree): `directory` as given, or commit `rev` checked out for the block."""
    if directory is not None:
        if not (directory / "graphs").is_dir():
            raise BaselineError(f"--baseline-dir {directory} is not a checkout of this project (no graphs/ in it)")
        yield str(directory), directory
        return
    with checkout(rev) as found:
        yield found


def run_guard(
    *,
    baseline: str = BASELINE,
    baseline_dir: Path | None = None,
    pairs: int = PAIRS,
    questions: int = QUESTIONS,
    repeats: int = REPEATS,
    slow: float | None = None,
) -> GuardReport:
    """Index the workload with both builds, measure `pairs` pairs of processes in lock-step, and judge each stage
    by this build's mean ratio to the baseline; `slow` adds an arm of this build slowed by that factor."""
    if pairs < 1 or questions < 1 or repeats < 1:
        raise ValueError(f"pairs, questions and repeats must be at least 1, got {pairs}, {questions}, {repeats}")
    if slow is not None and (not math.isfinite(slow) or slow <= 1.0):
        raise ValueError(f"slow must be a factor above 1, got {slow}")
    started = time.perf_counter()
    skb = guard_skb()
    asked = guard_questions(skb, questions)
    arms = [Arm(name="base", side="base"), Arm(name="this", side="this")]
    if slow is not None:
        arms.append(Arm(name=f"this x{slow}", side="this", slow=slow))
    measured: list[PairMeasurement] = []
    with baseline_tree(baseline, baseline_dir) as (name, base_root), tempfile.TemporaryDirectory(prefix="skb-speed-") as tmp:
        roots = {"base": base_root, "this": repo_root()}
        indexes = {side: Path(tmp) / side / "index" for side in roots}
        document = graph_document(skb)
        for side, root in roots.items():
            indexes[side].parent.mkdir(parents=True)
            build_side(root, indexes[side], document, Path(tmp) / f"build-{side}.log")
        for _ in range(pairs):
            measured.append(measure_pair(roots, indexes, arms, asked, repeats, Path(tmp)))
    stages = [stage_result(stage, measured, arms, TOLERANCES[stage]) for stage in STAGES]
    verdicts = {a.name: [r.passed for s in stages for r in s.arms if r.arm == a.name] for a in arms[1:]}
    return GuardReport(
        baseline=name, stages=stages, passed=all(verdicts["this"]), slowed=slow,
        slowed_caught=None if slow is None else not any(verdicts[arms[2].name]), pairs=pairs, questions=questions,
        repeats=repeats, cpu=measuring_cpu(), seconds=round(time.perf_counter() - started, 1), load=_load(),
    )  # fmt: skip


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 1.0:
        raise argparse.ArgumentTypeError(f"--slow takes a factor above 1 (1.3: 30 % more CPU), got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, help="directory for the report files")
    parser.add_argument("--baseline", default=BASELINE, metavar="REV", help="the commit to measure against")
    parser.add_argument("--baseline-dir", type=Path, default=None, metavar="DIR",
                        help="a checkout to measure against instead of a commit from git")
    parser.add_argument("--pairs", type=_positive, default=PAIRS, help="pairs of fresh processes, one per side")
    parser.add_argument("--questions", type=_positive, default=QUESTIONS)
    parser.add_argument("--repeats", type=_positive, default=REPEATS)
    parser.add_argument("--slow", type=_factor, default=None, metavar="FACTOR",
                        help="add an arm of this build with every stage using FACTOR times its CPU")
    parser.add_argument("--summarise", type=Path, nargs="+", default=None, metavar="RUN.json",
                        help="write the spread of these runs' speed_guard.json and the tolerances they give, run nothing")
    args = parser.parse_args(argv)
    if args.summarise:
        try:
            runs = {f"{p.parent.name}/{p.name}": GuardReport.model_validate_json(p.read_text(encoding="utf-8")) for p in args.summarise}
            spread = summarise(runs, STAGES, SLOWDOWN)
        except (OSError, ValueError) as exc:
            print(f"speed_guard: cannot summarise: {exc}", file=sys.stderr)
            return 2
        print(spread_markdown(spread, STAGES))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "spread.json").write_text(spread.model_dump_json(indent=2) + "\n", encoding="utf-8")
            (args.out / "spread.md").write_text(spread_markdown(spread, STAGES), encoding="utf-8")
        return 0
    try:
        report = run_guard(baseline=args.baseline, baseline_dir=args.baseline_dir, pairs=args.pairs,
                           questions=args.questions, repeats=args.repeats, slow=args.slow)  # fmt: skip
    except BaselineError as exc:
        print(f"speed_guard: {exc}", file=sys.stderr)
        return 2
    print(markdown(report))
    if args.out is not None:
        write_report(report, args.out)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
