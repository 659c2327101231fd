"""The typed tool results (tools/results.py): one model per kind, parsed back from traces and legacy
dicts, one error builder, explicit edges as a field (decided by the Cypher tokenizer, not by sniffing
text), and a model-facing text that is compact JSON within its token budget."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from agent.tracing.html import _keys_of
from agent.tracing.tracer import to_jsonable
from tools.results import (
    RESULT_TYPES,
    Finish,
    Neighbor,
    Neighborhood,
    Rows,
    SemanticHit,
    SemanticHits,
    ToolError,
    ToolProvenance,
    estimate_tokens,
    parse_result,
    tool_error,
    tool_output,
)

PROV = ToolProvenance(tool="search_nodes", step=2, query="q")


def hood(n: int, rel_types: list[str] | None = None) -> Neighborhood:
    neighbors = [
        Neighbor(
            key=f"D:{i}",
            label="Disease",
            name=f"disease number {i} " + "x" * 40,
            seeds=["HP:1", "HP:2"],
            rels=["HAS_PHENOTYPE"],
            paths=2,
            score=0.5,
        )
        for i in range(n)
    ]
    return Neighborhood(provenance=PROV, keys=["HP:1", "HP:2"], rel_types=rel_types, neighbors=neighbors)


def test_every_tool_has_a_result_model_and_kinds_are_distinct() -> None:
    assert set(RESULT_TYPES) == {"semantic_search", "search_nodes", "cypher", "finish"}
    models: list[type[Any]] = [*RESULT_TYPES.values(), ToolError]
    kinds = {model.model_fields["kind"].default for model in models}
    assert len(kinds) == 5


@pytest.mark.parametrize(
    "result",
    [
        SemanticHits(provenance=PROV, hits=[SemanticHit(key="A", label="L", name="a", score=0.9)]),
        hood(3, ["HAS_PHENOTYPE"]),
        Rows(provenance=PROV, columns=["k"], rows=[["A"]], typed_edges=True),
        Finish(provenance=PROV, keys=["A"], scores=[1.0]),
        tool_error("cypher", 1, "MATCH", "syntax", "bad", "fix it"),
    ],
)
def test_results_round_trip_through_a_trace(result: Any) -> None:
    """A trace stores the artifact as plain JSON; reading it back gives the same typed result."""
    stored = json.loads(json.dumps(to_jsonable(result)))
    assert parse_result(result.provenance.tool, stored) == result


def test_legacy_dicts_still_parse() -> None:
    error = parse_result("search_nodes", {"error": {"type": "unknown_key", "message": "m", "hint": "h"}})
    assert isinstance(error, ToolError) and error.is_error and error.error.type == "unknown_key"
    rows = parse_result(
        "cypher",
        {
            "columns": ["k"],
            "rows": [["A"]],
            "provenance": {"tool": "cypher", "step": 1, "query": "MATCH (n)-[:R]->(m) RETURN m.key"},
        },
    )
    assert isinstance(rows, Rows) and rows.explicit_edges
    assert parse_result("semantic_search", "not json") is None


@pytest.mark.parametrize(
    ("query", "typed"),
    [
        ("MATCH (a:Disease)-[:HAS_PHENOTYPE]->(p) RETURN p.key", True),
        ("MATCH (a)<-[r:IS_A|PART_OF]-(b) RETURN b.key", True),
        ("MATCH (n:Disease) WHERE n.name CONTAINS '-[' RETURN n.key", False),  # text that looks like an edge
        ("MATCH (n:Disease) RETURN n.key // -[:R]->", False),  # a comment
        ("MATCH (n:Disease {name: 'x ]- y'}) RETURN n.key", False),
    ],
)
def test_explicit_edges_come_from_the_tokenizer_not_substrings(query: str, typed: bool) -> None:
    rows = parse_result("cypher", {"columns": ["k"], "rows": [["A"]], "provenance": {"tool": "cypher", "query": query}})
    assert isinstance(rows, Rows) and rows.explicit_edges is typed


def test_neighborhood_explicit_edges_is_a_field_of_the_call() -> None:
    assert hood(2, ["HAS_PHENOTYPE"]).explicit_edges
    assert not hood(2, None).explicit_edges  # untyped expansion
    assert not hood(0, ["HAS_PHENOTYPE"]).explicit_edges  # nothing found


@pytest.mark.parametrize("budget", [80, 300, 1500])
def test_model_text_is_json_within_budget_and_says_what_it_left_out(budget: int) -> None:
    result = hood(200, ["HAS_PHENOTYPE"])
    text, artifact = tool_output(result, budget)
    assert artifact is result and len(result.neighbors) == 200
    assert estimate_tokens(text) <= budget
    shown = json.loads(text)
    assert shown["omitted"] == 200 - len(shown["neighbors"])
    assert [n["key"] for n in shown["neighbors"]] == result.found_keys()[: len(shown["neighbors"])]
    assert "rel_types/target_label" in shown["note"]


def test_small_results_are_complete_and_carry_no_note() -> None:
    shown = json.loads(hood(3).model_text(1500))
    assert len(shown["neighbors"]) == 3 and "omitted" not in shown and "note" not in shown
    assert shown["neighbors"][0] == {
        "key": "D:0",
        "label": "Disease",
        "name": "disease number 0 " + "x" * 40,
        "via": ["HP:1", "HP:2"],
        "rels": ["HAS_PHENOTYPE"],
        "edges": 2,
        "score": 0.5,
    }


def test_a_huge_error_message_is_shortened_but_stays_json() -> None:
    error = tool_error("cypher", 1, "q", "syntax", "m" * 50_000, "h" * 50_000)
    text = error.model_text(100)
    assert estimate_tokens(text) <= 100
    assert json.loads(text)["error"]["type"] == "syntax"


def test_finish_text_echoes_a_few_keys_and_the_artifact_keeps_all() -> None:
    finish = Finish(provenance=PROV, keys=[f"K:{i}" for i in range(100)], scores=[1.0] * 100, confidence=0.7)
    shown = json.loads(finish.model_text())
    assert shown["accepted"] == 100 and len(shown["keys"]) == 20 and shown["confidence"] == 0.7


def test_trace_viewer_reads_keys_from_typed_and_legacy_payloads() -> None:
    typed = json.loads(json.dumps(to_jsonable(hood(3, ["HAS_PHENOTYPE"]))))
    assert _keys_of("search_nodes", typed, {"keys": ["HP:1"]}) == (["D:0", "D:1", "D:2"], None)
    legacy = {"triples": [{"src": "D:9", "rel": "R", "dst": "HP:1"}]}
    assert _keys_of("search_nodes", legacy, {"keys": ["HP:1"]}) == (["D:9"], None)
    rows = {"columns": ["d.key", "n"], "rows": [["D:1", 3], ["D:2", 4]], "provenance": {"tool": "cypher"}}
    assert _keys_of("cypher", rows, {}) == (["D:1", "D:2"], 2)


def test_hostile_echoed_input_is_cut_and_the_text_stays_json() -> None:
    """Unknown keys are echoed back; a 1 MB key must not push the text past its budget or break its JSON."""
    result = Neighborhood(provenance=PROV, keys=["HP:1"], unknown_keys=["x" * 1_000_000, "y"], neighbors=[])
    text = result.model_text(300)
    assert estimate_tokens(text) <= 300
    assert json.loads(text)["unknown_keys"][1] == "y"


def test_each_result_kind_states_its_own_evidence() -> None:
    """The agent's pool merge has no per-tool branches: results say what they support."""
    nodes = {"A": SimpleNamespace(label="Disease"), "B": SimpleNamespace(label="Gene")}
    [ev] = hood(1, ["HAS_PHENOTYPE"]).evidence(nodes)
    assert (ev.key, ev.score, ev.support) == ("D:0", 0.5, 2)  # reached from two keys
    rows = Rows(provenance=PROV, columns=["k"], rows=[["A"], ["nope"], ["B"]])
    assert [(e.key, e.label, e.score) for e in rows.evidence(nodes)] == [("A", "Disease", 1.0), ("B", "Gene", 0.75)]
    assert Finish(provenance=PROV, keys=["A"]).evidence(nodes) == []


def test_pool_merge_copies_on_write_and_leaves_the_previous_state_alone() -> None:
    """The agent's observe step shares unchanged pool entries with the previous state and copies an
    entry before adding to it: the previous round's candidates never change under it."""
    import copy

    from agent.nodes.pool import merge_observation

    bundle = SimpleNamespace(skb=SimpleNamespace(nodes={}))
    previous: dict[str, Any] = {}
    merge_observation(previous, hood(3), bundle)  # type: ignore[arg-type]
    frozen = copy.deepcopy(previous)
    pool = dict(previous)
    owned: set[str] = set()
    second = Rows(provenance=ToolProvenance(tool="cypher", step=3, query="q2"), columns=["k"], rows=[["D:0"]])
    bundle.skb.nodes["D:0"] = SimpleNamespace(label="Disease")
    assert merge_observation(pool, hood(1), bundle, owned) == 1  # type: ignore[arg-type]
    assert merge_observation(pool, second, bundle, owned) == 1  # type: ignore[arg-type]
    assert previous == frozen  # nothing of the previous state changed
    assert pool["D:0"] is not previous["D:0"] and pool["D:1"] is previous["D:1"]  # untouched entries shared
    assert pool["D:0"]["support"] == frozen["D:0"]["support"] + 2 + 1
    assert len(pool["D:0"]["provenance"]) == 2


@pytest.mark.parametrize("budget", [20, 120, 400, 5000])
def test_model_text_is_exactly_the_compact_json_of_what_it_shows(budget: int) -> None:
    """The items' JSON is spliced into the text, not encoded twice: the text must still be byte for
    byte the compact JSON of the object it parses to (item order, omitted and note last)."""
    results: list[Any] = [
        hood(40, ["HAS_PHENOTYPE"]),
        hood(0),
        Rows(provenance=PROV, columns=["a", "b"], rows=[[i, f"n\u00e9 {i}"] for i in range(60)], truncated=True),
        Finish(provenance=PROV, keys=[f"K{i}" for i in range(30)], confidence=0.5),
    ]
    for result in results:
        text = result.model_text(budget)
        parsed = json.loads(text)
        assert text == json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
        assert list(parsed)[-2:] == ["omitted", "note"] or "omitted" not in parsed
