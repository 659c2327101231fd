"""Settings that would break every call are refused in one place (AgentConfig), the same way at every
entry point: ``skb ask --set`` (exit status 2, no traceback), the graph's ``configurable``, the retriever
(its ``configurable`` and keywords) and the toolkit (``agent_config``). Each refusal names the setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.api import build_agent
from agent.cli.main import app
from agent.config import CYPHER_TIMEOUT_MAX_MS, AgentConfig
from agent.serving.retriever import SKBRetriever
from agent.serving.toolkit import SKBToolkit
from graphs.errors import ConfigError

pytestmark = pytest.mark.integration

#: (overrides, what the message must name): each would break every call, or names no setting.
BAD: list[tuple[dict[str, Any], str]] = [
    ({"cypher_timeout_ms": 100_000_000}, "cypher_timeout_ms"),
    ({"llm_timeout_s": float("inf")}, "llm_timeout_s"),
    ({"llm": {"timeout_s": float("nan")}}, "llm_timeout_s"),
    ({"max_wall_s": float("inf")}, "max_wall_s"),
    ({"edge_weight_property": ""}, "edge_weight_property"),
    ({"edge_weight_property": "w\x00"}, "edge_weight_property"),
    ({"edge_weight_property": "w`) RETURN 1 //"}, "edge_weight_property"),
    ({"k": 10**5000}, "k"),
    ({"max_question_chars": 10**400}, "max_question_chars"),
    ({"clause": {"candidates": 99}}, "clause_candidates"),
    ({"k_prme": 5}, "k_prme"),
    ({"constraint": {"enabled": "maybe"}}, "constraints"),
]
IDS = [next(iter(o)) + ("" if i < 2 else str(i)) for i, (o, _) in enumerate(BAD)]
QUESTION = "Which genes are associated with Marfan syndrome?"


def _cli_items(overrides: dict[str, Any]) -> list[str]:
    """``--set`` items for the overrides (JSON values; the big number as its digits)."""
    items = []
    for key, value in overrides.items():
        if isinstance(value, dict):
            items += [f"{key}.{sub}={json.dumps(v)}" for sub, v in value.items()]
        elif isinstance(value, int) and value > 10**300:
            items.append(f"{key}={'9' * len(str(value)) if value < 10**4000 else '9' * 5000}")
        elif isinstance(value, float):
            items.append(f"{key}={'Infinity' if value == float('inf') else 'NaN'}")
        else:
            items.append(f"{key}={json.dumps(value)}")
    return items


@pytest.mark.parametrize(("overrides", "named"), BAD, ids=IDS)
def test_every_entry_point_refuses_the_same_values(overrides: dict[str, Any], named: str, hpo_bundle: Any,
                                                  hpo_index_dir: Path) -> None:
    messages = []
    with pytest.raises(ConfigError) as direct:
        AgentConfig().with_overrides(overrides)
    messages.append(str(direct.value))

    graph = build_agent(AgentConfig(policy="never"), hpo_bundle)
    with pytest.raises(ConfigError) as by_graph:
        graph.invoke({"question": QUESTION}, {"configurable": overrides})
    messages.append(str(by_graph.value))

    retriever = SKBRetriever(hpo_bundle, k=3, policy="never")
    with pytest.raises(ConfigError) as by_retriever:
        retriever.invoke(QUESTION, {"configurable": overrides})
    messages.append(str(by_retriever.value))

    with pytest.raises(ConfigError) as by_toolkit:
        SKBToolkit(hpo_bundle, agent_config=overrides)
    messages.append(str(by_toolkit.value))

    result = CliRunner().invoke(app, ["ask", QUESTION, "--index-dir", str(hpo_index_dir), "--no-trace", "--json",
                                      *[a for item in _cli_items(overrides) for a in ("--set", item)]])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    messages.append(" ".join(result.stderr.split()))

    for message in messages:
        assert named in message, message
        assert len(message) < 3000  # the 5000-digit number is not echoed back


def test_the_range_names_the_limit_the_graph_server_accepts() -> None:
    from graphs.store.falkordb_server import TIMEOUT_MAX_MS

    assert CYPHER_TIMEOUT_MAX_MS == TIMEOUT_MAX_MS
    with pytest.raises(ConfigError, match=rf"cypher_timeout_ms: Input should be less than or equal to {TIMEOUT_MAX_MS}"):
        AgentConfig().with_overrides({"cypher_timeout_ms": TIMEOUT_MAX_MS + 1})
    assert AgentConfig().with_overrides({"edge_weight_property": "weight score"}).edge_weight_property == "weight score"


def test_the_retriever_takes_a_section_override_in_configurable(hpo_bundle: Any) -> None:
    retriever = SKBRetriever(hpo_bundle, k=3, policy="never")
    _, _, _, _, config = retriever._settings(
        retriever._prepare({"configurable": {"clause": {"candidates": 7}, "thread_id": "t"}}, {})[1]
    )
    assert config.clause_candidates == 7
