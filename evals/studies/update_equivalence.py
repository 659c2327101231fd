"""An updated index against a rebuild of the same changed data: the same answers on a benchmark.

Why: an update patches the parent generation's parts (HNSW slots, phrase entries, the graph's files) instead of
building them; what a user must be able to rely on is that the result answers as a full build of the changed data
would. This copies a complete index (its embedding cache too, and a second copy of the cache for the rebuild: both
then embed only what changed, the same texts), applies a change set drawn from its own graph (``--edit`` of the
nodes get a revised text, ``--delete`` are deleted with their edges, ``--add`` new nodes with three edges each:
``update_timing.change_lines``), builds the changed graph afresh with the index's own settings, and runs the
benchmark's methods on both.

Per method it reports Hit@1 (and the other metrics) on each side and their difference, and the share of questions
whose top-20 keys are identical; bm25 is exact on both sides, so its top-20 must be identical everywhere.

    python -m evals.studies.update_equivalence --index .skb/hpo --bench ../shared/bench/hpo_cases_dev_answerable.csv \\
        --work /tmp/eq-hpo --method agent --method bm25 --method hybrid --out evals/reports/updates/equal_hpo.json
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from evals.studies.output import emit
from evals.studies.same_answers import compare, evaluate
from evals.studies.update_timing import change_lines, copy_index
from graphs.build import IndexConfig, build_index, default_cache_dir


def _spread_sample(bench: Path, n: int, out: Path) -> Path:
    """Every k-th question of the CSV, ``n`` in all: a benchmark ordered by kind (MetaQA: by hops) keeps its mix."""
    with bench.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    step = max(1, len(body) // n)
    with out.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *body[::step][:n]])
    return out


def run(index: Path, bench: Path, work: Path, methods: list[str], shares: tuple[float, float, float],
        seed: int, sample: int | None = None) -> dict[str, Any]:  # fmt: skip
    from graphs.loaders.jsonl import load_jsonl
    from graphs.manifest import Manifest
    from graphs.update import read_changes, update_index

    if work.exists():
        shutil.rmtree(work)
    updated, rebuilt = work / "updated", work / "rebuilt"
    copy_index(index, updated)
    nodes = len(load_jsonl(updated / "skb").nodes)
    counts = tuple(round(share * nodes) for share in shares)
    lines = change_lines(updated, sum(counts), seed, counts=counts)  # type: ignore[arg-type]
    changes = work / "changes.jsonl"
    changes.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    # the rebuild gets the cache as the update found it: both then embed the same changed texts
    rebuild_cache = work / "rebuild-cache"
    shutil.copytree(default_cache_dir(updated), rebuild_cache)
    started = time.perf_counter()
    summary = update_index(updated, read_changes(changes))
    update_s = time.perf_counter() - started
    config = IndexConfig.model_validate(Manifest.read(updated).extra["config"])
    started = time.perf_counter()
    build_index(load_jsonl(updated / "skb"), rebuilt, config.model_copy(update={"cache_dir": rebuild_cache}))
    rebuild_s = time.perf_counter() - started
    if sample:
        bench = _spread_sample(bench, sample, work / "bench.csv")
    results = {side: evaluate(bench, work / side, methods, work / f"runs-{side}") for side in ("updated", "rebuilt")}
    return {
        "index": str(index), "bench": str(bench), "nodes": nodes, "edited_deleted_added": list(counts),
        "changed_nodes": summary.changed_nodes, "deleted_nodes": summary.deleted_nodes, "hnsw": summary.hnsw,
        "update_s": round(update_s, 1), "rebuild_s": round(rebuild_s, 1), "questions_from": str(bench),
        "methods": {m: compare(results["updated"][m], results["rebuilt"][m], ("updated", "rebuilt")) for m in methods},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--index", type=Path, required=True, help="a complete index (copied, never written)")
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="work directory (emptied first)")
    parser.add_argument("--method", action="append", default=None)
    parser.add_argument("--edit", type=float, default=0.01)
    parser.add_argument("--delete", type=float, default=0.005)
    parser.add_argument("--add", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=None, help="evaluate every k-th question, this many in all")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.index, args.bench, args.work, args.method or ["agent", "bm25", "hybrid"],
                 (args.edit, args.delete, args.add), args.seed, args.sample)  # fmt: skip
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
