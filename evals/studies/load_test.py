"""Load test: many threads asking questions of one open index; latency percentiles and memory.

    python -m evals.studies.load_test --index-dir .skb/hpo --threads 8 --calls 200

Why: the agent, the tools and the IndexBundle are shared across threads in servers (MCP, HTTP)
and eval runs. This drives ``ask`` (offline planner by default, no network) and
``IndexBundle.search`` concurrently over a pool of questions generated from the index's own node
names, and reports p50/p95/p99 latency per operation, errors, RSS over time (it should stay flat
once caches are warm), open file descriptors and FalkorDB server processes before and after.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle

Mode = Literal["mixed", "ask", "search"]

_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Phenotype": (
        "Which disease has {name}?",
        "What conditions present with {name} and related features?",
        "{name}",
    ),
    "Disease": (
        "Which genes are associated with {name}?",
        "What are the phenotypes of {name}?",
        "Tell me about {name}",
    ),
    "Gene": ("Which diseases are caused by variants in {name}?", "What does {name} do?"),
}
_GENERIC = ("Which nodes are related to {name}?", "{name}")


class OpStats(BaseModel):
    """Latency of one operation kind, in milliseconds."""

    calls: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


class LoadReport(BaseModel):
    threads: int
    calls_per_thread: int
    total_calls: int
    distinct_questions: int
    mode: str
    wall_s: float
    throughput_per_s: float
    ops: dict[str, OpStats]
    errors: list[str] = Field(default_factory=list, description="first few error messages")
    rss_mb_start: float
    rss_mb_after_warmup: float
    rss_mb_end: float
    rss_mb_peak: float
    rss_growth_after_warmup_mb: float
    rss_samples_mb: list[float] = Field(default_factory=list, description="RSS every ~5% of the calls")
    open_fds_before: int
    open_fds_after: int
    falkordb_children_before: int
    falkordb_children_after: int

    def summary(self) -> str:
        lines = [
            (
                f"{self.total_calls} calls ({self.threads} threads x {self.calls_per_thread}), "
                f"{self.distinct_questions} distinct questions, mode={self.mode}: {self.wall_s:.1f} s, "
                f"{self.throughput_per_s:.1f} calls/s"
            ),
        ]
        for name, op in sorted(self.ops.items()):
            lines.append(
                f"  {name:<7} n={op.calls:<5} errors={op.errors:<3} p50={op.p50_ms:8.1f} ms  p95={op.p95_ms:8.1f} ms  "
                f"p99={op.p99_ms:8.1f} ms  max={op.max_ms:8.1f} ms"
            )
        lines.append(
            f"  RSS MB: start {self.rss_mb_start:.0f}, after warm-up {self.rss_mb_after_warmup:.0f}, "
            f"end {self.rss_mb_end:.0f}, peak {self.rss_mb_peak:.0f} "
            f"(growth after warm-up {self.rss_growth_after_warmup_mb:+.1f})"
        )
        lines.append(
            f"  fds {self.open_fds_before} -> {self.open_fds_after}; FalkorDB children "
            f"{self.falkordb_children_before} -> {self.falkordb_children_after}"
        )
        for err in self.errors:
            lines.append(f"  error: {err}")
        return "\n".join(lines)


# -- process probes (Linux /proc; zero elsewhere) ---------------------------------------------
def rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def falkordb_children() -> int:
    """redis-server processes whose parent is this process (the managed FalkorDB servers)."""
    me, count = os.getpid(), 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == me and "redis" in comm:
            count += 1
    return count


# -- questions -----------------------------------------------------------------------------------
def make_questions(bundle: IndexBundle, n: int = 1000, seed: int = 0) -> list[str]:
    """``n`` distinct-as-possible questions built from node names with per-label templates."""
    rng = random.Random(seed)
    nodes = sorted(bundle.skb.nodes.values(), key=lambda node: node.key)
    if not nodes:
        return []
    pool: list[str] = []
    for node in nodes:
        for template in _TEMPLATES.get(node.label, _GENERIC):
            pool.append(template.format(name=node.name))
    rng.shuffle(pool)
    questions = list(dict.fromkeys(pool))[:n]
    while len(questions) < n:  # small graphs: combine two names to reach n distinct questions
        a, b = rng.sample(nodes, 2) if len(nodes) > 1 else (nodes[0], nodes[0])
        questions.append(f"What links {a.name} and {b.name}? ({len(questions)})")
    return questions


def _percentile(sorted_ms: Sequence[float], q: float) -> float:
    if not sorted_ms:
        return 0.0
    idx = min(len(sorted_ms) - 1, max(0, round(q / 100.0 * (len(sorted_ms) - 1))))
    return float(sorted_ms[idx])


def _stats(latencies: list[float], errors: int) -> OpStats:
    ordered = sorted(latencies)
    return OpStats(
        calls=len(latencies) + errors,
        errors=errors,
        p50_ms=round(_percentile(ordered, 50), 2),
        p95_ms=round(_percentile(ordered, 95), 2),
        p99_ms=round(_percentile(ordered, 99), 2),
        max_ms=round(ordered[-1], 2) if ordered else 0.0,
        mean_ms=round(statistics.fmean(ordered), 2) if ordered else 0.0,
    )


def run_load(
    bundle: IndexBundle,
    *,
    threads: int = 8,
    calls: int = 200,
    questions: Sequence[str] | None = None,
    n_questions: int = 1000,
    mode: Mode = "mixed",
    config: AgentConfig | None = None,
    warmup: int = 4,
) -> LoadReport:
    """Run ``threads`` x ``calls`` operations; call ``i`` uses question ``i mod len(questions)``.

    ``mixed`` alternates ``ask`` and hybrid ``search``. A few warm-up calls (model load, compiled
    agent, caches) run first on the calling thread and are not counted; RSS after them is the
    baseline for "memory stays flat".
    """
    from agent.api import ask
    from agent.config import AgentConfig

    cfg = config or AgentConfig()
    pool = list(questions) if questions else make_questions(bundle, n_questions)
    if not pool:
        raise ValueError("no questions: the index has no nodes")

    def op_for(i: int) -> tuple[str, Callable[[str], object]]:
        if mode == "ask" or (mode == "mixed" and i % 2 == 0):
            return "ask", lambda q: ask(q, bundle=bundle, config=cfg)
        return "search", lambda q: bundle.search(q, mode="hybrid", k=20)

    rss_start = rss_mb()
    for i in range(warmup):
        _name, fn = op_for(i)
        fn(pool[i % len(pool)])
    # baselines after warm-up: the model, the compiled agent and the store's server are up by now
    rss_warm, fds_before, children_before = rss_mb(), open_fds(), falkordb_children()
    total = threads * calls
    lock = threading.Lock()
    latencies: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    messages: list[str] = []
    samples: list[float] = [rss_warm]
    peak = [rss_warm]
    done = [0]
    every = max(1, total // 20)

    def worker(t: int) -> None:
        for j in range(calls):
            i = t * calls + j
            name, fn = op_for(i)
            question = pool[i % len(pool)]
            start = time.perf_counter()
            try:
                fn(question)
                ok = True
            except Exception as exc:  # noqa: BLE001 - counted and reported, the load goes on
                ok = False
                detail = f"{name} {question[:60]!r}: {type(exc).__name__}: {exc}"
                if not messages:
                    detail += "\n" + traceback.format_exc(limit=4)
            elapsed = (time.perf_counter() - start) * 1000.0
            with lock:
                if ok:
                    latencies.setdefault(name, []).append(elapsed)
                else:
                    failures[name] = failures.get(name, 0) + 1
                    if len(messages) < 5:
                        messages.append(detail)
                done[0] += 1
                if done[0] % every == 0:
                    rss = rss_mb()
                    samples.append(round(rss, 1))
                    peak[0] = max(peak[0], rss)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="load") as pool_exec:
        list(pool_exec.map(worker, range(threads)))
    wall = time.perf_counter() - started
    rss_end = rss_mb()
    names = sorted(set(latencies) | set(failures))
    return LoadReport(
        threads=threads,
        calls_per_thread=calls,
        total_calls=total,
        distinct_questions=min(len(pool), total),
        mode=mode,
        wall_s=round(wall, 3),
        throughput_per_s=round(total / wall, 2) if wall > 0 else 0.0,
        ops={name: _stats(latencies.get(name, []), failures.get(name, 0)) for name in names},
        errors=messages,
        rss_mb_start=round(rss_start, 1),
        rss_mb_after_warmup=round(rss_warm, 1),
        rss_mb_end=round(rss_end, 1),
        rss_mb_peak=round(max(peak[0], rss_end), 1),
        rss_growth_after_warmup_mb=round(rss_end - rss_warm, 1),
        rss_samples_mb=samples,
        open_fds_before=fds_before,
        open_fds_after=open_fds(),
        falkordb_children_before=children_before,
        falkordb_children_after=falkordb_children(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m evals.studies.load_test", description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-dir", type=Path, required=True, help="an index built by `skb index`")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200, help="calls per thread")
    parser.add_argument("--questions", type=int, default=1000, help="distinct generated questions")
    parser.add_argument("--mode", choices=["mixed", "ask", "search"], default="mixed")
    parser.add_argument("--planner", choices=["offline", "openai"], default="offline")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.calls < 1 or args.questions < 1:
        parser.error("--threads, --calls and --questions must be at least 1")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle
    from graphs.errors import SKBError

    try:
        bundle = IndexBundle.open(args.index_dir)
    except SKBError as exc:
        parser.exit(2, f"error: {exc}\n")
    try:
        report = run_load(
            bundle,
            threads=args.threads,
            calls=args.calls,
            n_questions=args.questions,
            mode=args.mode,
            config=AgentConfig(planner=args.planner),
        )
    finally:
        bundle.close()
    print(report.summary())
    if args.json is not None:
        from graphs.manifest import atomic_write_text

        atomic_write_text(args.json, json.dumps(report.model_dump(mode="json"), indent=2))
    failed = sum(op.errors for op in report.ops.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__: list[str] = ["LoadReport", "OpStats", "main", "make_questions", "run_load"]
