"""semantic_search, search_nodes and finish on a real index (FalkorDB, HNSW, MiniLM) built from hpo_mini."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from tools import TOOL_NAMES, make_tools
from tools.common import embed_query, embedding_matrix
from tools.results import (
    DEFAULT_BUDGET_TOKENS,
    Finish,
    Neighborhood,
    SemanticHits,
    ToolError,
    ToolProvenance,
    estimate_tokens,
    parse_result,
)
from tools.search_nodes import MAX_TRIPLES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tools(hpo_bundle: Any) -> dict[str, BaseTool]:
    return {t.name: t for t in make_tools(hpo_bundle, lambda: "Apert syndrome with syndactyly")}


def call(tool: BaseTool, args: dict[str, Any]) -> Any:
    """Invoke as the agent does (a tool call): the artifact is the typed result, the content its
    compact JSON (within the default budget) and both name the same first items."""
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    assert isinstance(message, ToolMessage)
    result = parse_result(tool.name, message.artifact)
    assert result is not None and result is message.artifact
    text = str(message.content)
    assert estimate_tokens(text) <= DEFAULT_BUDGET_TOKENS
    shown = json.loads(text)
    if isinstance(result, ToolError):
        assert shown["error"]["type"] == result.error.type
    else:
        assert result.found_keys()[: len(_shown_keys(shown))] == _shown_keys(shown)
    return result


def _shown_keys(shown: dict[str, Any]) -> list[str]:
    items = shown.get("hits") or shown.get("neighbors") or [{"key": k} for k in shown.get("keys") or []]
    return [str(item["key"]) for item in items]


def test_make_tools_names_and_hidden_arguments(tools: dict[str, BaseTool]) -> None:
    assert tuple(tools) == TOOL_NAMES
    for tool in tools.values():
        visible = tool.tool_call_schema.model_json_schema()["properties"]  # type: ignore[union-attr]
        assert "step" not in visible and "question" not in visible


def test_semantic_search_filters_by_label_and_records_provenance(tools: dict[str, BaseTool]) -> None:
    out = call(
        tools["semantic_search"], {"text": "webbed toes, syndactyly of toes", "label": "Phenotype", "k": 5, "step": 3}
    )
    assert isinstance(out, SemanticHits)
    assert len(out.hits) == 5
    assert {h.label for h in out.hits} == {"Phenotype"}
    assert out.hits[0].key == "HP:0010621"
    assert [h.score for h in out.hits] == sorted((h.score for h in out.hits), reverse=True)
    assert out.provenance == ToolProvenance(
        tool="semantic_search", step=3, query="webbed toes, syndactyly of toes [label=Phenotype]"
    )


def test_semantic_search_unknown_label_is_a_structured_error(tools: dict[str, BaseTool]) -> None:
    out = call(tools["semantic_search"], {"text": "x", "label": "Diseases"})
    assert isinstance(out, ToolError) and out.error.type == "unknown_label"
    assert "Disease" in out.error.hint and "Phenotype" in out.error.hint


def test_search_nodes_follows_a_relation_against_its_direction(tools: dict[str, BaseTool]) -> None:
    out = call(
        tools["search_nodes"],
        {"keys": ["HP:0010621"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in", "target_label": "Disease"},
    )
    assert isinstance(out, Neighborhood)
    assert [(n.key, n.name, n.seeds, n.rels, n.paths) for n in out.neighbors] == [
        ("OMIM:101200", "Apert syndrome", ["HP:0010621"], ["HAS_PHENOTYPE"], 1)
    ]
    assert out.truncated is False and out.triples == []
    assert out.explicit_edges is True


def test_search_nodes_aggregates_per_neighbour_across_seeds(tools: dict[str, BaseTool]) -> None:
    """Two phenotypes: Apert syndrome has both, so it is one row reached from both seeds by two edges,
    and it comes first (edge count is the server-side order)."""
    out = call(
        tools["search_nodes"],
        {"keys": ["HP:0000520", "HP:0010621"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in", "rank": False},
    )
    assert isinstance(out, Neighborhood)
    first = out.neighbors[0]
    assert (first.key, first.seeds, first.paths) == ("OMIM:101200", ["HP:0000520", "HP:0010621"], 2)
    assert len({n.key for n in out.neighbors}) == len(out.neighbors) == 6
    assert all(n.paths == 1 and n.seeds == ["HP:0000520"] for n in out.neighbors[1:])
    assert [n.key for n in out.neighbors[1:]] == sorted(n.key for n in out.neighbors[1:])


def test_search_nodes_sums_a_configured_edge_weight(hpo_bundle: Any) -> None:
    tool = {t.name: t for t in make_tools(hpo_bundle, weight_property="freq")}["search_nodes"]
    out = call(tool, {"keys": ["HP:0000520", "HP:0010621"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in"})
    weights = {n.key: n.weight for n in out.neighbors}
    assert weights["OMIM:101200"] == pytest.approx(2.0)
    assert weights["OMIM:602849"] == pytest.approx(5 / 81)
    plain = call(
        {t.name: t for t in make_tools(hpo_bundle)}["search_nodes"],
        {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in"},
    )
    assert all(n.weight is None for n in plain.neighbors)


def test_search_nodes_ranks_by_question_and_caps(tools: dict[str, BaseTool]) -> None:
    args = {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in"}
    everything = call(tools["search_nodes"], {**args, "rank": False})
    diseases = {n.key for n in everything.neighbors}
    assert {"OMIM:101200", "ORPHA:87", "OMIM:123500"} <= diseases
    assert all(n.score is None for n in everything.neighbors) and not everything.ranked

    about_crouzon = call(tools["search_nodes"], {**args, "limit": 1, "question": "Crouzon syndrome"})
    assert [n.key for n in about_crouzon.neighbors] == ["OMIM:123500"]
    assert about_crouzon.truncated is True and about_crouzon.ranked
    about_apert = call(tools["search_nodes"], {**args, "limit": 2, "question": "Apert syndrome"})
    assert {n.key for n in about_apert.neighbors} == {"OMIM:101200", "ORPHA:87"}
    scores = [n.score for n in about_apert.neighbors]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]


def test_search_nodes_relevance_is_the_cosine_of_stored_vectors(hpo_bundle: Any, tools: dict[str, BaseTool]) -> None:
    """The matrix ranking equals a per-key dot product with the HNSW index's own vectors."""
    out = call(
        tools["search_nodes"],
        {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in", "limit": 3, "question": "skull"},
    )
    qvec = embed_query(hpo_bundle, "skull")
    for n in out.neighbors:
        assert n.score == pytest.approx(float(np.dot(hpo_bundle.hnsw.vector(n.key), qvec)), abs=1e-4)
    matrix = embedding_matrix(hpo_bundle)
    assert matrix.matrix.flags["C_CONTIGUOUS"] and matrix.matrix.dtype == np.float32
    assert np.isnan(matrix.scores(["NOPE:1"], qvec)[0])


def test_search_nodes_raw_triples_only_on_request_and_capped(tools: dict[str, BaseTool]) -> None:
    args = {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPE"], "direction": "in", "rank": False}
    assert call(tools["search_nodes"], args).triples == []
    out = call(tools["search_nodes"], {**args, "include_triples": True})
    assert {(t.src, t.rel, t.dst) for t in out.triples} == {
        (n.key, "HAS_PHENOTYPE", "HP:0000520") for n in out.neighbors
    }
    assert len(out.triples) <= MAX_TRIPLES


def test_search_nodes_reports_unknown_names(tools: dict[str, BaseTool]) -> None:
    bad_rel = call(tools["search_nodes"], {"keys": ["HP:0000520"], "rel_types": ["HAS_PHENOTYPES"]})
    assert isinstance(bad_rel, ToolError) and bad_rel.error.type == "unknown_relation"
    assert "HAS_PHENOTYPE" in bad_rel.error.hint
    bad_key = call(tools["search_nodes"], {"keys": ["HP:9999999"]})
    assert isinstance(bad_key, ToolError) and bad_key.error.type == "unknown_key"
    partly = call(tools["search_nodes"], {"keys": ["HP:9999999", "OMIM:101200"], "rel_types": ["ASSOCIATED_WITH"]})
    assert partly.unknown_keys == ["HP:9999999"]
    assert [n.key for n in partly.neighbors] == ["FGFR2"]


def test_search_nodes_mixed_seed_labels_merge_into_one_result(tools: dict[str, BaseTool]) -> None:
    """A disease and a gene expanded together: FGFR2 and Apert syndrome reach each other; rows stay unique."""
    out = call(tools["search_nodes"], {"keys": ["OMIM:101200", "FGFR2"], "rel_types": ["ASSOCIATED_WITH"]})
    keys = [n.key for n in out.neighbors]
    assert len(keys) == len(set(keys))
    assert "FGFR2" in keys and "OMIM:101200" in keys


def test_tool_text_stays_within_a_small_budget(hpo_bundle: Any) -> None:
    tool = {t.name: t for t in make_tools(hpo_bundle, budget_tokens=150)}["semantic_search"]
    message = tool.invoke(
        {"type": "tool_call", "id": "c", "name": "semantic_search", "args": {"text": "skull shape", "k": 20}}
    )
    shown = json.loads(str(message.content))
    assert estimate_tokens(str(message.content)) <= 150
    assert len(message.artifact.hits) == 20  # the artifact keeps everything
    assert 0 < len(shown["hits"]) < 20 and shown["omitted"] == 20 - len(shown["hits"])
    assert "token budget 150" in shown["note"]


def test_finish_dedupes_and_reports_unknown_keys(tools: dict[str, BaseTool]) -> None:
    out = call(tools["finish"], {"keys": ["OMIM:101200", "NOPE:1", "OMIM:101200", "ORPHA:87"], "confidence": 0.8})
    assert isinstance(out, Finish)
    assert out.keys == ["OMIM:101200", "ORPHA:87"]
    assert out.unknown == ["NOPE:1"]
    assert out.scores[0] > out.scores[1]
    assert out.provenance.tool == "finish"


def test_finish_rejects_scores_that_do_not_match_keys(tools: dict[str, BaseTool]) -> None:
    with pytest.raises(ValidationError, match="one per key"):
        tools["finish"].invoke({"keys": ["OMIM:101200"], "scores": [0.5, 0.4]})


def test_node_snippets_are_memoised_per_graph() -> None:
    """semantic_search's hit texts are computed once per node and graph; a rebuilt graph (a new SKB
    object) gets its own texts, and a dropped graph's texts go with it."""
    import gc
    from types import SimpleNamespace

    from tests.store_fixtures import tiny_skb
    from tools.common import _snippets, node_snippet

    old, new = tiny_skb(), tiny_skb()
    new.nodes["OMIM:1"].props["name"] = "Renamed epilepsy"
    assert node_snippet(SimpleNamespace(skb=old), "OMIM:1") == old.node_text("OMIM:1")[:240]  # type: ignore[arg-type]
    assert "Renamed epilepsy" in node_snippet(SimpleNamespace(skb=new), "OMIM:1")  # type: ignore[arg-type]
    old.nodes["OMIM:1"].props["name"] = "changed after the first call"
    assert "changed" not in node_snippet(SimpleNamespace(skb=old), "OMIM:1")  # type: ignore[arg-type]  # memoised
    gc.collect()  # graphs other tests dropped go first: the count below is this test's
    count = len(_snippets)
    del old
    gc.collect()
    assert len(_snippets) == count - 1
