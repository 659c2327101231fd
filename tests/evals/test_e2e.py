"""End to end: `skb eval` with bm25, vss, hybrid, hybrid+sage (and, slow, the agent) on a real hpo_mini index.

The questions are evals/data/hpo_mini_bench.csv (four answerable, one with an answer key the index lacks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.bench import read_questions
from evals.cli import eval_app
from evals.runner import RESULTS_FILE, read_results
from tests.paths import REPO

BENCH = REPO / "evals" / "data" / "hpo_mini_bench.csv"


@pytest.fixture(scope="module")
def search_run(hpo_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `skb eval run` of the three baselines and hybrid+sage (one model load for the module)."""
    out = tmp_path_factory.mktemp("eval") / "run"
    args = ["run", "--bench", str(BENCH), "--index-dir", str(hpo_index_dir), "--out", str(out), "--no-progress",
            "--resamples", "200", "-m", "bm25", "-m", "vss", "-m", "hybrid", "-m", "hybrid+sage", "--workers", "2",
            "--set", "hybrid+sage.seed_k=3", "--set", "hybrid+sage.k_prime=5"]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    return out


def test_eval_baselines_on_fixture_index(hpo_index_dir: Path, search_run: Path) -> None:
    from graphs.bundle import IndexBundle

    out = search_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["methods"]) == ["bm25", "vss", "hybrid", "hybrid+sage"]
    assert metrics["unknown_answers"]["unknown_count"] == 1
    assert metrics["unknown_answers"]["all_unknown_questions"] == ["unknown"]

    questions = read_questions(BENCH)
    with IndexBundle.open(hpo_index_dir) as bundle:
        for mode in ("bm25", "vss", "hybrid"):
            m = metrics["methods"][mode]
            assert m["n"] == len(questions) and m["errors"] == 0
            assert m["config"]["mode"] == mode and m["config"]["k"] == 100
            # Four answerable questions on a 60-node graph: every method must find most answers in its top 20.
            assert m["overall"]["hit@20"]["mean"] >= 0.6, mode
            assert m["latency_ms"]["search"]["p50"] > 0
            results = {r.id: r for r in read_results(out / mode / RESULTS_FILE)}
            assert results["unknown"].all_answers_unknown
            # The stored ranking is exactly what the bundle returns for that mode.
            direct = [h.key for h in bundle.search(questions[0].query, mode=mode, k=100)]
            assert results["apert"].ranked_keys == direct
            assert all(key in bundle.skb.nodes for key in results["apert"].ranked_keys)
            curve = m["recall_curve"]
            assert curve[-1] >= curve[19] >= curve[0]

    for name in ("report.md", "metrics.png", "recall_at_k.png", "latency.png"):
        assert (out / name).stat().st_size > 1000


def test_eval_hybrid_sage_on_fixture_index(search_run: Path) -> None:
    out = search_run
    hybrid = {r.id: r for r in read_results(out / "hybrid" / RESULTS_FILE)}
    sage = {r.id: r for r in read_results(out / "hybrid+sage" / RESULTS_FILE)}
    for qid, r in sage.items():
        assert r.error is None, r.error
        assert r.ranked_keys[:3] == hybrid[qid].ranked_keys[:3], "seeds come first"
        assert set(r.ranked_keys) >= set(hybrid[qid].ranked_keys), "the rest of the hybrid ranking follows"
        assert {"search", "sage", "total"} <= set(r.timings_ms)
    config = json.loads((out / "metrics.json").read_text())["methods"]["hybrid+sage"]["config"]
    assert (config["seed_k"], config["k_prime"]) == (3, 5)


@pytest.mark.integration
def test_eval_agent_offline_planner_on_fixture_index(hpo_index_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--bench", str(BENCH), "--index-dir", str(hpo_index_dir), "--out", str(out), "--no-progress",
            "--resamples", "100", "-m", "agent+sage:always", "--set", "planner=offline", "--limit", "3"]
    # The short form (no subcommand), as the Makefile's bench target uses it.
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    m = json.loads((out / "metrics.json").read_text())["methods"]["agent+sage:always"]
    assert m["n"] == 3 and m["errors"] == 0, m["error_examples"]
    assert m["config"]["agent_config"]["policy"] == "always"
    assert m["config"]["agent_config"]["planner"] == "offline"
    assert m["cost"]["tool_calls_mean"] > 0
    assert m["overall"]["hit@20"]["mean"] > 0
    # tool-output tokens a model read per question, and their median per method: none under the offline planner
    lines = [json.loads(line) for line in (out / "agent+sage_always" / "results.jsonl").read_text().splitlines()]
    assert [line["tool_output_tokens"] for line in lines] == [0, 0, 0]
    assert m["cost"]["tool_output_tokens_median"] == 0
    assert "tool-output tokens/q (median)" in (out / "report.md").read_text()
