"""semantic_search, search_nodes and finish on a real index (FalkorDB, HNSW, MiniLM) built from hpo_mini."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from tools import TOOL_NAMES, make_tools

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tools(hpo_bundle: Any) -> dict[str, BaseTool]:
    return {t.name: t for t in make_tools(hpo_bundle, lambda: "Apert syndrome with syndactyly")}


def call(tool: BaseTool, args: dict[str, Any]) -> dict[str, Any]:
    """Invoke as the agent does (a tool call) and check content and artifact agree."""
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage)
    payload = json.loads(str(message.content))
    assert payload == json.loads(json.dumps(message.artifact, default=str))
    return payload


def test_make_tools_names_and_hidden_arguments(tools: dict[str, BaseTool]) -> None:
    assert tuple(tools) == TOOL_NAMES
    for tool in tools.values():
        visible = tool.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]
        assert "step" not in visible and "question" not in visible


def test_semantic_search_filters_by_label_and_records_provenance(tools: dict[str, BaseTool]) -> None:
    out = call(tools["semantic_search"], {"text": "webbed toes, syndactyly of toes", "label": "Phenotype", "k": 5, "step": 3})
    hits = out["hits"]
    assert len(hits) == 5
    assert {h["label"] for h in hits} == {"Phenotype"}
    assert hits[0]["key"] == "HP:0010621"
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert out["provenance"] == {
        "tool": "semantic_search",
        "step": 3,
        "query": "webbed toes, syndactyly of toes [label=Phenotype]",
    }


def test_semantic_search_unknown_label_is_a_structured_error(tools: dict[str, BaseTool]) -> None:
    out = call(tools["semantic_search"], {"text": "x", "label": "Diseases"})
    assert out["error"]["type"] == "unknown_label"
    assert "Disease" in out["error"]["hint"] and "Phenotype" in out["error"]["hint"]


def test_search_nodes_follows_a_relation_against_its_direction(tools: dict[str, BaseTool]) -> None:
    out = call(
        tools["search_nodes"],
        {"keys": ["HP:0010621"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in", "target_label": "Disease"},
    )
    assert [(t["src"], t["rel"], t["dst"]) for t in out["triples"]] == [("OMIM:101200", "HAS_PHENOTYPE", "HP:0010621")]
    triple = out["triples"][0]
    assert triple["src_name"] == "Apert syndrome" and triple["dst_name"] == "Cutaneous syndactyly of toes"
    assert out["truncated"] is False


def test_search_nodes_ranks_by_question_and_caps(tools: dict[str, BaseTool]) -> None:
    args = {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in"}
    everything = call(tools["search_nodes"], {**args, "rank": False})
    diseases = {t["src"] for t in everything["triples"]}
    assert {"OMIM:101200", "ORPHA:87", "OMIM:123500"} <= diseases
    assert all("score" not in t for t in everything["triples"])

    about_crouzon = call(tools["search_nodes"], {**args, "limit": 1, "question": "Crouzon syndrome"})
    assert [t["src"] for t in about_crouzon["triples"]] == ["OMIM:123500"]
    assert about_crouzon["truncated"] is True
    about_apert = call(tools["search_nodes"], {**args, "limit": 2, "question": "Apert syndrome"})
    assert {t["src"] for t in about_apert["triples"]} == {"OMIM:101200", "ORPHA:87"}
    scores = [t["score"] for t in about_apert["triples"]]
    assert scores == sorted(scores, reverse=True)


def test_search_nodes_reports_unknown_names(tools: dict[str, BaseTool]) -> None:
    bad_rel = call(tools["search_nodes"], {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPES"]})
    assert bad_rel["error"]["type"] == "unknown_relation"
    assert "HAS_PHENOTYPE" in bad_rel["error"]["hint"]
    bad_key = call(tools["search_nodes"], {"keys": ["HP:9999999"]})
    assert bad_key["error"]["type"] == "unknown_key"
    partly = call(tools["search_nodes"], {"keys": ["HP:9999999", "OMIM:101200"], "rel_types": ["ASSOCIATED_WITH"]})
    assert partly["unknown_keys"] == ["HP:9999999"]
    assert [t["src"] for t in partly["triples"]] == ["FGFR2"]


def test_finish_dedupes_and_reports_unknown_keys(tools: dict[str, BaseTool]) -> None:
    out = call(tools["finish"], {"keys": ["OMIM:101200", "NOPE:1", "OMIM:101200", "ORPHA:87"], "confidence": 0.8})
    assert out["keys"] == ["OMIM:101200", "ORPHA:87"]
    assert out["unknown"] == ["NOPE:1"]
    assert out["scores"][0] > out["scores"][1]
    assert out["provenance"]["tool"] == "finish"


def test_finish_rejects_scores_that_do_not_match_keys(tools: dict[str, BaseTool]) -> None:
    with pytest.raises(ValidationError, match="one per key"):
        tools["finish"].invoke({"keys": ["OMIM:101200"], "scores": [0.5, 0.4]})
