"""End to end with the offline planner (no LLM): linking, planning, tools, SAGE, through `ask` and `skb ask`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent import AgentConfig, ask

pytestmark = pytest.mark.integration
pytest.importorskip("agent.planning.offline")

APERT = (
    "Which rare disease is characterized by brachyturricephaly, proptosis, midface retrusion "
    "and cutaneous syndactyly of toes?"
)


def test_offline_planner_answers_apert(hpo_bundle: Any) -> None:
    result = ask(APERT, bundle=hpo_bundle, config=AgentConfig(planner="offline"))
    top5 = [item.key for item in result.context[:5]]
    assert "OMIM:101200" in top5
    assert result.target_type == "Disease"
    assert result.llm_calls == 0 and result.prompt_tokens == 0
    assert result.tool_calls >= 1
    assert all(item.provenance for item in result.context)


def test_skb_ask_offline(hpo_index_dir: Path) -> None:
    from agent.cli.main import app

    result = CliRunner().invoke(app, ["ask", APERT, "--index-dir", str(hpo_index_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert "OMIM:101200" in [c["key"] for c in data["context"][:5]]
