"""AgentConfig sections and overrides: every setting by field or section.key, unknown names rejected."""

from __future__ import annotations

from typing import Any

import pytest

from agent.config import AgentConfig
from graphs.errors import ConfigError


def test_sections_group_the_prefixed_fields_and_cover_them_all() -> None:
    sections = AgentConfig.sections()
    assert set(sections) == {"clause", "constraint", "rerank", "guided", "llm", "scoring"}
    assert sections["clause"]["candidates"] == "clause_candidates"
    assert sections["rerank"] == {"mode": "rerank", "top": "rerank_top", "prompt_tokens": "rerank_prompt_tokens",
                                  "passes": "rerank_passes"}
    assert sections["constraint"]["enabled"] == "constraints"
    assert sections["llm"]["timeout_s"] == "llm_timeout_s"
    prefixed = {f for f in AgentConfig.model_fields if f.startswith(("clause_", "constraint_", "rerank_", "guided_", "llm_"))}
    assert prefixed <= {f for keys in sections.values() for f in keys.values()}
    for keys in sections.values():
        assert set(keys.values()) <= set(AgentConfig.model_fields)


@pytest.mark.parametrize(
    "overrides",
    [
        {"clause_candidates": 3, "rerank_top": 7, "rerank": "listwise"},
        {"clause.candidates": 3, "rerank.top": 7, "rerank.mode": "listwise"},
        {"clause": {"candidates": 3}, "rerank": {"top": 7, "mode": "listwise"}},
    ],
)
def test_a_setting_may_be_named_flat_dotted_or_by_section(overrides: dict[str, Any]) -> None:
    cfg = AgentConfig().with_overrides(overrides)
    assert (cfg.clause_candidates, cfg.rerank_top, cfg.rerank) == (3, 7, "listwise")
    assert AgentConfig().clause_candidates == 5  # the defaults are untouched


@pytest.mark.parametrize("typo", [{"k_prme": 3}, {"clause.candidate": 3}, {"clause": {"candidate": 3}}, {"nosuch.k": 1}])
def test_an_unknown_name_is_an_error_listing_the_valid_ones(typo: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"unknown agent setting\(s\).*valid names: .*clause\.candidates.*k_prime"):
        AgentConfig().with_overrides(typo)


def test_langgraph_and_caller_entries_of_configurable_are_not_settings_but_pass() -> None:
    base = AgentConfig()
    runtime = {"thread_id": "t", "checkpoint_ns": "", "__pregel_task_id": "x", "langgraph_auth_user": None,
               "x-request-id": "r", "mode": "agent", "fusion": "rrf", "label": None}
    assert base.with_overrides(runtime) is base
    with pytest.raises(ConfigError, match="thread_id"):
        base.with_overrides({"thread_id": "t"}, runtime_keys=False)


def test_the_graph_rejects_a_misspelt_configurable_key(hpo_bundle: Any) -> None:
    from agent.api import build_agent

    graph = build_agent(AgentConfig(policy="never"), hpo_bundle)
    state = graph.invoke({"question": "Marfan syndrome"}, {"configurable": {"k": 2, "thread_id": "kept"}})
    assert len(state["result"].context) == 2
    with pytest.raises(ConfigError, match=r"unknown agent setting\(s\) \['k_prme'\]"):
        graph.invoke({"question": "Marfan syndrome"}, {"configurable": {"k_prme": 2}})
