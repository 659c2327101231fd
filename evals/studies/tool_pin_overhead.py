"""What running each toolkit tool call on one build costs: the toolkit's ``semantic_search`` and ``search_nodes``
(pinned to one build, run again when it was replaced) against the same tool functions unpinned (``make_tools``), in
one process, alternating call by call, on a built index.

    python -m evals.studies.tool_pin_overhead --index .skb/hpo --bench ../shared/bench/hpo_cases_dev_answerable.csv
"""

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

from agent.serving.toolkit import SKBToolkit
from graphs.bundle import IndexBundle
from tools import make_tools

parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
parser.add_argument("--index", type=Path, required=True)
parser.add_argument("--bench", type=Path, required=True)
parser.add_argument("--n", type=int, default=150)
args = parser.parse_args()
with args.bench.open(newline="", encoding="utf-8") as fh:
    qs = [r["query"] for r in csv.DictReader(fh)][: args.n]
with IndexBundle.open(args.index) as bundle:
    wrapped = {t.name: t for t in SKBToolkit(bundle, include_ask=False).get_tools()}
    plain = {t.name: t for t in make_tools(bundle)}
    keys = [h.key for h in bundle.search(qs[0], k=5)]
    calls = {"semantic_search": lambda t, q: t.func(text=q, k=20),
             "search_nodes": lambda t, q: t.func(keys=keys[:2], question=q)}
    for name, warm in calls.items():
        for q in qs[:5]:
            warm(wrapped[name], q)
            warm(plain[name], q)
    out = {}
    for name, call in calls.items():
        times: dict[str, list[float]] = {"plain": [], "one-build": []}
        for i, q in enumerate(qs * 2):
            order = [("plain", plain), ("one-build", wrapped)] if i % 2 else [("one-build", wrapped), ("plain", plain)]
            for side, tools in order:
                t0 = time.perf_counter(); call(tools[name], q); times[side].append((time.perf_counter() - t0) * 1000)
        out[name] = {side: {"p50_ms": round(statistics.median(v), 3), "p95_ms": round(sorted(v)[int(len(v) * 0.95)], 3), "n": len(v)} for side, v in times.items()}
    print(json.dumps(out, indent=1))
