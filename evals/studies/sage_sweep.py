"""SAGE percentile sweep: how the similarity-edge percentile changes the agent's recall.

Candidates (per-field kNN pairs) are computed once; each percentile then only selects
edges, so a sweep costs one embedding pass plus one agent run per setting. SAGE is
compared at an equal context budget: k seeds + k' neighbours against k + k' seeds.

    python -m evals.studies.sage_sweep --bench ../shared/bench/hpo_cases_dev.csv --index-dir .skb/hpo \
        --percentiles 90,95,97,99 --limit 300 --out runs/sage-sweep
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.api import ask
from agent.config import AgentConfig
from evals.bench import load_bench
from evals.metrics import hit_at_k, recall_at_k
from graphs.build import default_cache_dir
from graphs.bundle import IndexBundle
from graphs.embedding.embedder import get_embedder
from graphs.sage.edges import compute_candidates

app = typer.Typer(add_completion=False)


def _score(bundle: IndexBundle, questions: list[Any], config: AgentConfig) -> dict[str, float]:
    known = bundle.skb.nodes
    rows = [q for q in questions if any(a in known for a in q.answer_ids)]
    hits1 = hits5 = rec20 = 0.0
    start = time.perf_counter()
    for q in rows:
        ranked = [item.key for item in sorted(ask(q.query, bundle=bundle, config=config).context, key=lambda i: i.rank)]
        hits1 += hit_at_k(ranked, q.answer_ids, 1)
        hits5 += hit_at_k(ranked, q.answer_ids, 5)
        rec20 += recall_at_k(ranked, q.answer_ids, 20)
    n = max(1, len(rows))
    return {"n": len(rows), "hit@1": hits1 / n, "hit@5": hits5 / n, "recall@20": rec20 / n,
            "ms_per_q": (time.perf_counter() - start) * 1000 / n}


@app.command()
def main(
    bench: Annotated[Path, typer.Option(help="benchmark CSV")],
    index_dir: Annotated[Path, typer.Option(help="index directory", envvar="SKB_INDEX_DIR")],
    percentiles: Annotated[str, typer.Option(help="comma-separated percentiles")] = "90,95,97,99",
    logic: Annotated[str, typer.Option(help="or | and")] = "or",
    field_embedder: Annotated[str, typer.Option(help="embedder for the field texts")] = "minilm",
    k: Annotated[int, typer.Option(help="seeds when expanding (k + k' = budget)")] = 10,
    k_prime: Annotated[int, typer.Option(help="SAGE neighbours")] = 10,
    limit: Annotated[int | None, typer.Option(help="first N questions")] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/sage-sweep"),
) -> None:
    bundle = IndexBundle.open(index_dir)
    questions = list(load_bench(bench, limit=limit).questions)
    t0 = time.perf_counter()
    embedder = get_embedder(field_embedder, cache_dir=default_cache_dir(index_dir) / "emb")
    candidates = compute_candidates(bundle.skb, bundle.hnsw, embedder)
    candidate_s = time.perf_counter() - t0
    budget = AgentConfig(k=k + k_prime, k_prime=0, policy="never")
    rows: list[dict[str, Any]] = [{"setting": f"no SAGE (k={k + k_prime})", "edges": 0,
                                   **_score(bundle, questions, budget)}]
    bundle._similar = {}
    rows.append({"setting": f"SAGE schema edges only (k={k}, k'={k_prime})", "edges": 0,
                 **_score(bundle, questions, AgentConfig(k=k, k_prime=k_prime, policy="always"))})
    for p in [float(x) for x in percentiles.split(",") if x.strip()]:
        t1 = time.perf_counter()
        sim = candidates.select(p, logic)  # type: ignore[arg-type]
        bundle._similar = sim.neighbors()
        select_s = time.perf_counter() - t1
        score = _score(bundle, questions, AgentConfig(k=k, k_prime=k_prime, policy="always"))
        rows.append({"setting": f"SAGE + similarity p{p:g} {logic} (k={k}, k'={k_prime})", "edges": sim.count,
                     "select_s": round(select_s, 2), **score})
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"candidate_s": candidate_s, "rows": rows}, indent=2))
    lines = ["| setting | similarity edges | n | Hit@1 | Hit@5 | R@20 | ms/q |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['edges']:,} | {r['n']} | {r['hit@1']:.3f} | {r['hit@5']:.3f} | "
                     f"{r['recall@20']:.3f} | {r['ms_per_q']:.0f} |")
    (out / "sweep.md").write_text("\n".join(lines) + f"\n\ncandidates computed in {candidate_s:.1f}s\n")
    print("\n".join(lines))
    print(f"candidates computed in {candidate_s:.1f}s")


if __name__ == "__main__":
    app()
