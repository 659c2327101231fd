"""Embedder runtimes compared on real HPO text: torch (sentence-transformers) vs ONNX Runtime fp32 and int8.

Reports, per runtime: cosine to the torch vectors (min / 1st percentile / mean) on HPO
phenotype names, build-path throughput (texts/s over node texts, batches sorted by length,
``max_seq_length`` tokens), single-query latency (median and p90 ms), and the cold cost of a
fresh process that embeds one query (wall seconds, peak RSS, whether torch was imported).
The machine's load average is printed before and after: on a shared machine the absolute
figures move, the ratios much less (runtimes are interleaved round by round for that reason).

    python -m evals.studies.embedder_bench --names 1000 --texts 2000 --queries 200 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from graphs.embedding.embedder import Embedder, get_embedder

RUNTIMES = {"torch": ":torch", "onnx-fp32": "", "onnx-int8": ":int8"}

_COLD = """
import sys, time
t0 = time.perf_counter()
from graphs.embedding.embedder import get_embedder
emb = get_embedder(sys.argv[1])
emb.embed_query("seizures and microcephaly")
wall = time.perf_counter() - t0
# VmHWM, not ru_maxrss: after fork+exec ru_maxrss keeps the parent's high-water mark.
rss_mb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
print(f"{wall:.3f} {rss_mb:.0f} {'torch' in sys.modules}")
"""


def hpo_texts(n_names: int, n_texts: int) -> tuple[list[str], list[str]]:
    """Phenotype names (queries, equivalence) and node texts (build path), spread evenly over the ontology."""
    from graphs.loaders.hpo import load_hpo

    skb = load_hpo()
    keys = sorted(k for k, node in skb.nodes.items() if node.label == "Phenotype")
    names = [skb.nodes[k].name for k in keys[:: max(1, len(keys) // n_names)][:n_names]]
    all_keys = sorted(skb.nodes)
    texts = [skb.node_text(k) for k in all_keys[:: max(1, len(all_keys) // n_texts)][:n_texts]]
    return names, texts


def _loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _throughput(emb: Embedder, texts: list[str]) -> float:
    t0 = time.perf_counter()
    emb.embed(texts)
    return len(texts) / (time.perf_counter() - t0)


def _latency_ms(emb: Embedder, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        emb.embed_query(q)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _cold(spec: str) -> tuple[float, float, bool]:
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.run(
        [sys.executable, "-c", _COLD, spec], check=True, capture_output=True, text=True, cwd=repo, env=env
    )
    wall, rss, torch_loaded = proc.stdout.split()
    return float(wall), float(rss), torch_loaded == "True"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=1000)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    print(f"load average at start: {_loadavg()} ({os.cpu_count()} CPUs)")
    names, texts = hpo_texts(args.names, args.texts)
    embedders = {rt: get_embedder(f"minilm:{args.max_tokens}{suffix}") for rt, suffix in RUNTIMES.items()}
    for emb in embedders.values():
        emb.embed(names[:8])  # load models and sessions outside the timings

    reference = embedders["torch"].embed(names)
    result: dict[str, Any] = {"names": len(names), "texts": len(texts), "max_tokens": args.max_tokens, "runtimes": {}}
    for rt, emb in embedders.items():
        cos = np.sum(emb.embed(names) * reference, axis=1)
        result["runtimes"][rt] = {
            "model_name": emb.model_name,
            "cosine_vs_torch": {
                "min": float(cos.min()),
                "p01": float(np.quantile(cos, 0.01)),
                "mean": float(cos.mean()),
            },
            "texts_per_s": [],
            "query_ms": [],
        }
    queries = names[: args.queries]
    for _ in range(args.rounds):  # interleaved, so load spikes hit every runtime alike
        for rt, emb in embedders.items():
            result["runtimes"][rt]["texts_per_s"].append(_throughput(emb, texts))
            result["runtimes"][rt]["query_ms"].extend(_latency_ms(emb, queries))
    for rt, suffix in RUNTIMES.items():
        colds = [_cold(f"minilm:{args.max_tokens}{suffix}") for _ in range(args.cold_runs)]
        result["runtimes"][rt]["cold"] = {
            "wall_s": statistics.median(c[0] for c in colds),
            "peak_rss_mb": statistics.median(c[1] for c in colds),
            "imports_torch": any(c[2] for c in colds),
        }
    result["loadavg_end"] = _loadavg()

    print(f"{len(names)} HPO names, {len(texts)} node texts, max {args.max_tokens} tokens, {args.rounds} rounds")
    header = f"{'runtime':<10} {'cos min':>8} {'cos p01':>8} {'cos mean':>9} {'texts/s':>8} {'q ms p50':>9}"
    print(header + f" {'q ms p90':>9} {'cold s':>7} {'RSS MB':>7} torch")
    for rt, r in result["runtimes"].items():
        c, q = r["cosine_vs_torch"], r["query_ms"]
        print(
            f"{rt:<10} {c['min']:>8.5f} {c['p01']:>8.5f} {c['mean']:>9.6f} {statistics.median(r['texts_per_s']):>8.0f} "
            f"{statistics.median(q):>9.2f} {float(np.quantile(q, 0.9)):>9.2f} {r['cold']['wall_s']:>7.2f} "
            f"{r['cold']['peak_rss_mb']:>7.0f} {r['cold']['imports_torch']}"
        )
    print(f"load average at end: {result['loadavg_end']}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
