"""Interleaved A/B latency of the offline agent: two or more code trees, each in its own warm process.

Why interleaved: absolute times on a shared machine drift by 2x within minutes; sending each question to
every side in rotating order, in one run, exposes the sides to the same drift, so their ratio holds where
their milliseconds do not. Each side is a checkout (its own code on ``PYTHONPATH``, its own ``.venv``) and
an index built by that code; per question the worker reports wall and process CPU milliseconds.

    python -m evals.studies.ab_latency --bench Q.csv --n 300 --passes 2 \\
        --side new=.:.skb/hpo --side main=../main-checkout:../main-checkout/.skb/hpo --out ab.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

WARMUP = 5


def worker(index_dir: str, bench: str, n: int) -> None:
    """Answer question numbers read from stdin, one JSON line each; ``quit`` ends."""
    from agent.api import ask
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle

    with open(bench, encoding="utf-8") as handle:
        questions = [row["query"] for row in csv.DictReader(handle)][:n]
    bundle = IndexBundle.open(Path(index_dir))
    config = AgentConfig()
    for question in questions[:WARMUP]:
        ask(question, bundle=bundle, config=config)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        i = int(line)
        wall, cpu = time.perf_counter(), time.process_time()
        ask(questions[i], bundle=bundle, config=config)
        print(json.dumps({"i": i, "ms": (time.perf_counter() - wall) * 1000, "cpu": (time.process_time() - cpu) * 1000}),
              flush=True)


def run(
    sides: list[tuple[str, Path, Path]], bench: Path, n: int, passes: int, python: str | None = None
) -> dict[str, Any]:
    """Every side answers every question ``passes`` times; returns per side and pass p50/p95 (wall, CPU).

    ``python``: the interpreter for every side (default: each checkout's own ``.venv/bin/python``)."""
    procs: dict[str, subprocess.Popen[str]] = {}
    for name, code, index in sides:
        env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        interpreter = python or str(code / ".venv" / "bin" / "python")
        procs[name] = subprocess.Popen(
            # this file runs as the worker in every side, so a side older than it is timed with the same loop
            [interpreter, str(Path(__file__).resolve()), "--worker", str(index), str(bench), str(n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=code,
        )
    for name, proc in procs.items():
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"side {name} did not start: {line!r}")
    wall: dict[tuple[str, int], list[float]] = {(s, k): [] for s in procs for k in range(passes)}
    cpu: dict[tuple[str, int], list[float]] = {(s, k): [] for s in procs for k in range(passes)}
    loads: list[float] = []
    names = list(procs)
    for k in range(passes):
        for i in range(n):
            r = i % len(names)
            for name in names[r:] + names[:r]:
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{i}\n")
                proc.stdin.flush()
                rec = json.loads(proc.stdout.readline())
                wall[(name, k)].append(rec["ms"])
                cpu[(name, k)].append(rec["cpu"])
            if i % 25 == 0:
                loads.append(round(os.getloadavg()[0], 1))
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait()
    results = {
        f"{name} pass {k + 1}": {
            "n": len(times), "p50": round(statistics.median(times), 1), "p95": round(float(np.percentile(times, 95)), 1),
            "cpu_p50": round(statistics.median(cpu[(name, k)]), 1), "cpu_p95": round(float(np.percentile(cpu[(name, k)], 95)), 1),
        }
        for (name, k), times in wall.items()
    }
    return {"results": results, "load_avg_1m": loads, "raw": {f"{a}|{b}": v for (a, b), v in wall.items()}}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--worker":
        worker(args[1], args[2], int(args[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--side", action="append", required=True, help="NAME=CODE_DIR:INDEX_DIR (two or more)")
    parser.add_argument("--out", type=Path)
    ns = parser.parse_args(args)
    sides = []
    for spec in ns.side:
        name, _, rest = spec.partition("=")
        code, _, index = rest.partition(":")
        sides.append((name, Path(code).resolve(), Path(index).resolve()))
    report = run(sides, ns.bench, ns.n, ns.passes)
    if ns.out:
        ns.out.write_text(json.dumps(report), encoding="utf-8")
    print(json.dumps({"results": report["results"], "load_avg_1m": report["load_avg_1m"]}, indent=1))


if __name__ == "__main__":
    main()
