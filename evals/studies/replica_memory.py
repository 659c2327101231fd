"""What one `skb serve` replica holds in memory, part by part: which of it is shared and which is its own.

    python -m evals.studies.replica_memory --index-dir .skb/hpo --questions 200

Why: the sum of the replicas' PSS is only below one replica's times the number of replicas by what they share,
and on one machine they share only file-backed pages (the memory-mapped index files, the libraries); anonymous
memory -- the Python heap, what native libraries allocate -- is each replica's own. This opens the index the way a
replica does (`SKBToolkit` with ``ask``, the embedder and graph store warmed, the agent compiled, the HTTP app
built), then loads each lazily opened part on purpose (the HNSW graph of each label, the phrase index, the
lexicon) and asks questions, reading ``/proc/self/smaps_rollup`` after each step: the growth of anonymous memory
is what that part costs every replica. At the end ``/proc/self/smaps`` is summed per mapped file, and the largest
anonymous mappings are listed (hnswlib allocates each graph as one block: its size gives it away). The questions are
made in another process (making them lists every node of the graph, which a replica never does). Writes
``replica-memory.json`` and ``README.md`` to ``--out``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_OUT = Path("evals/reports/serve/memory")


def rollup() -> dict[str, float]:
    """This process's ``smaps_rollup`` in MB."""
    kb: dict[str, float] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            kb[name.strip()] = float(parts[0]) / 1024
    return kb


def mappings() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """RSS per mapped file (anonymous and heap under their own names) and the largest anonymous mappings."""
    by_name: dict[str, dict[str, Any]] = {}
    anon: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split(None, 5)
            low, high = (int(x, 16) for x in parts[0].split("-"))
            current = {"name": parts[5].strip() if len(parts) > 5 else "[anonymous]", "size_mb": (high - low) / 2**20}
            if current["name"] in ("[anonymous]", "[heap]"):
                anon.append(current)
            entry = by_name.setdefault(current["name"], {"name": current["name"], "rss_mb": 0.0, "anon_mb": 0.0,
                                                         "mappings": 0})
            entry["mappings"] += 1
            current["entry"] = entry
            continue
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and current:
            if name == "Rss":
                current["entry"]["rss_mb"] += float(parts[0]) / 1024
                current["rss_mb"] = float(parts[0]) / 1024
            elif name == "Anonymous":
                current["entry"]["anon_mb"] += float(parts[0]) / 1024
    files = sorted(by_name.values(), key=lambda e: -e["rss_mb"])
    largest = sorted(({"name": m["name"], "size_mb": round(m["size_mb"], 1), "rss_mb": round(m.get("rss_mb", 0), 1)}
                      for m in anon), key=lambda m: -m["rss_mb"])
    return [{k: round(v, 1) if isinstance(v, float) else v for k, v in e.items()} for e in files], largest


def _make_questions(index_dir: str, n: int) -> list[str]:
    from evals.studies.load_test import make_questions
    from graphs.bundle import IndexBundle

    with IndexBundle.open(Path(index_dir)) as bundle:
        return make_questions(bundle, n)


def questions_elsewhere(index_dir: Path, n: int) -> list[str]:
    """The load test's questions, made in a process of their own: making them lists every node of the graph (30 MB
    of node objects on HPO), which no replica does, so this process must not hold them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_make_questions, str(index_dir), n).result()


def run_study(index_dir: Path, questions: int) -> dict[str, Any]:
    asked = questions_elsewhere(index_dir, questions)
    steps: list[dict[str, Any]] = []
    last: dict[str, float] = {}

    def step(name: str) -> None:
        nonlocal last
        now = rollup()
        steps.append({
            "step": name, "rss_mb": round(now["Rss"], 1), "anon_mb": round(now["Anonymous"], 1),
            "file_mb": round(now["Rss"] - now["Anonymous"], 1),
            "anon_added_mb": round(now["Anonymous"] - last.get("Anonymous", 0.0), 1),
        })  # fmt: skip
        last = now

    step("interpreter")
    from agent.serving.endpoints import build_serve_app
    from agent.serving.toolkit import SKBToolkit
    from graphs.index.phrases import has_phrase_index, phrase_index_for

    step("imports (the agent, LangGraph, the MCP server)")
    toolkit = SKBToolkit(index_dir, include_ask=True)
    bundle = toolkit.bundle
    step("index opened (manifest, SKB, BM25 mapped)")
    bundle.warm_up().join()
    step("embedder (ONNX session) and graph store")
    bundle.search("warm up", mode="vss", k=10)
    step(f"global HNSW graph ({_graphs(bundle)})")
    labels = bundle.hnsw.label_names()  # not from the SKB's nodes: listing them would build every node object
    vector = bundle.embedder.embed_query("warm up")
    for label in labels:
        bundle.hnsw.search(vector, 5, label=label)
    step(f"HNSW graphs of {len(labels)} labels")
    if has_phrase_index(bundle):
        phrase_index_for(bundle)
        step(f"phrase index ({_graphs(bundle)})")
    toolkit.graph()  # not ``bundle.lexicon``: no question reads it (the linker has its own), so no replica holds it
    build_serve_app(toolkit)
    step("agent compiled, HTTP app")
    done = 0
    for n in sorted({min(5, questions), min(25, questions), questions}):
        for question in asked[done:n]:
            toolkit.answer(question)
        done = n
        step(f"{n} questions")
    files, largest = mappings()
    final = rollup()
    return {
        "index_dir": str(index_dir), "load_at_end": [round(x, 2) for x in os.getloadavg()], "steps": steps,
        "shared_file_mb": round(final["Rss"] - final["Anonymous"], 1), "anon_mb": round(final["Anonymous"], 1),
        "by_file": files[:25], "largest_anonymous": largest[:15],
    }  # fmt: skip


def _graphs(bundle: Any) -> str:
    """How the index's vector graphs are held: read into the process (hnswlib) or mapped (USearch)."""
    return "USearch, mapped" if bundle.manifest.hnsw.mapped else "hnswlib copies it"


def pss_ratio(anon_mb: float, shared_mb: float) -> float:
    """Two replicas' PSS over one's where each holds ``anon_mb`` of its own and maps ``shared_mb`` that both share:
    (2P + S) / (P + S)."""
    return round((2 * anon_mb + shared_mb) / max(anon_mb + shared_mb, 1e-9), 2)


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# What one replica holds",
        "",
        (f"Index `{report['index_dir']}`, load average at the end {report['load_at_end']}. "
        "Written by `python -m evals.studies.replica_memory`."),
        "",
        "| step | RSS MB | anonymous MB | file-backed MB | anonymous added MB |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in report["steps"]:
        lines.append(f"| {s['step']} | {s['rss_mb']:.0f} | {s['anon_mb']:.0f} | {s['file_mb']:.0f} | "
                     f"{s['anon_added_mb']:+.0f} |")
    lines += ["", (f"At the end: {report['anon_mb']:.0f} MB anonymous (each replica's own), "
              f"{report['shared_file_mb']:.0f} MB file-backed (shared between replicas on one machine): two "
              f"replicas' PSS would be {pss_ratio(report['anon_mb'], report['shared_file_mb'])}x one's."), "",
              "RSS by mapping (top 25):", "", "| mapping | RSS MB | anonymous MB | mappings |", "|---|---:|---:|---:|"]
    for e in report["by_file"]:
        lines.append(f"| `{e['name']}` | {e['rss_mb']:.1f} | {e['anon_mb']:.1f} | {e['mappings']} |")
    lines += ["", "Largest anonymous mappings (size MB, RSS MB):", "",
              ", ".join(f"{m['size_mb']:.0f}/{m['rss_mb']:.0f}" for m in report["largest_anonymous"])]
    return "\n".join(lines) + "\n"


def main(
    index_dir: Annotated[Path, typer.Option("--index-dir", help="index to open as a replica does")],
    questions: Annotated[int, typer.Option("--questions", min=1, help="questions asked at the end")] = 200,
    out: Annotated[Path, typer.Option("--out", help="report directory")] = DEFAULT_OUT,
) -> None:
    """Open the index as a replica, step by step, and write what each step added to its memory."""
    os.environ.setdefault("SKB_TRACING", "0")  # the question path's own memory, not the trace writer's queue
    report = run_study(index_dir, questions)
    out.mkdir(parents=True, exist_ok=True)
    (out / "replica-memory.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "README.md").write_text(markdown(report))
    typer.echo(markdown(report))


if __name__ == "__main__":
    typer.run(main)
