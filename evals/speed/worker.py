"""One side of the speed guard's lock-step A/B: a process that runs the question path's stages when told to.

Why a script that imports nothing of ``evals``: the guard runs this file twice, once with the build under test on
``PYTHONPATH`` and once with the baseline build's checkout, so both sides run the same measuring code over the same
workload and only the project differs. It uses the project's public entry points alone (``graphs.build``,
``graphs.bundle``, ``agent.api``, ``tools.search_nodes``), which a baseline of any recent commit has.

Protocol (JSON lines): ``python worker.py build INDEX`` reads one graph ``{"nodes": [[key, label, props]], "edges":
[[src, rel, dst]]}`` on stdin and indexes it (hash embedder); ``python worker.py serve INDEX CPU`` opens the index, pins
itself to ``CPU`` (-1: no pinning), prints ``{"ready": true}``, then answers each ``{"stage", "question", "key",
"slow"}`` with ``{"cpu", "wall"}`` in milliseconds until its input ends. ``slow`` above 1 makes the call use that many
times its own CPU (the call is timed, then the thread burns the difference): the proof that the guard catches it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def build(index: Path) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.skb.model import SKB, Edge, Node

    graph = json.loads(sys.stdin.read())
    skb = SKB("speed-guard")
    for key, label, props in graph["nodes"]:
        skb.add_node(Node(key, label, props))
    for src, rel, dst in graph["edges"]:
        skb.add_edge(Edge(src, rel, dst))
    build_index(skb, index, IndexConfig(dataset="speed-guard", embedder="hash:64"))


def serve(index: Path, cpu: int) -> None:
    from agent.api import ask
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle
    from tools.search_nodes import make_search_nodes

    bundle = IndexBundle.open(index)  # before pinning: a graph server it starts keeps every CPU
    if cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    # tool calls in the calling thread: a hand-off to a pool thread waits on the scheduler
    config = AgentConfig(max_parallel_tools=1)
    current = {"q": ""}
    expand = make_search_nodes(bundle, lambda: current["q"])
    calls: dict[str, Callable[[str, str], Any]] = {
        "agent": lambda q, _key: ask(q, bundle=bundle, config=config),
        "search": lambda q, _key: bundle.search(q, k=20),
        "expand": lambda q, key: expand.invoke({"keys": [key], "question": q}),
    }
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            ask_for = json.loads(line)
            current["q"] = ask_for["question"]
            fn = calls[ask_for["stage"]]
            start, used = time.perf_counter(), time.process_time()
            fn(ask_for["question"], ask_for["key"])
            spent = time.process_time() - used
            end = time.process_time() + (float(ask_for.get("slow", 1.0)) - 1.0) * spent
            while time.process_time() < end:
                pass
            cpu_ms = (time.process_time() - used) * 1000.0
            print(json.dumps({"cpu": round(cpu_ms, 4), "wall": round((time.perf_counter() - start) * 1000.0, 4)}),
                  flush=True)  # fmt: skip
    finally:
        bundle.close()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(Path(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "serve":
        serve(Path(argv[1]), int(argv[2]))
        return 0
    print("usage: worker.py build INDEX < graph.json | worker.py serve INDEX CPU", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
