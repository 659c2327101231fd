"""Concurrency: 8 threads of ``ask`` (offline planner) and hybrid ``search`` against one open index.

No errors, answers identical to serial runs, and nothing leaks: FalkorDB server processes and
open file descriptors are the same after a second round as after the first (the first round
warms the models, the compiled agent and the store's connection pool). The full 8 x 200 run is
@slow; ``python -m evals.studies.load_test`` reports latency percentiles and RSS for the same workload.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent import AgentConfig, ask
from evals.studies.load_test import make_questions, run_load
from tests.reliability_support import falkordb_children, open_fds, within

pytestmark = pytest.mark.integration


def _check_round(bundle: Any, threads: int, calls: int) -> None:
    first = within(900, lambda: run_load(bundle, threads=threads, calls=min(calls, 4), n_questions=200), "warm round")
    assert not first.errors, first.errors
    fds, children = open_fds(), falkordb_children()
    report = within(1800, lambda: run_load(bundle, threads=threads, calls=calls, n_questions=1000), "load round")
    assert report.errors == [], report.errors
    assert sum(op.calls for op in report.ops.values()) == threads * calls
    assert all(op.errors == 0 for op in report.ops.values())
    assert set(report.ops) == {"ask", "search"}
    assert falkordb_children() == children
    # Connection pools open sockets lazily, up to their bound (model queries: the store's query slots;
    # internal reads: one per concurrent thread), so a load round may add a few after the warm round.
    # A leak keeps growing: a second identical round must add nothing beyond the first's level.
    after_first = open_fds()
    slots = int(getattr(bundle.store, "max_concurrent_queries", 0))
    assert after_first - fds <= slots + threads, f"file descriptors grew from {fds} to {after_first}"
    again = within(1800, lambda: run_load(bundle, threads=threads, calls=calls, n_questions=1000), "second round")
    assert again.errors == [], again.errors
    assert falkordb_children() == children
    assert open_fds() <= after_first + 1, f"file descriptors kept growing: {fds} -> {after_first} -> {open_fds()}"


def test_eight_threads_ten_calls_each(hpo_bundle: Any) -> None:
    _check_round(hpo_bundle, threads=8, calls=10)


@pytest.mark.slow
def test_eight_threads_two_hundred_calls_each(hpo_bundle: Any) -> None:
    _check_round(hpo_bundle, threads=8, calls=200)


def test_concurrent_answers_equal_serial_answers(hpo_bundle: Any) -> None:
    questions = make_questions(hpo_bundle, 16, seed=3)
    cfg = AgentConfig(policy="always")
    serial = {q: [(c.key, c.origin) for c in ask(q, bundle=hpo_bundle, config=cfg).context] for q in questions}

    def answer(q: str) -> tuple[str, list[tuple[str, str]]]:
        return q, [(c.key, c.origin) for c in ask(q, bundle=hpo_bundle, config=cfg).context]

    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = within(600, lambda: list(pool.map(answer, questions * 2)), "concurrent asks")
    for q, ranked in concurrent:
        assert ranked == serial[q], q
