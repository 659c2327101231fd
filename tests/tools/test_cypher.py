"""The cypher tool on a real FalkorDB store: rows, caps, and errors a planner can repair from."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from langchain_core.tools import BaseTool
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from agent.serving.mcp import build_server
from agent.serving.toolkit import SKBToolkit
from graphs.store.cypher_guard import ParameterValueError, QueryTooComplexError
from tools.cypher import make_cypher
from tools.results import Rows, ToolError, estimate_tokens

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


def test_the_artifact_is_typed_rows_and_errors_are_tool_errors(cypher: BaseTool) -> None:
    """Like every other tool: a Rows model (with its provenance and whether typed edges were matched)
    for code, its budgeted text for the model; failures are ToolError, not ad-hoc dicts."""
    query = "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype {key: $k}) RETURN d.key AS key ORDER BY key LIMIT 3"
    message = cypher.invoke(
        {"type": "tool_call", "id": "c1", "name": "cypher", "args": {"query": query, "params": {"k": "HP:0000520"}}}
    )
    rows = message.artifact
    assert isinstance(rows, Rows) and rows.columns == ["key"] and len(rows.rows) == 3
    assert (rows.provenance.tool, rows.typed_edges, rows.explicit_edges) == ("cypher", True, True)
    assert json.loads(str(message.content)) == {"columns": ["key"], "truncated": False, "rows": rows.rows}
    untyped = cypher.invoke(
        {"type": "tool_call", "id": "c2", "name": "cypher", "args": {"query": "MATCH (d:Disease) RETURN d.key LIMIT 1"}}
    ).artifact
    assert isinstance(untyped, Rows) and untyped.typed_edges is False
    failed = cypher.invoke(
        {"type": "tool_call", "id": "c3", "name": "cypher", "args": {"query": "MATCH (d:Diseases) RETURN d.key"}}
    ).artifact
    assert isinstance(failed, ToolError) and failed.error.type == "unknown_schema"
    assert failed.provenance.tool == "cypher"


def test_text_within_the_budget_says_what_it_left_out(hpo_bundle: Any) -> None:
    tool = make_cypher(hpo_bundle, max_rows_cap=500, budget_tokens=100)
    message = tool.invoke(
        {
            "type": "tool_call",
            "id": "c1",
            "name": "cypher",
            "args": {"query": "UNWIND range(1, 500) AS x RETURN x", "max_rows": 500},
        }
    )
    text = str(message.content)
    assert estimate_tokens(text) <= 100 and len(message.artifact.rows) == 500
    shown = json.loads(text)
    assert shown["omitted"] == 500 - len(shown["rows"]) and "LIMIT" in shown["note"]


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


# ---------------------------------------------------------------------------
# issue 15: bounded queries (items 2, 3) and parameter values (item 12)


@pytest.mark.parametrize(
    "query",
    [
        "RETURN " + "-" * 22 + "1 AS x",
        "RETURN " + "(" * 1990 + "1" + ")" * 1990 + " AS x",
        "RETURN size(range(1, 1000000000)) AS n",
        "RETURN size(reduce(s='aaaaaaaa', i IN range(1,30) | s + s)) AS n",
    ],
    ids=["minus22", "parens1990", "range1e9", "reduce-doubling"],
)
def test_unbounded_queries_are_refused_as_too_complex(cypher: BaseTool, query: str) -> None:
    out = run(cypher, {"query": query})
    assert out["error"]["type"] == "too_complex", out
    assert "range()" in out["error"]["hint"] and "12" in out["error"]["hint"]


@pytest.mark.parametrize(
    ("params", "path", "words"),
    [
        ({"n": 2**70}, "$n", "64-bit"),
        ({"keys": ["HP:1", -(2**64)]}, "$keys[1]", "64-bit"),
        ({"x": float("nan")}, "$x", "NaN"),
        ({"x": {"score": float("inf")}}, "$x.score", "infinite"),
        ({"x": "HP:\x000001"}, "$x", "NUL"),
        ({"x": {"na\x00me": 1}}, "$x", "NUL"),
    ],
)
def test_unsendable_parameter_values_are_argument_errors(
    cypher: BaseTool, params: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ValidationError) as err:
        run(cypher, {"query": "MATCH (d:Disease) WHERE d.key = $x RETURN d.key LIMIT 1", "params": params})
    text = str(err.value)
    assert path in text and words in text


def test_deeply_nested_parameter_is_an_argument_error_not_recursion(cypher: BaseTool) -> None:
    value: Any = "leaf"
    for _ in range(3000):
        value = [value]
    with pytest.raises(ValidationError, match="deeper than 32 levels"):
        run(cypher, {"query": "RETURN size($x) AS n", "params": {"x": value}})


class _Lines:
    """stdin for the MCP stdio transport: the given JSON-RPC lines, then EOF once `want` responses were written
    (an early EOF would cancel calls still running in worker threads)."""

    def __init__(self, lines: list[str], out: io.StringIO, want: int) -> None:
        self.lines, self.out, self.want = lines, out, want

    async def __aiter__(self) -> AsyncIterator[str]:
        for line in self.lines:
            yield line + "\n"
        with anyio.move_on_after(120):
            while self.out.getvalue().count("\n") < self.want:
                await anyio.sleep(0.05)


def test_parameter_errors_reach_an_mcp_client_as_argument_errors(hpo_bundle: Any) -> None:
    """Raw JSON-RPC through the stdio transport's parser: NaN, Infinity and 1e999 are JSON the SDK
    accepts (the Python client itself would send null), 2**70 and a NUL escape are plain JSON."""
    values = ["NaN", "Infinity", "-Infinity", "1e999", str(2**70), '"a\\u0000b"']
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    query = "MATCH (d:Disease) WHERE d.key = $x RETURN d.key LIMIT 1"
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ] + [
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": "cypher", "arguments": {"query": query, "params": {"x": "VALUE"}}},
            }
        ).replace('"VALUE"', value)
        for i, value in enumerate(values, 1)
    ]
    out = io.StringIO()
    server = build_server(SKBToolkit(hpo_bundle, callbacks=[]))

    async def main() -> None:
        stdin = _Lines(lines, out, want=len(values) + 1)
        async with stdio_server(stdin, anyio.wrap_file(out)) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    replies = {r["id"]: r for r in map(json.loads, out.getvalue().splitlines())}
    for i, value in enumerate(values, 1):
        result = replies[i]["result"]
        text = result["content"][0]["text"]
        assert result["isError"] is True, (value, text)
        assert "invalid arguments for cypher" in text and "$x" in text, (value, text)
        assert "syntax" not in text.lower(), (value, text)


def test_store_query_applies_the_same_checks(hpo_bundle: Any) -> None:
    """The store's own query() (not only the tool) refuses unbounded queries and unsendable values."""
    store = hpo_bundle.store
    with pytest.raises(QueryTooComplexError):
        store.query("RETURN " + "-" * 22 + "1 AS x")
    with pytest.raises(ParameterValueError, match=r"\$n"):
        store.query("RETURN $n AS n", {"n": 2**64})
