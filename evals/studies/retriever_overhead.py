"""What the LangChain retriever costs on top of ``ask``, and that it returns the same ranking.

    python -m evals.studies.retriever_overhead --index-dir .skb/hpo --bench ../shared/bench/hpo_cases_dev_answerable.csv \
        --limit 200 [--out runs/retriever-overhead.json]

Each question goes through ``ask`` and ``SKBRetriever.invoke`` (agent mode, the same AgentConfig), in alternating
order so that a slower minute of the machine hits both; the report gives p50/p95 per path, the median per-question
difference, and how many questions ranked differently (expected: none -- the retriever is a mapping of the context).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(index_dir: Path, questions: list[str], warmup: int = 5, passes: int = 2) -> dict[str, Any]:
    """One report per pass over the questions: the first builds each node's text once (the retriever's
    Document text cache), later passes show the steady state."""
    from agent import AgentConfig, SKBRetriever
    from graphs.bundle import IndexBundle

    config = AgentConfig()
    with IndexBundle.open(index_dir) as bundle:
        retriever = SKBRetriever(bundle=bundle, config=config)
        reports = [_one_pass(bundle, retriever, config, questions, warmup if i == 0 else 0) for i in range(passes)]
    return {"index_dir": str(index_dir), "questions": len(questions), "passes": reports}


def _one_pass(bundle: Any, retriever: Any, config: Any, questions: list[str], warmup: int) -> dict[str, Any]:
    from agent import ask

    for question in questions[:warmup]:
        ask(question, bundle=bundle, config=config)
        retriever.invoke(question)
    ask_ms: list[float] = []
    retriever_ms: list[float] = []
    differ: list[str] = []
    for i, question in enumerate(questions):
        order = ("ask", "retriever") if i % 2 == 0 else ("retriever", "ask")
        keys: dict[str, list[str]] = {}
        for path in order:
            t0 = time.perf_counter()
            if path == "ask":
                keys[path] = [item.key for item in ask(question, bundle=bundle, config=config).context]
                ask_ms.append((time.perf_counter() - t0) * 1000)
            else:
                keys[path] = [doc.metadata["key"] for doc in retriever.invoke(question)]
                retriever_ms.append((time.perf_counter() - t0) * 1000)
        if keys["ask"] != keys["retriever"]:
            differ.append(question)
    deltas = [r - a for a, r in zip(ask_ms, retriever_ms, strict=True)]
    return {
        "ask_ms": {"p50": round(_pct(ask_ms, 0.5), 2), "p95": round(_pct(ask_ms, 0.95), 2)},
        "retriever_ms": {"p50": round(_pct(retriever_ms, 0.5), 2), "p95": round(_pct(retriever_ms, 0.95), 2)},
        "median_delta_ms": round(statistics.median(deltas), 2),
        "rankings_differ": len(differ),
        "differ_examples": differ[:5],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--bench", type=Path, required=True, help="CSV with a `query` column")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with args.bench.open(newline="", encoding="utf-8") as fh:
        questions = [row["query"] for row in csv.DictReader(fh)][: args.limit]
    report = measure(args.index_dir, questions)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
