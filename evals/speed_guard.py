"""Speed guard: the question path timed against a pinned reference workload in the same run, as ratios.

Why a ratio: absolute milliseconds differ between machines (a CI runner, a laptop, a loaded 2-core box)
by more than the regressions worth catching, so a fixed millisecond limit is either flaky or blind. The
guard times a fixed reference workload (pure Python and numpy, frozen: it never changes with the
project) interleaved with the project's own calls in one process, and divides: a machine twice as slow
slows both, a project change slows only one. The ratios measured on a reference build are pinned in
:data:`PINNED`; a stage fails when its ratio exceeds ``TOLERANCE`` times its pin (generous: one run on
a loaded machine must not fail, a path that doubles must). The ratio compares the medians of the CPU
time this process spends (``time.process_time``), not of wall time: on a loaded machine a call is
preempted at random and its wall time follows the scheduler (the median of a 2 ms call measured 2 and 27
ms in two runs a minute apart at a load of 18 on 2 cores; the agent's fastest tenth varied 2x), while the
CPU a call uses is its own. What that leaves out is time spent waiting on another process (a graph
server's reply): the A/B of the evaluation report covers it. The report gives each stage's wall-time
p50 and p95 and its CPU p50.

The workload is a small generated graph of neutral labels (no dataset), indexed with the hash embedder
(no model), and three stages on the question path: the offline agent (``ask``), a hybrid search
(``IndexBundle.search``) and a one-hop expansion (the ``search_nodes`` tool). Each call is preceded by
one reference call, and the medians of many repetitions are compared, so load that comes and goes
touches both sides alike.

``python -m evals.speed_guard --out DIR`` runs it and writes ``speed_guard.json`` and ``speed_guard.md``
(per-stage p50/p95, ratio, pin, verdict); ``tests/evals/test_speed_guard.py`` runs it in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from graphs.skb.model import SKB, Edge, Node

#: Ratio of each stage's CPU median to the reference workload's, measured on the reference build (a 2-core
#: Intel Xeon, three runs: agent 3.08, 3.14, 3.12; search 0.333, 0.327, 0.334; expand 0.223, 0.218, 0.211;
#: the code before it, 46cc145, there: agent 4.46 and 4.50, expand 0.283, so it passes under these pins).
#: Re-pin after a deliberate change of the workload or of the path's cost, with the report of a run.
PINNED: dict[str, float] = {"agent": 3.1, "search": 0.34, "expand": 0.22}
#: A stage fails when its ratio exceeds this many times its pin.
TOLERANCE = 1.75
STAGES = tuple(PINNED)
#: Questions (and expansions, searches) per repetition, and repetitions.
QUESTIONS = 16
REPEATS = 2
#: Graph size: items, traits (each item shows a few) and families.
ITEMS, TRAITS, FAMILIES = 400, 160, 10

_SYLLABLES = ("ka", "lo", "mi", "ner", "ta", "vu", "sel", "dor", "pha", "qui", "ren", "zo", "bel", "gan", "tri")


def _word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts))


def guard_skb(seed: int = 11) -> SKB:
    """The generated graph: ``Item`` nodes that ``SHOWS`` a few ``Trait`` nodes and are ``MEMBER_OF`` one
    ``Family``; traits are ``NARROWER_THAN`` broader traits. Deterministic for a seed."""
    rng = random.Random(seed)
    skb = SKB("speed-guard")
    traits = [f"T:{i:04d}" for i in range(TRAITS)]
    used: set[str] = set()

    def fresh(parts: int) -> str:
        while True:
            name = _word(rng, parts)
            if name not in used:
                used.add(name)
                return name

    for i, key in enumerate(traits):
        skb.add_node(Node(key, "Trait", {"name": f"{fresh(2)} {fresh(3)}", "rank": i % 7}))
    for i in range(FAMILIES):
        skb.add_node(Node(f"F:{i:02d}", "Family", {"name": f"{fresh(3)} family"}))
    for i, key in enumerate(traits[8:], 8):
        skb.add_edge(Edge(key, "NARROWER_THAN", traits[rng.randrange(0, min(i, 8 + i // 4))]))
    for i in range(ITEMS):
        key = f"I:{i:04d}"
        skb.add_node(Node(key, "Item", {"name": f"{fresh(3)} {fresh(4)} item", "code": i}))
        skb.add_edge(Edge(key, "MEMBER_OF", f"F:{rng.randrange(FAMILIES):02d}"))
        for trait in rng.sample(traits, rng.randint(3, 7)):
            skb.add_edge(Edge(key, "SHOWS", trait))
    return skb


def guard_questions(skb: SKB, n: int = QUESTIONS, seed: int = 5) -> list[tuple[str, str]]:
    """``n`` (question, item key) pairs: an item asked for by the names of three of its traits."""
    rng = random.Random(seed)
    items = sorted(k for k, node in skb.nodes.items() if node.label == "Item")
    out: list[tuple[str, str]] = []
    for key in rng.sample(items, n):
        names = [skb.nodes[e.dst].name for e in skb.out_edges(key) if e.rel == "SHOWS"][:3]
        out.append((f"Which item shows {', '.join(names[:-1])} and {names[-1]}?", key))
    return out


def reference_workload() -> None:
    """Frozen work of the kind the question path does (dicts, sorting, JSON, small numpy products).
    Never change it: every pin is a multiple of its time."""
    rng = random.Random(3)
    table = {f"K:{i:05d}": rng.random() for i in range(2500)}
    ranked = sorted(table.items(), key=lambda kv: (-kv[1], kv[0]))[:400]
    text = json.dumps([{"key": k, "score": round(v, 4)} for k, v in ranked], separators=(",", ":"))
    words = [w for w in text.replace('"', " ").split(",") if w]
    counts: dict[int, int] = {}
    for w in words:
        counts[len(w)] = counts.get(len(w), 0) + 1
    matrix = np.linspace(0.0, 1.0, 4000 * 32, dtype=np.float32).reshape(4000, 32)
    vector = np.linspace(1.0, 0.0, 32, dtype=np.float32)
    scores = (matrix * vector).sum(axis=1)  # elementwise: a BLAS product may run (and spin) on several threads
    np.argsort(-scores, kind="stable")[:100]


class StageResult(BaseModel):
    stage: str
    n: int
    p50_ms: float
    p95_ms: float
    cpu_p50_ms: float
    """The median CPU time of its calls (this process, every thread)."""
    ratio: float
    """Its CPU median over the reference's CPU median (same run)."""
    pinned: float
    limit: float
    passed: bool


class GuardReport(BaseModel):
    reference_cpu_p50_ms: float
    reference_p50_ms: float
    reference_p95_ms: float
    stages: list[StageResult]
    passed: bool
    tolerance: float
    questions: int
    repeats: int
    seconds: float


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - start) * 1000.0, (time.process_time() - cpu) * 1000.0


@contextmanager
def guard_index(directory: Path | None = None) -> Iterator[Path]:
    """The generated graph's index (hash embedder, FalkorDB store), in ``directory`` or a temporary one."""
    from graphs.build import IndexConfig, build_index

    with tempfile.TemporaryDirectory(prefix="skb-speed-guard-") as tmp:
        path = (directory or Path(tmp)) / "index"
        build_index(guard_skb(), path, IndexConfig(dataset="speed-guard", embedder="hash:64"))
        yield path


def run_guard(index_dir: Path, *, questions: int = QUESTIONS, repeats: int = REPEATS) -> GuardReport:
    """Time the three stages against the reference workload, interleaved (see the module docstring)."""
    from agent.api import ask
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle
    from tools.search_nodes import make_search_nodes

    started = time.perf_counter()
    bundle = IndexBundle.open(index_dir)
    try:
        asked = guard_questions(bundle.skb, questions)
        # tool calls in the calling thread: a thread hand-off waits on the scheduler, which a loaded machine
        # makes slow at random (the stage measures the path's own work)
        config = AgentConfig(max_parallel_tools=1)
        current = {"q": ""}
        expand = make_search_nodes(bundle, lambda: current["q"])
        calls: dict[str, Callable[[str, str], Any]] = {
            "agent": lambda q, _key: ask(q, bundle=bundle, config=config),
            "search": lambda q, _key: bundle.search(q, k=20),
            "expand": lambda q, key: expand.invoke({"keys": [key], "question": q}),
        }
        for q, key in asked[:3]:  # warm: models, matrices, caches, the store's connection
            current["q"] = q
            reference_workload()
            for fn in calls.values():
                fn(q, key)
        times: dict[str, list[float]] = {"reference": [], **{s: [] for s in STAGES}}
        cpu: dict[str, list[float]] = {"reference": [], **{s: [] for s in STAGES}}
        for _ in range(repeats):
            for q, key in asked:
                current["q"] = q
                for stage, fn in calls.items():
                    for name, timed in (("reference", _timed(reference_workload)),
                                        (stage, _timed(lambda fn=fn, q=q, key=key: fn(q, key)))):  # type: ignore[misc]
                        times[name].append(timed[0])
                        cpu[name].append(timed[1])
    finally:
        bundle.close()
    ref_cpu = max(statistics.median(cpu["reference"]), 1e-3)
    stages = []
    for stage in STAGES:
        p50 = statistics.median(times[stage])
        cpu50 = statistics.median(cpu[stage])
        ratio = cpu50 / ref_cpu
        limit = PINNED[stage] * TOLERANCE
        stages.append(StageResult(
            stage=stage, n=len(times[stage]), p50_ms=round(p50, 3), p95_ms=round(_pct(times[stage], 95), 3),
            cpu_p50_ms=round(cpu50, 3), ratio=round(ratio, 3), pinned=PINNED[stage], limit=round(limit, 3), passed=ratio <= limit,
        ))
    return GuardReport(
        reference_cpu_p50_ms=round(ref_cpu, 3), reference_p50_ms=round(statistics.median(times["reference"]), 3), reference_p95_ms=round(_pct(times["reference"], 95), 3), stages=stages,
        passed=all(s.passed for s in stages), tolerance=TOLERANCE, questions=questions, repeats=repeats,
        seconds=round(time.perf_counter() - started, 1),
    )


def markdown(report: GuardReport) -> str:
    lines = [
        "# Speed guard",
        "",
        (
            f"Reference workload CPU p50 {report.reference_cpu_p50_ms} ms, wall p50 {report.reference_p50_ms} ms, "
            f"p95 {report.reference_p95_ms} ms; "
            f"{report.questions} questions x {report.repeats} repetitions, {report.seconds} s; tolerance "
            f"{report.tolerance}x the pinned ratio. Verdict: {'pass' if report.passed else 'FAIL'}."
        ),
        "",
        (
            "| stage | wall p50 ms | wall p95 ms | CPU p50 ms | ratio to reference (CPU p50) "
            "| pinned | limit | verdict |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {s.stage} | {s.p50_ms} | {s.p95_ms} | {s.cpu_p50_ms} | {s.ratio} | {s.pinned} | {s.limit} | {'pass' if s.passed else 'FAIL'} |"
        for s in report.stages
    ]
    return "\n".join(lines) + "\n"


def write_report(report: GuardReport, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "speed_guard.json", out_dir / "speed_guard.md"]
    paths[0].write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report), encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, help="directory for speed_guard.json and speed_guard.md")
    parser.add_argument("--questions", type=int, default=QUESTIONS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    with guard_index() as index_dir:
        report = run_guard(index_dir, questions=args.questions, repeats=args.repeats)
    print(markdown(report))
    if args.out is not None:
        write_report(report, args.out)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
