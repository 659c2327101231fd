"""The scale curve: build an index of a generated graph at each size and measure what it costs.

Per size: the build's wall time per stage (the build's own timings), peak RSS and CPU seconds per
stage (the build process and its children, the graph server included, sampled every 0.2 s and
attributed to the stage its progress lines name), the peak RSS of the largest single process, the index
size per part, and warm query latency in one process (p50/p95 of ``bundle.search`` in each mode and of
the offline agent, after one warm-up query).

    python -m evals.studies.scale.run --sizes 10000,100000 --out evals/reports/scale

Builds use the fast deterministic embedder (``hash:64``) unless ``--embedder`` says otherwise: a
scale run measures everything but the model. Results append to ``<out>/results.jsonl`` (one line per
size and run), so sizes measured in separate runs (the 1M build takes its own hour) share one table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.studies.process_cpu import processes
from evals.studies.scale.generate import generate

_STAGE = re.compile(r"^\[(\w+)\]")


def _tree_usage(root: int, each: dict[int, int] | None = None) -> tuple[int, float, int]:
    """RSS (KiB) and CPU seconds (user + system, waited-for children included) of ``root`` and every
    descendant (by parent pid), from /proc, and the RSS (KiB) of the largest one of them; ``each`` gets
    every process's RSS by pid (a Ray build's driver, raylet, workers and graph server are all descendants).

    Why CPU seconds: the machine these runs share has two cores and several users; wall time then
    measures the neighbours as much as the build, while CPU time is the build's own cost."""
    children: dict[int, list[int]] = {}
    usage: dict[int, tuple[int, float]] = {}
    for pid, stat in processes().items():
        children.setdefault(stat.ppid, []).append(pid)
        usage[pid] = (stat.rss_kib, stat.cpu_s + stat.children_cpu_s)
    rss, cpu, largest, todo = 0, 0.0, 0, [root]
    while todo:
        pid = todo.pop()
        r, c = usage.get(pid, (0, 0.0))
        rss, cpu, largest = rss + r, cpu + c, max(largest, r)
        if each is not None and pid in usage:
            each[pid] = r
        todo.extend(children.get(pid, []))
    return rss, cpu, largest


def _command(pid: int) -> str:
    """A process's command line, shortened to what names it (``ray::IDLE``, ``raylet``, ``falkordb-server``)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = words[0].decode("utf-8", "replace")
    if first.startswith("ray::"):
        return first
    name = Path(first).name
    line = b" ".join(words)
    if name.startswith("python") and b"multiprocessing.spawn" in line:
        return "build's spawned process (graph store load)"
    if name.startswith("python") and b"agent.cli import app" in line:
        return "build (skb index)"
    if name.startswith("python") and len(words) > 1:
        return Path(words[1].decode("utf-8", "replace")).name
    return name


def build(data: Path, index_dir: Path, embedder: str, timeout_s: float, engine: str = "local") -> dict[str, Any]:
    """Run ``skb index`` in a child process; its JSON summary plus peak RSS per stage (MiB), and the peak RSS
    of each of its processes that passed 200 MiB, named by command."""
    cmd = [sys.executable, "-c", "from agent.cli import app; app()", "index", "--dataset", "jsonl",
           "--data", str(data), "--index-dir", str(index_dir), "--embedder", embedder, "--force", "--json",
           "--engine", engine]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stage = ["load"]
    peaks: dict[str, int] = {}
    process_peak = 0
    log: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            m = _STAGE.match(line)
            if m:
                stage[0] = m.group(1)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    cpu_by_stage: dict[str, float] = {}
    last_cpu = 0.0
    each: dict[int, int] = {}
    by_pid: dict[int, tuple[int, str]] = {}  # pid -> (peak RSS KiB, stage of the peak)
    names: dict[int, str] = {}
    while proc.poll() is None:
        rss, cpu, largest = _tree_usage(proc.pid, each)
        for pid, kib in each.items():
            if kib > by_pid.get(pid, (0, ""))[0]:
                by_pid[pid] = (kib, stage[0])
                if kib > 200 * 1024 and pid not in names:
                    names[pid] = _command(pid)
        each.clear()
        peaks[stage[0]] = max(peaks.get(stage[0], 0), rss)
        process_peak = max(process_peak, largest)
        if cpu > last_cpu:  # 0 once the process has exited between poll() and the read
            cpu_by_stage[stage[0]] = cpu_by_stage.get(stage[0], 0.0) + cpu - last_cpu
            last_cpu = cpu
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            raise TimeoutError(f"build of {data} ran past {timeout_s:.0f} s")
        time.sleep(0.2)
    out = proc.stdout.read() if proc.stdout else ""
    reader.join(timeout=5)
    if proc.returncode != 0:
        raise RuntimeError(f"build failed ({proc.returncode}): {''.join(log)[-2000:]}")
    summary = json.loads(out[out.index("{"):])
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    summary["peak_rss_mib"] = {k: round(v / 1024, 1) for k, v in peaks.items()}
    summary["peak_rss_mib_max"] = round(max(peaks.values(), default=0) / 1024, 1)
    summary["peak_rss_mib_one_process"] = round(process_peak / 1024, 1)  # the largest single process's peak
    largest_first = sorted((pid for pid in by_pid if pid in names), key=lambda pid: -by_pid[pid][0])
    summary["peak_rss_mib_by_process"] = [
        {"process": names[pid], "pid": pid, "peak_rss_mib": round(by_pid[pid][0] / 1024, 1), "stage": by_pid[pid][1]}
        for pid in largest_first]
    summary["cpu_s"] = {k: round(v, 2) for k, v in cpu_by_stage.items()}
    summary["cpu_s_total"] = round(sum(cpu_by_stage.values()), 2)
    summary["parts_mib"] = {p.name: round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20, 1)
                            for p in sorted(index_dir.iterdir()) if p.is_dir()}
    return summary


def questions(data: Path, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (question, answer key) pairs from the generated graph: documents named by one of their
    concepts and one of their authors (both relations exist in every generated graph)."""
    names: dict[str, str] = {}
    labels: dict[str, str] = {}
    with gzip.open(data / "nodes.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            labels[obj["key"]] = obj["label"]
            if obj["label"] != "Document":
                names[obj["key"]] = obj["props"]["name"]
    docs = [k for k, lab in labels.items() if lab == "Document"]
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(len(docs), size=min(n * 3, len(docs)), replace=False).tolist())
    wanted = {docs[i] for i in chosen}
    about: dict[str, str] = {}
    author: dict[str, str] = {}
    with gzip.open(data / "edges.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            if '"ABOUT"' not in line and '"WRITTEN_BY"' not in line:
                continue
            obj = json.loads(line)
            if obj["src"] in wanted:
                (about if obj["rel"] == "ABOUT" else author).setdefault(obj["src"], obj["dst"])
    out = [(f"Which document is about {names[about[d]]} and written by {names[author[d]]}?", d)
           for d in sorted(wanted, key=lambda k: int(k[1:])) if d in about and d in author]
    return out[:n]


def _pcts(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2), "p95_ms": round(float(np.percentile(arr, 95)), 2),
            "n": len(values)}


def latency(index_dir: Path, data: Path, n_search: int, n_agent: int, seed: int) -> dict[str, Any]:
    """Warm latency in this process: one warm-up call per kind, then ``n`` timed calls each."""
    from agent.api import ask
    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle

    qs = questions(data, max(n_search, n_agent) + 1, seed)
    t0 = time.perf_counter()
    bundle = IndexBundle.open(index_dir)
    out: dict[str, Any] = {"open_ms": round((time.perf_counter() - t0) * 1000, 1)}
    for mode in ("bm25", "vss", "hybrid"):
        bundle.search(qs[0][0], mode=mode, k=20)  # type: ignore[arg-type]
        times = []
        for q, _ in qs[1 : n_search + 1]:
            t = time.perf_counter()
            bundle.search(q, mode=mode, k=20)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t) * 1000)
        out[f"search_{mode}"] = _pcts(times)
    config = AgentConfig()
    t = time.perf_counter()
    ask(qs[0][0], bundle=bundle, config=config)
    out["agent_first_ms"] = round((time.perf_counter() - t) * 1000, 1)
    t = time.perf_counter()
    _ = bundle.store  # started now if the first question did not need it: warm means the graph server runs
    out["store_start_ms"] = round((time.perf_counter() - t) * 1000, 1)
    times, hits = [], 0
    for q, answer in qs[1 : n_agent + 1]:
        t = time.perf_counter()
        result = ask(q, bundle=bundle, config=config)
        times.append((time.perf_counter() - t) * 1000)
        hits += bool(result.context) and result.context[0].key == answer
    out["agent"] = _pcts(times)
    out["agent_hit1"] = round(hits / max(1, len(times)), 3)
    bundle.close()
    return out


def _last_build(results: Path, size: int) -> tuple[dict[str, Any], float, str] | None:
    """The last build measured for ``size`` in ``results``, the load average it started at and its engine."""
    found = None
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("nodes_requested") == size and "build" in row:
                found = (row["build"], float(row.get("build_load_avg_start", row.get("load_avg_start", 0.0))),
                         str(row.get("engine", "local")))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated node counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edges-per-node", type=float, default=10.0,
                        help="edges per node of a graph generated here (MAG's shape: 21)")
    parser.add_argument("--engine", default="local", choices=("local", "ray"), help="the build's --engine")
    parser.add_argument("--embedder", default="hash:64", help="embedder spec of the builds (default: hash:64)")
    parser.add_argument("--work", type=Path, default=Path(".skb/scale"), help="where data and indexes go")
    parser.add_argument("--out", type=Path, default=Path("evals/reports/scale"))
    parser.add_argument("--searches", type=int, default=50)
    parser.add_argument("--agent", type=int, default=30)
    parser.add_argument("--build-timeout", type=float, default=3600.0)
    parser.add_argument("--skip-build", action="store_true",
                        help="measure latency on existing indexes only (the row keeps the size's last measured build)")
    parser.add_argument("--skip-latency", action="store_true",
                        help="build only; a later --skip-build run adds the latency (the 1M build takes its own hour)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in args.sizes.split(",")):
        data = args.work / "data" / str(size)
        index_dir = args.work / "index" / str(size)
        row: dict[str, Any] = {"nodes_requested": size, "seed": args.seed, "embedder": args.embedder, "engine": args.engine,
                               "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0]}
        if not (data / "generated.json").is_file():
            t = time.perf_counter()
            generate(size, data, seed=args.seed, edges_per_node=args.edges_per_node)
            row["generate_s"] = round(time.perf_counter() - t, 2)
        row["graph"] = json.loads((data / "generated.json").read_text())
        if not args.skip_build:
            row["build"] = build(data, index_dir, args.embedder, args.build_timeout, args.engine)
            print(json.dumps({"size": size, "build": row["build"]["timings_s"],
                              "wall_s": row["build"]["wall_s"]}), flush=True)
        else:
            previous = _last_build(args.out / "results.jsonl", size)
            if previous is not None:
                row["build"], row["build_load_avg_start"], row["engine"] = previous
        if not args.skip_latency:
            row["latency"] = latency(index_dir, data, args.searches, args.agent, args.seed)
        row["load_avg_end"] = os.getloadavg()[0]
        with (args.out / "results.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps({"size": size, "latency": row.get("latency")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
