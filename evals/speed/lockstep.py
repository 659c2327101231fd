"""Two builds measured in lock-step: each stage call of the build under test next to the same call of the baseline.

Why lock-step and not one process after another: a fresh process's speed on the 2-core VM follows the machine's
state (how fast a neighbour leaves the host), which changes over seconds and by up to 2x; a call of each build in
turn, on one CPU, sees the same state, so their CPU ratio holds the code's difference alone. Measured: two
processes of the same build gave per-pair ratios with a spread of 1.2-2.3 % (CV), where the old guard's stage to
reference ratio strayed 8-11 % between processes (``evals/reports/speed-guard/README.md``).

Each set of processes (one per arm, started fresh) answers every question at every stage; the arms' order goes
through every permutation at each stage, so each arm runs as often first, last and after each other arm (a plain
rotation of three arms had one arm follow the slowed one twice as often, and read one build 4-7 % apart from
itself). An arm is a side with a slowdown: the build under test slowed by a factor is an arm of its own, the proof
that the guard catches it. A stage's ratio for an arm is the median over calls of its CPU over the baseline's.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

#: The question path's stages: the offline agent (``ask``), a hybrid search and a one-hop expansion.
STAGES = ("agent", "search", "expand")
WORKER = Path(__file__).with_name("worker.py")
#: Questions answered before timing: matrices, caches, the store's connection.
WARM = 3


class Arm(BaseModel):
    """A side ("base" or "this") run with every call made to use ``slow`` times its CPU."""

    name: str
    side: str
    slow: float = 1.0


class PairMeasurement(BaseModel):
    """One pair of processes: CPU and wall milliseconds of every call, by arm and stage, in the order made."""

    cpu: dict[str, dict[str, list[float]]]
    wall: dict[str, dict[str, list[float]]]

    def ratio(self, arm: str, stage: str) -> float:
        """The median over calls of the arm's CPU over the baseline's for the same question, made next to it."""
        pairs = zip(self.cpu[arm][stage], self.cpu["base"][stage], strict=True)
        return statistics.median(a / max(b, 1e-6) for a, b in pairs)


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}


def _tail(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-2000:]
    except OSError:
        return ""


def build_side(root: Path, index: Path, document: dict[str, Any], log: Path, timeout_s: float = 600.0) -> None:
    """Index the workload's graph with the build at `root` (its own format, its own code)."""
    with log.open("w", encoding="utf-8") as err:
        done = subprocess.run([sys.executable, str(WORKER), "build", str(index)], input=json.dumps(document),
                              text=True, stdout=err, stderr=err, env=_env(root), timeout=timeout_s, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"speed guard: the build at {root} could not index the workload (exit "
                           f"{done.returncode}): {_tail(log)}")  # fmt: skip


class Worker:
    """A process serving one side's stages (``worker.py serve``) with its stderr in a log file."""

    def __init__(self, root: Path, index: Path, cpu: int, log: Path) -> None:
        self.log = log
        self._err: IO[str] = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "serve", str(index), str(cpu)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._err, text=True, env=_env(root),
        )  # fmt: skip
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError(f"speed guard: a measuring process ended (exit {self.proc.returncode}): {_tail(self.log)}")
        out: dict[str, Any] = json.loads(line)
        return out

    def call(self, stage: str, question: str, key: str, slow: float) -> tuple[float, float]:
        """(CPU, wall) milliseconds of one stage call."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"stage": stage, "question": question, "key": key, "slow": slow}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        return float(reply["cpu"]), float(reply["wall"])

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


def measuring_cpu() -> int:
    """The CPU both sides are pinned to (the first this process may use); -1 where the system cannot pin."""
    get = getattr(os, "sched_getaffinity", None)
    return min(get(0)) if get is not None and hasattr(os, "sched_setaffinity") else -1


def measure_pair(
    roots: dict[str, Path], indexes: dict[str, Path], arms: list[Arm], questions: list[tuple[str, str]], repeats: int,
    logs: Path,
) -> PairMeasurement:
    """One fresh process per arm, every arm's call of every stage and question in turn (every order of the arms in turn)."""
    cpu = measuring_cpu()
    workers: dict[str, Worker] = {}
    try:
        for arm in arms:  # a process per arm: no arm ever runs right after itself in its own warm process
            workers[arm.name] = Worker(roots[arm.side], indexes[arm.side], cpu, logs / f"arm-{len(workers)}.log")
        timed_cpu: dict[str, dict[str, list[float]]] = {a.name: {s: [] for s in STAGES} for a in arms}
        timed_wall: dict[str, dict[str, list[float]]] = {a.name: {s: [] for s in STAGES} for a in arms}
        orders = list(itertools.permutations(arms))
        turns = dict.fromkeys(STAGES, 0)
        for q, key in questions[:WARM]:
            for stage in STAGES:
                for arm in arms:
                    workers[arm.name].call(stage, q, key, arm.slow)
        for _ in range(repeats):
            for q, key in questions:
                for stage in STAGES:
                    turns[stage] += 1
                    for arm in orders[turns[stage] % len(orders)]:
                        used, wall = workers[arm.name].call(stage, q, key, arm.slow)
                        timed_cpu[arm.name][stage].append(round(used, 4))
                        timed_wall[arm.name][stage].append(round(wall, 4))
    finally:
        for worker in workers.values():
            worker.close()
    return PairMeasurement(cpu=timed_cpu, wall=timed_wall)
