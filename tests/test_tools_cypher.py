"""The cypher tool on a real FalkorDB store: rows, caps, and errors a planner can repair from."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.tools import BaseTool

from tools.cypher import make_cypher

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cypher(hpo_bundle: Any) -> BaseTool:
    return make_cypher(hpo_bundle, max_rows_cap=100)


def run(tool: BaseTool, args: dict[str, Any]) -> dict[str, Any]:
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": "cypher", "args": args})
    out: dict[str, Any] = json.loads(str(message.content))
    return out


def test_parameterised_query_returns_rows(cypher: BaseTool) -> None:
    out = run(
        cypher,
        {
            "query": "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE p.key IN $keys "
            "RETURN d.key AS key, count(p) AS n ORDER BY n DESC, key LIMIT 3",
            "params": {"keys": ["HP:0010621", "HP:0000244", "HP:0000520"]},
            "step": 2,
        },
    )
    assert out["columns"] == ["key", "n"]
    assert out["rows"][0] == ["OMIM:101200", 3]
    assert out["truncated"] is False
    assert out["provenance"]["tool"] == "cypher" and out["provenance"]["step"] == 2


def test_rows_are_capped_and_long_text_cut(cypher: BaseTool) -> None:
    out = run(cypher, {"query": "MATCH (p:Phenotype) RETURN p.key, p.definition", "max_rows": 5})
    assert len(out["rows"]) == 5
    assert out["truncated"] is True
    assert all(len(row[1] or "") <= 200 for row in out["rows"])


def test_unknown_label_lists_valid_names(cypher: BaseTool) -> None:
    out = run(cypher, {"query": "MATCH (d:Diseases) RETURN d.key"})
    assert out["error"]["type"] == "unknown_schema"
    assert "Diseases" in out["error"]["message"]
    assert "Disease" in out["error"]["hint"] and "HAS_PHENOTYPE" in out["error"]["hint"]


def test_unknown_property_is_reported(cypher: BaseTool) -> None:
    out = run(cypher, {"query": "MATCH (d:Disease) RETURN d.title"})
    assert out["error"]["type"] == "unknown_schema"
    assert "title" in out["error"]["message"]


def test_writes_are_refused(cypher: BaseTool, hpo_bundle: Any) -> None:
    out = run(cypher, {"query": "MATCH (d:Disease {key: 'OMIM:101200'}) SET d.name = 'x' RETURN d.key"})
    assert out["error"]["type"] == "read_only_violation"
    assert hpo_bundle.store.query("MATCH (d:Disease {key: 'OMIM:101200'}) RETURN d.name").rows == [["Apert syndrome"]]


def test_syntax_error_is_structured(cypher: BaseTool) -> None:
    out = run(cypher, {"query": "MATCH (d:Disease RETURN d.key"})
    assert out["error"]["type"] in {"syntax", "unknown_schema"}
    assert out["error"]["hint"]
