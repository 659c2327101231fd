"""What running each toolkit tool call on one build costs: the toolkit's ``semantic_search`` and ``search_nodes``
(pinned to one build, run again when it was replaced) against the same tool functions unpinned (``make_tools``), in
one process, alternating call by call, on a built index.

    python -m evals.studies.tool_pin_overhead --index .skb/hpo --bench ../shared/bench/hpo_cases_dev_answerable.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.serving.toolkit import SKBToolkit
from graphs.bundle import IndexBundle
from tools import make_tools


def measure(index: Path, questions: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """p50 / p95 milliseconds of each tool, pinned (``one-build``) and not (``plain``), two calls per question."""
    with IndexBundle.open(index) as bundle:
        wrapped = {t.name: t for t in SKBToolkit(bundle, include_ask=False).get_tools()}
        plain = {t.name: t for t in make_tools(bundle)}
        keys = [h.key for h in bundle.search(questions[0], k=5)][:2]
        calls: dict[str, Callable[[Any, str], Any]] = {
            "semantic_search": lambda t, q: t.func(text=q, k=20),
            "search_nodes": lambda t, q: t.func(keys=keys, question=q),
        }
        for name, call in calls.items():  # warm
            for q in questions[:5]:
                call(wrapped[name], q)
                call(plain[name], q)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, call in calls.items():
            times: dict[str, list[float]] = {"plain": [], "one-build": []}
            for i, q in enumerate(questions * 2):
                sides = [("plain", plain), ("one-build", wrapped)]
                for side, tools in sides if i % 2 else sides[::-1]:
                    t0 = time.perf_counter()
                    call(tools[name], q)
                    times[side].append((time.perf_counter() - t0) * 1000)
            out[name] = {side: {"p50_ms": round(statistics.median(v), 3), "p95_ms": round(sorted(v)[int(len(v) * 0.95)], 3),
                                "n": len(v)} for side, v in times.items()}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--n", type=int, default=150)
    args = parser.parse_args(argv)
    with args.bench.open(newline="", encoding="utf-8") as fh:
        questions = [r["query"] for r in csv.DictReader(fh)][: args.n]
    print(json.dumps(measure(args.index, questions), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
