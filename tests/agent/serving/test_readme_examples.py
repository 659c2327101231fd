"""The documentation stays copy-paste correct: each tagged Python block of README.md and docs/ runs
against the real index fixture (its `.skb/hpo` replaced by the fixture path) and prints what its
comments promise; the `skb trace ...` command lines of the traces guide run through the trace CLI.
(tests/docs/test_examples.py runs every other example.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.trace import trace_app
from tests.doc_blocks import run_block
from tests.paths import REPO

TRACES_GUIDE = REPO / "docs" / "guides" / "traces.md"


@pytest.fixture()
def doc_env(hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Per-test trace and thread files, so the doc blocks start from empty stores."""
    monkeypatch.setenv("SKB_TRACE_DB", str(tmp_path / "traces.sqlite"))
    monkeypatch.setenv("SKB_THREADS_DB", str(tmp_path / "threads.sqlite"))
    monkeypatch.delenv("SKB_TRACING", raising=False)
    return hpo_index_dir


def test_chat_block(doc_env: Path) -> None:
    out = run_block("chat", doc_env)
    assert "['human', 'ai', 'human', 'ai']" in out and "FBN1" in out.splitlines()[-1]


def test_stream_block(doc_env: Path) -> None:
    out = run_block("stream", doc_env)
    assert out.startswith("step: link_entities") and "step: finalize" in out and "Marfan syndrome" in out


def test_trace_block_and_trace_commands(doc_env: Path, tmp_path: Path) -> None:
    out = run_block("trace", doc_env)
    run_id = out.split()[0]
    assert "['link_entities', 'plan', 'call_planner'" in out and out.strip().endswith("{}")
    # the shell lines of the same guide ("trace-commands"), through the trace CLI
    lines = [ln for ln in TRACES_GUIDE.read_text().splitlines() if ln.startswith("skb trace ")]
    assert [ln.split()[2] for ln in lines] == ["list", "show", "html"]
    for line in lines:
        args = line.split("#")[0].split()[2:]
        args = [run_id if a == "RUN_ID" else a.replace(".skb/hpo", str(doc_env)) for a in args]
        args = [str(tmp_path / a) if a == "trace.html" else a for a in args]
        result = CliRunner().invoke(trace_app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, (line, result.output)
    assert (tmp_path / "trace.html").read_text().startswith("<!DOCTYPE html>")


def test_toolkit_block(doc_env: Path) -> None:
    out = run_block("toolkit", doc_env).splitlines()
    assert out[0] == "['ask', 'semantic_search', 'search_nodes', 'cypher']"
    assert out[1] == "HP:0002616 Aortic root aneurysm"
    assert out[2] == "['FBN1']"


@pytest.mark.integration
def test_mcp_block(doc_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the server is started as `python -m agent.serving.mcp`
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = run_block("mcp", doc_env).splitlines()
    assert out == ["['ask', 'semantic_search', 'search_nodes', 'cypher']", "HP:0000520", "FBN1"]
