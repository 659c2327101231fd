"""The serve load study's readings and report, without serving: memory from /proc and the summary it writes."""

from __future__ import annotations

import os
from typing import Any

from evals.studies.serve_load import Level, Memory, SameAnswers, ServeLoadReport, markdown, memory_of


def test_memory_of_reads_rss_and_pss_of_a_live_process_and_none_of_a_gone_one() -> None:
    mine = memory_of(os.getpid())
    assert mine is not None and 0 < mine.pss_mb <= mine.rss_mb
    assert abs(mine.pss_anon_mb + mine.pss_file_mb - mine.pss_mb) <= max(1.0, 0.2 * mine.pss_mb)
    assert memory_of(2**22 + 7) is None


def test_the_report_tables_each_level_and_replica_and_states_the_ratios() -> None:
    level: dict[str, Any] = {"seconds": 5.0, "calls": 50, "errors": 0, "p50_ms": 10.0, "p95_ms": 20.0, "p99_ms": 30.0, "max_ms": 40.0}
    report = ServeLoadReport(
        index_dir="idx", cpus=2, load_before=[0.1, 0.1, 0.1], seconds_per_level=5.0, tracing=True,
        levels=[Level(replicas=1, concurrency=16, qps=10.0, **level), Level(replicas=2, concurrency=16, qps=17.5, **level)],
        replica_memory={"1": [Memory(pid=1, rss_mb=400, pss_mb=300, pss_anon_mb=250, pss_file_mb=50)]},
        graph_server=None, speedup={"16": 1.75}, pss_sum_over_one=1.3,
        same_answers=SameAnswers(bench="dev.csv", k=20, questions=200, ask_same=200, mcp_same=199),
    )  # fmt: skip
    text = markdown(report)
    assert "| 2 | 16 | 17.5 | 10 | 20 | 30 | 0 |" in text and "| 1 | 1 | 400 | 300 | 250 | 50 |" in text
    assert "16: 1.75x" in text and "1.30x" in text
    assert "Same top 20 as `ask()` on 200 questions of `dev.csv`: `POST /ask` 200, MCP `ask` 199." in text
