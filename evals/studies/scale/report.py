"""The scale report: a table and plots of build cost and latency against graph size.

    python -m evals.studies.scale.report --results evals/reports/scale/results.jsonl --out evals/reports/scale

Reads the rows ``evals.studies.scale.run`` appended (the last row per size wins) and writes ``table.md`` and
``build_time.png``, ``peak_rss.png``, ``index_size.png``, ``latency.png``. The growth column is the
exponent ``b`` of ``cost ~ nodes^b`` between consecutive sizes: about 1 is linear, clearly above 1
marks a stage that grows faster than the graph.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

STAGES = ("load", "write_skb", "fast_start", "texts", "embed", "hnsw", "bm25", "phrases", "store")


def load_rows(path: Path) -> list[dict[str, Any]]:
    """One row per size (the last measured), by size."""
    rows: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if "build" in row:
                rows[int(row["graph"]["nodes"])] = row
    return [rows[n] for n in sorted(rows)]


def _growth(a: float, b: float, na: int, nb: int) -> str:
    if a <= 0 or b <= 0:
        return "-"
    return f"{math.log(b / a) / math.log(nb / na):.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one column per size, one row per measure, growth exponents between sizes."""
    sizes = [int(r["graph"]["nodes"]) for r in rows]
    head = ["measure", *(f"{n:,} nodes / {r['graph']['edges']:,} edges" for n, r in zip(sizes, rows, strict=True))]
    head += [f"growth {a // 1000}k->{b // 1000}k" for a, b in itertools.pairwise(sizes)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def add(name: str, values: list[float], fmt: str) -> None:
        cells = [format(v, fmt) if not math.isnan(v) else "-" for v in values]
        growth = [_growth(a, b, na, nb) for a, b, na, nb in zip(values, values[1:], sizes, sizes[1:], strict=False)]
        lines.append("| " + " | ".join([name, *cells, *growth]) + " |")

    nan = float("nan")
    for stage in STAGES:
        values = [float(r["build"]["timings_s"].get(stage, nan)) for r in rows]
        if any(not math.isnan(v) for v in values):
            add(f"build {stage} (s)", values, ".1f")
    add("build wall, whole process (s)", [float(r["build"]["wall_s"]) for r in rows], ".1f")
    if all("cpu_s" in r["build"] for r in rows):
        add("build CPU, whole process (s)", [float(r["build"]["cpu_s_total"]) for r in rows], ".1f")
        for stage in sorted({s for r in rows for s in r["build"]["cpu_s"]}, key=lambda s: (s not in STAGES, s)):
            add(f"  CPU during {stage} (s)", [float(r["build"]["cpu_s"].get(stage, nan)) for r in rows], ".1f")
    add("peak RSS, build + graph server (MiB)", [float(r["build"]["peak_rss_mib_max"]) for r in rows], ",.0f")
    stages_rss = sorted({s for r in rows for s in r["build"]["peak_rss_mib"]}, key=lambda s: (s not in STAGES, s))
    for stage in stages_rss:
        add(f"  peak RSS during {stage} (MiB)", [float(r["build"]["peak_rss_mib"].get(stage, nan)) for r in rows],
            ",.0f")
    add("index size (MiB)", [float(r["build"]["size_bytes"]) / 2**20 for r in rows], ",.0f")
    parts = sorted({p for r in rows for p in r["build"]["parts_mib"]})
    for part in parts:
        add(f"  {part}/ (MiB)", [float(r["build"]["parts_mib"].get(part, nan)) for r in rows], ",.1f")
    add("open index (ms)", [float(r["latency"]["open_ms"]) for r in rows], ".0f")
    for mode in ("bm25", "vss", "hybrid"):
        for q in ("p50", "p95"):
            add(f"search {mode} {q} (ms)", [float(r["latency"][f"search_{mode}"][f"{q}_ms"]) for r in rows], ".2f")
    add("agent first question (ms)", [float(r["latency"]["agent_first_ms"]) for r in rows], ".0f")
    for q in ("p50", "p95"):
        add(f"agent {q} (ms)", [float(r["latency"]["agent"][f"{q}_ms"]) for r in rows], ".0f")
    add("agent Hit@1 on generated questions", [float(r["latency"]["agent_hit1"]) for r in rows], ".2f")
    # a latency-only run (--skip-build) keeps the size's last build and the load average that build started at
    add("load average at build start",
        [float(r.get("build_load_avg_start", r.get("load_avg_start", nan))) for r in rows], ".1f")
    add("load average at latency start", [float(r.get("load_avg_start", nan)) for r in rows], ".1f")
    return "\n".join(lines) + "\n"


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _plot(rows: list[dict[str, Any]], series: dict[str, list[float]], ylabel: str, title: str) -> bytes:
    from matplotlib.figure import Figure

    sizes = [int(r["graph"]["nodes"]) for r in rows]
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    for name, values in series.items():
        pts = [(n, v) for n, v in zip(sizes, values, strict=True) if not math.isnan(v) and v > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    if sizes and len(sizes) > 1:  # a linear reference through the first point of the largest series
        ref = max(series.values(), key=lambda vs: max((v for v in vs if not math.isnan(v)), default=0))
        if ref and not math.isnan(ref[0]) and ref[0] > 0:
            ax.plot(sizes, [ref[0] * n / sizes[0] for n in sizes], "k:", label="linear", alpha=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (about 10 edges per node)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    return _png(fig)


def plots(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    nan = float("nan")
    build = {s: [float(r["build"]["timings_s"].get(s, nan)) for r in rows] for s in STAGES}
    build = {s: v for s, v in build.items() if any(not math.isnan(x) and x > 0.05 for x in v)}
    build["whole build (wall)"] = [float(r["build"]["wall_s"]) for r in rows]
    if all("cpu_s" in r["build"] for r in rows):
        build["whole build (CPU)"] = [float(r["build"]["cpu_s_total"]) for r in rows]
    rss = {s: [float(r["build"]["peak_rss_mib"].get(s, nan)) for r in rows]
           for s in sorted({s for r in rows for s in r["build"]["peak_rss_mib"]})}
    size = {p: [float(r["build"]["parts_mib"].get(p, nan)) for r in rows]
            for p in sorted({p for r in rows for p in r["build"]["parts_mib"]})}
    size["whole index"] = [float(r["build"]["size_bytes"]) / 2**20 for r in rows]
    latency = {f"search {m} {q}": [float(r["latency"][f"search_{m}"][f"{q}_ms"]) for r in rows]
               for m in ("bm25", "hybrid") for q in ("p50", "p95")}
    latency.update({f"agent {q}": [float(r["latency"]["agent"][f"{q}_ms"]) for r in rows] for q in ("p50", "p95")})
    return {
        "build_time.png": _plot(rows, build, "seconds", "Build time per stage"),
        "peak_rss.png": _plot(rows, rss, "MiB", "Peak RSS per stage (build process + graph server)"),
        "index_size.png": _plot(rows, size, "MiB", "Index size per part"),
        "latency.png": _plot(rows, latency, "ms (warm, one process)", "Query latency"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("evals/reports/scale/results.jsonl"))
    parser.add_argument("--out", type=Path, default=Path("evals/reports/scale"))
    args = parser.parse_args(argv)
    rows = load_rows(args.results)
    if not rows:
        parser.error(f"no measured sizes in {args.results}; run python -m evals.studies.scale.run first")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table(rows), encoding="utf-8")
    for name, data in plots(rows).items():
        (args.out / name).write_bytes(data)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
