"""The serve load study's readings and report, without serving: memory from /proc and the summary it writes."""

from __future__ import annotations

import os
from pathlib import Path
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


def test_cpu_is_counted_per_role_from_proc_and_tabled_per_question() -> None:
    """A process whose command line names a replica, and this process (the load generator), each burn CPU between
    two snapshots; each role gets at least what it burned, and the report tables it per answered question."""
    import subprocess
    import sys
    import time

    from evals.studies import process_cpu

    before = process_cpu.snapshot()
    assert os.getpid() in before
    me = process_cpu.processes()[os.getpid()]
    assert me.ppid == os.getppid() and me.rss_kib > 1024 and me.cpu_s > 0
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    used = process_cpu.cpu_by_role(before, process_cpu.snapshot())
    assert used.get("load generator", 0.0) >= 0.15
    child = subprocess.Popen([sys.executable, "-c", burn + "\ntime.sleep(5)", "ray::ServeReplica:skb"])
    try:
        time.sleep(0.2)
        before = process_cpu.snapshot()
        time.sleep(1.0)
        used = process_cpu.cpu_by_role(before, process_cpu.snapshot())
    finally:
        child.kill()
        child.wait()
    assert used.get("replicas", 0.0) >= 0.05
    level: dict[str, Any] = {"seconds": 5.0, "calls": 50, "errors": 0, "p50_ms": 10.0, "p95_ms": 20.0, "p99_ms": 30.0,
                             "max_ms": 40.0, "cores_busy": 1.9}  # fmt: skip
    report = ServeLoadReport(
        index_dir="idx", cpus=2, load_before=[0.1], seconds_per_level=5.0, tracing=True, replica_memory={},
        levels=[Level(replicas=2, concurrency=16, qps=10.0, cpu_ms_per_question={"replicas": 150.0, "Ray proxy": 12.5},
                      **level)],
        graph_server=None, speedup={}, pss_sum_over_one=None,
    )  # fmt: skip
    text = markdown(report)
    assert "| replicas | clients | replicas | Ray proxy | cores busy |" in text and "| 2 | 16 | 150.0 | 12.5 | 1.90 |" in text


def test_the_memory_study_makes_its_questions_in_another_process(hpo_index_dir: Path) -> None:
    """The load test's questions list every node of the graph; the study's process must not hold those objects."""
    import gc

    from evals.studies.load_test import make_questions
    from evals.studies.replica_memory import questions_elsewhere
    from graphs.bundle import IndexBundle
    from graphs.skb.model import Node

    gc.collect()
    nodes_before = sum(isinstance(o, Node) for o in gc.get_objects())
    made = questions_elsewhere(hpo_index_dir, 20)
    gc.collect()
    assert sum(isinstance(o, Node) for o in gc.get_objects()) == nodes_before
    with IndexBundle.open(hpo_index_dir) as bundle:
        assert made == make_questions(bundle, 20)
