"""Trace database size over many questions, with the retention settings in force.

    python -m evals.studies.trace_retention --source .skb/hpo/traces.sqlite --questions 10000 --out-db /tmp/t.sqlite

Why: a server answering for weeks must not fill the disk with traces (2 GB after ~10,500 questions
before retention existed). Asking 10,000 real questions takes hours on a small machine, so this
replays the recorded runs of real `ask` questions (from ``--source``, e.g. the database a load test
wrote) under new ids and start times through the tracer's own write path (`LocalTracer`, so the
same compression and pruning run), and reports the database's file and live size every
``--every`` questions. Retention comes from $SKB_TRACE_MAX_MB / $SKB_TRACE_MAX_DAYS as in a server.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.tracing.tracer import _COLUMNS, _JSON_COLUMNS, LocalTracer


def _traces(source: Path, limit: int) -> list[list[dict[str, Any]]]:
    """Up to ``limit`` finished traces of ``source``, each as rows in the form the tracer writes."""
    import zlib

    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    roots = [r[0] for r in conn.execute(
        "SELECT trace_id FROM runs WHERE parent_run_id IS NULL AND status = 'success' ORDER BY start_time LIMIT ?",
        (limit,))]  # fmt: skip
    out = []
    for trace_id in roots:
        rows = []
        for r in conn.execute("SELECT * FROM runs WHERE trace_id = ? ORDER BY dotted_order", (trace_id,)):
            row = {c: r[c] for c in _COLUMNS}
            for c in _JSON_COLUMNS:
                if isinstance(row[c], bytes):
                    row[c] = zlib.decompress(row[c]).decode("utf-8")
            rows.append(row)
        out.append(rows)
    conn.close()
    return out


def _renamed(rows: list[dict[str, Any]], when: str) -> list[dict[str, Any]]:
    ids = {row["id"]: str(uuid.uuid4()) for row in rows}
    trace = str(uuid.uuid4())
    return [{**row, "id": ids[row["id"]], "trace_id": trace, "parent_run_id": ids.get(row["parent_run_id"] or ""),
             "start_time": when} for row in rows]  # fmt: skip


def main(
    source: Annotated[Path, typer.Option("--source", help="a trace database with recorded `ask` runs")],
    out_db: Annotated[Path, typer.Option("--out-db", help="the database to fill (created; must not exist)")],
    questions: Annotated[int, typer.Option("--questions", min=1, max=1_000_000)] = 10_000,
    every: Annotated[int, typer.Option("--every", min=1)] = 1_000,
    out: Annotated[Path | None, typer.Option("--out", help="also write the JSON report here")] = None,
) -> None:
    """Replay recorded questions into a fresh trace database and report its size as it grows."""
    if out_db.exists():
        raise typer.BadParameter(f"--out-db {out_db} exists; name a new file")
    traces = _traces(source, 500)
    if not traces:
        raise typer.BadParameter(f"no finished traces in {source}; run a load test with tracing on first")
    tracer = LocalTracer(out_db, background=False)
    points = []
    t0 = time.perf_counter()
    for i in range(questions):
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{i % 1_000_000:06d}+00:00"
        tracer._store_rows(_renamed(traces[i % len(traces)], when))
        if (i + 1) % every == 0 or i + 1 == questions:
            files = [out_db, out_db.with_name(out_db.name + "-wal")]
            points.append({"questions": i + 1, "file_mb": round(sum(p.stat().st_size for p in files if p.exists()) / 1e6, 1),
                           "live_mb": round(tracer.store.size_bytes() / 1e6, 1),
                           "traces": tracer.store._rows("SELECT COUNT(*) FROM runs WHERE parent_run_id IS NULL")[0][0], "seconds": round(time.perf_counter() - t0)})
            typer.echo(json.dumps(points[-1]), err=True)
    report = {"source_traces": len(traces), "rows_per_question": round(sum(map(len, traces)) / len(traces), 1),
              "max_mb": tracer.max_bytes and round(tracer.max_bytes / 2**20), "max_days": tracer.max_age_days,
              "errors": tracer.errors[-3:], "points": points}
    text = json.dumps(report, indent=2)
    if out is not None:
        out.write_text(text + "\n")
    typer.echo(text)


if __name__ == "__main__":
    typer.run(main)
