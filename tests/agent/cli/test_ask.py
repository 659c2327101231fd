"""`skb ask` through the real Typer app: table and JSON output, user errors as exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from tests.openai_stub import Stub, completion

pytestmark = pytest.mark.integration

runner = CliRunner()


def test_missing_index_is_a_clean_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ask", "anything", "--index-dir", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no index at" in result.stderr
    assert "Traceback" not in result.output + result.stderr


@pytest.mark.parametrize("argv", [["ask", "anything"], ["search", "anything"], ["index"]])
def test_no_index_dir_and_no_dataset_have_no_silent_default(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No command falls back to a dataset-specific index or dataset: the option (or $SKB_INDEX_DIR) is required."""
    monkeypatch.delenv("SKB_INDEX_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, argv)
    assert result.exit_code == 2
    assert "Missing option" in result.stderr
    assert "--index-dir" in result.stderr or "--dataset" in result.stderr
    assert not (tmp_path / ".skb").exists()


def test_index_dir_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKB_INDEX_DIR", str(tmp_path / "nope"))
    result = runner.invoke(app, ["ask", "anything"])
    assert result.exit_code == 2
    flat = " ".join(result.stderr.split())
    assert f"no index at {tmp_path / 'nope'}" in flat
    assert "--dataset <hpo|jsonl|stark|docs|triples|metaqa>" in flat


def test_bad_option_is_a_clean_error(hpo_index_dir: Path) -> None:
    result = runner.invoke(app, ["ask", "x", "--index-dir", str(hpo_index_dir), "--policy", "sometimes"])
    assert result.exit_code == 2
    assert "unknown --policy 'sometimes'" in result.stderr


def _script(stub: Stub) -> None:
    def finish(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        hits = json.loads([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])["hits"]
        return completion(calls=[("finish", json.dumps({"keys": [h["key"] for h in hits]}))])

    stub.replies = [
        completion(content='{"target_type": "Disease", "relation_paths": []}'),
        completion(calls=[("semantic_search", json.dumps({"text": "Marfan syndrome", "label": "Disease", "k": 3}))]),
        finish,
    ]


def test_ask_json_with_openai_planner(openai_stub: Stub, hpo_index_dir: Path) -> None:
    _script(openai_stub)
    args = ["ask", "Which disease is Marfan syndrome?", "--index-dir", str(hpo_index_dir), "--planner", "openai"]
    result = runner.invoke(
        app, [*args, "--model", "stub-model", "--policy", "never", "--k", "2", "--json", "--no-trace"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["question"] == "Which disease is Marfan syndrome?"
    assert data["context"][0]["key"] == "OMIM:154700"
    assert len(data["context"]) == 2
    assert data["llm_calls"] == 3 and data["target_type"] == "Disease"
    assert openai_stub.requests[1]["body"]["model"] == "stub-model"


def test_ask_table_with_openai_planner_and_trace(
    openai_stub: Stub, hpo_index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from agent.tracing.tracer import TraceStore

    db = tmp_path / "traces.sqlite"
    monkeypatch.setenv("SKB_TRACE_DB", str(db))
    monkeypatch.setattr("agent.cli.main.console", Console(width=200))  # wide enough that no cell wraps
    _script(openai_stub)
    args = ["ask", "Which disease is Marfan syndrome?", "--index-dir", str(hpo_index_dir), "--planner", "openai"]
    result = runner.invoke(app, [*args, "--policy", "never", "--trace"])
    assert result.exit_code == 0, result.stderr
    assert "OMIM:154700" in result.stdout and "Marfan syndrome" in result.stdout
    assert "semantic_search@1" in result.stdout
    assert "[OMIM:154700]" in result.stdout  # the answer cites keys
    traces = TraceStore(db).list_traces()
    assert len(traces) == 1
    assert traces[0].name == "skb ask"
    assert traces[0].llm_calls == 3 and traces[0].tool_calls == 2


def test_set_takes_section_keys_and_fields_and_a_typo_is_a_clean_error(hpo_index_dir: Path) -> None:
    """``--set section.key=value`` reaches the agent (k=2 seeds, no expansion: two context items), and a
    misspelt name is exit code 2 naming the valid ones, not a silently kept default."""
    argv = ["ask", "Marfan syndrome", "--index-dir", str(hpo_index_dir), "--no-trace", "--json"]
    ok = runner.invoke(app, [*argv, "--set", "k=2", "--set", "k_prime=0", "--set", "clause.candidates=3"])
    assert ok.exit_code == 0, ok.stderr
    assert len(json.loads(ok.stdout)["context"]) == 2
    typo = runner.invoke(app, [*argv, "--set", "clause.candidate=3"])
    assert typo.exit_code == 2
    flat = " ".join(typo.stderr.split())
    assert "unknown agent setting(s) ['clause.candidate']" in flat and "clause.candidates" in flat
    runtime = runner.invoke(app, [*argv, "--set", "thread_id=1"])  # no LangGraph key is a setting here
    assert runtime.exit_code == 2 and "thread_id" in runtime.stderr
    malformed = runner.invoke(app, [*argv, "--set", "k"])
    assert malformed.exit_code == 2 and "write name=value" in malformed.stderr
