"""Two indexes of one graph asked the same benchmark: per-cell Hit@1 on each side and the share of identical top 20s.

Why a module: the studies that check an index made another way (an update against a rebuild, a Ray build against
the in-process one) ask the same question of their two sides, and judge the answer by the same rule.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from evals.runner import RESULTS_FILE, QuestionResult, method_dir_name, read_results


def evaluate(bench: Path, index_dir: Path, methods: list[str], out: Path) -> dict[str, list[QuestionResult]]:
    """Each method's results on ``bench`` (``evals.cli run`` in a process of its own, into ``out``)."""
    cmd = [sys.executable, "-m", "evals.cli", "run", "--bench", str(bench), "--index-dir", str(index_dir), "--out",
           str(out), "-q"] + [arg for m in methods for arg in ("--method", m)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"evaluating {index_dir} failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return {m: read_results(out / method_dir_name(m) / RESULTS_FILE) for m in methods}


def compare(a: list[QuestionResult], b: list[QuestionResult], sides: tuple[str, str]) -> dict[str, Any]:
    """Mean metrics of the two sides (named ``sides``), Hit@1 per cell (a question's style) and the share of questions
    whose top-20 keys are the same."""
    by_id = {r.id: r for r in b}
    pairs = [(r, by_id[r.id]) for r in a if r.id in by_id]
    metrics = sorted(set(pairs[0][0].metrics)) if pairs else []
    out: dict[str, Any] = {"questions": len(pairs)}
    for name in metrics:
        ua = statistics.fmean(x.metrics.get(name, 0.0) for x, _ in pairs)
        ub = statistics.fmean(y.metrics.get(name, 0.0) for _, y in pairs)
        out[name] = {sides[0]: round(ua, 4), sides[1]: round(ub, 4), "difference": round(ua - ub, 4)}
    cells: dict[str, list[tuple[float, float]]] = {}
    for x, y in pairs:  # a cell: the questions of one style (MetaQA: 1-, 2-, 3-hop)
        cells.setdefault(x.style or "all", []).append((x.metrics.get("hit@1", 0.0), y.metrics.get("hit@1", 0.0)))
    out["hit@1_by_cell"] = {c: [round(statistics.fmean(u for u, _ in v), 4), round(statistics.fmean(r for _, r in v), 4)]
                            for c, v in sorted(cells.items())}  # fmt: skip
    out["largest_cell_difference"] = round(max(abs(u - r) for u, r in out["hit@1_by_cell"].values()), 4) if cells else None
    same = [x.ranked_keys[:20] == y.ranked_keys[:20] for x, y in pairs]
    out["top20_identical"] = round(statistics.fmean(same), 4) if same else None
    out["first_different"] = next((x.id for (x, _), s in zip(pairs, same, strict=True) if not s), None)
    return out
