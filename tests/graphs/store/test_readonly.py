"""Read-only by construction: static guard *and* server-enforced read-only execution on every read path.

The guard's own table and property tests live in tests/graphs/store/test_cypher_guard.py; this file checks the
layers around it on a real FalkorDB server: queries the guard lets through never change the graph
(a differential property test against the server), writes that slip past a disabled guard are
refused by GRAPH.RO_QUERY, the tools and the agent never call the write path, timeouts and row/byte
caps hold, parameters stay parameters, and no Cypher in tools/ or agent/ is built from strings.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from graphs.errors import ReadOnlyViolationError, SKBError
from graphs.store.cypher_guard import check_read_only
from graphs.store.falkordb_store import FalkorDBStore
from tests.paths import REPO
from tests.reliability_support import copy_index
from tests.reliability_support import graph_fingerprint as fingerprint
from tools import make_tools

pytestmark = pytest.mark.integration

ROOT = REPO


@pytest.fixture(scope="module")
def store(hpo_index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBStore]:
    """A private copy of the fixture graph: if a write ever got through, only this copy is hurt."""
    index = copy_index(hpo_index_dir, tmp_path_factory.mktemp("ro") / "index")
    with FalkorDBStore(index / "falkordb") as opened:
        yield opened


# -- the server refuses writes even when the guard is switched off ---------------------------
WRITES = [
    "CREATE (n:Pwned {key: 'x'})",
    "MATCH (n) DETACH DELETE n",
    "MATCH (n:Disease) SET n.name = 'hacked'",
    "MERGE (n:Backdoor {key: 'BD:1'}) RETURN n",
    "MATCH (n:Disease) REMOVE n.name",
    "CREATE INDEX FOR (n:Gene) ON (n.name)",
    "MATCH (a:Gene), (b:Disease) WITH a, b LIMIT 1 CREATE (a)-[:OWNS]->(b)",
    "UNWIND range(1, 3) AS i CREATE (:Spam {i: i})",
    "MATCH (n) FOREACH (x IN [1] | SET n.owned = true)",
]


@pytest.mark.parametrize("write", WRITES)
def test_server_refuses_writes_the_guard_did_not_see(
    store: FalkorDBStore, write: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = fingerprint(store)
    monkeypatch.setattr("graphs.store.base.check_read_only", lambda cypher: None)
    with pytest.raises(SKBError) as info:
        store.query(write)
    assert isinstance(info.value, ReadOnlyViolationError) or "read-only" in str(info.value).lower()
    assert fingerprint(store) == before


@pytest.mark.parametrize("write", WRITES)
def test_guard_refuses_the_same_writes_before_any_round_trip(
    store: FalkorDBStore, write: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_round_trip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the query reached the server")

    monkeypatch.setattr(store, "_run", no_round_trip)
    with pytest.raises(ReadOnlyViolationError):
        store.query(write)


# -- differential property: whatever the guard accepts, the graph is unchanged ----------------
_TOKENS = [
    "MATCH", "OPTIONAL MATCH", "WITH", "WHERE", "RETURN", "UNWIND", "CALL", "YIELD", "UNION", "ORDER BY",
    "LIMIT 3", "CREATE", "create", "MERGE", "DELETE", "DETACH", "SET", "REMOVE", "DROP", "FOREACH", "LOAD CSV",
    "(n)", "(n:Disease)", "(m:Gene)", "(n {key: 'OMIM:101200'})", "-[r]->", "<-[:ASSOCIATED_WITH]-", "-->",
    "n", "m", "r", "n.name", "n.key = $k", "n.x = 1", "count(n)", "collect(m.key)", "range(1, 5)", "AS x",
    "'CREATE (z)'", '"DELETE n"', "`SET`", "/* DELETE */", "// SET x\n", ",", "|", "{", "}", "[", "]", "(", ")",
    ";", "=", "+", "db.labels()", "db.idx.fulltext.queryNodes('Disease', 'x')", "apoc.create.node([], {})",
    "\\'", "$k", "1", "true", "null",
]  # fmt: skip


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=14).map(" ".join))
def test_anything_the_guard_accepts_leaves_the_graph_unchanged(store: FalkorDBStore, query: str) -> None:
    try:
        check_read_only(query)
    except SKBError:
        return  # refused statically: nothing ran
    before = fingerprint(store)
    try:
        store.query(query, {"k": "OMIM:101200"}, timeout_ms=2000, max_rows=50)
    except SKBError:
        pass  # syntax errors, unknown procedures, read-only refusals: all fine, none may write
    assert fingerprint(store) == before, f"graph changed by accepted query {query!r}"


# -- read paths never touch the write command --------------------------------------------------
def test_tools_and_agent_only_use_ro_query(hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """GRAPH.QUERY (the write-capable command) is never sent on any read path: tools, linking,
    planning, SAGE expansion, schema introspection."""
    from falkordb import Graph

    from agent import AgentConfig, ask

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"write-capable GRAPH.QUERY used on a read path: {args[:1]}")

    store = hpo_bundle.store
    monkeypatch.setattr(Graph, "query", refuse)
    store._invalidate()  # schema/label caches are re-read through the patched client
    tools = {t.name: t for t in make_tools(hpo_bundle)}
    tools["semantic_search"].invoke({"text": "short skull"})
    out = json.loads(tools["search_nodes"].invoke({"keys": ["OMIM:101200"], "question": "skull"}))
    assert out["neighbors"]
    out = json.loads(tools["cypher"].invoke({"query": "MATCH (n:Disease) RETURN n.key LIMIT 2"}))
    assert len(out["rows"]) == 2
    store.schema()
    result = ask(
        "Which genes are associated with Apert syndrome?", bundle=hpo_bundle, config=AgentConfig(policy="always")
    )
    assert result.context


# -- caps, timeouts, parameters ---------------------------------------------------------------
def test_timeout_is_enforced_and_reported(hpo_bundle: Any) -> None:
    cypher = {t.name: t for t in make_tools(hpo_bundle, cypher_timeout_ms=10)}["cypher"]
    out = json.loads(cypher.invoke({"query": "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y WITH x WHERE (x + y) % 7 = 0 RETURN count(x)"}))
    assert out["error"]["type"] == "timeout", out


def test_row_cap_list_cap_and_byte_cap(hpo_bundle: Any) -> None:
    from tools.cypher import MAX_CELL_ITEMS, MAX_RESULT_BYTES

    cypher = {t.name: t for t in make_tools(hpo_bundle, cypher_max_rows=1000)}["cypher"]
    call = {"type": "tool_call", "id": "c", "name": "cypher"}
    rows = cypher.invoke({**call, "args": {"query": "UNWIND range(1, 5000) AS x RETURN x", "max_rows": 5000}}).artifact
    assert len(rows.rows) == 1000 and rows.truncated  # the artifact holds the capped rows, the text what fits
    out = json.loads(cypher.invoke({"query": "RETURN range(1, 100000) AS r"}))
    assert len(out["rows"][0][0]) == MAX_CELL_ITEMS + 1 and "more items" in out["rows"][0][0][-1]
    out = json.loads(
        cypher.invoke(
            {"query": "UNWIND range(1, 900) AS x RETURN x, $s AS s", "params": {"s": "y" * 190}, "max_rows": 1000}
        )
    )
    assert out["truncated"] and 0 < len(out["rows"]) < 900
    assert len(json.dumps(out["rows"]).encode()) <= MAX_RESULT_BYTES


@pytest.mark.parametrize(
    "params",
    [{"a`b": 1}, {"x} MATCH (n) DETACH DELETE n //": 1}, {"1abc": 1}, {"": 1}, {"k": "x" * 30_000}],
    ids=["backtick", "breakout", "digit", "empty", "huge"],
)
def test_hostile_parameter_names_and_sizes_are_validation_errors(hpo_bundle: Any, params: dict[str, Any]) -> None:
    cypher = {t.name: t for t in make_tools(hpo_bundle)}["cypher"]
    with pytest.raises(ValidationError):
        cypher.invoke({"query": "MATCH (n) WHERE n.key = $k RETURN n.key", "params": params})


def test_parameter_values_are_data_not_cypher(hpo_bundle: Any) -> None:
    """A value that would close the string and append a write, if it were spliced into the text."""
    cypher = {t.name: t for t in make_tools(hpo_bundle)}["cypher"]
    hostile = 'x" RETURN 1 UNION MATCH (n) DETACH DELETE n //'
    before = hpo_bundle.store.count_nodes()
    out = json.loads(cypher.invoke({"query": "MATCH (n) WHERE n.name = $v RETURN n.key", "params": {"v": hostile}}))
    assert out.get("rows") == [] and hpo_bundle.store.count_nodes() == before


def test_write_through_the_tool_is_named_as_such_even_with_unknown_labels(hpo_bundle: Any) -> None:
    cypher = {t.name: t for t in make_tools(hpo_bundle)}["cypher"]
    out = json.loads(cypher.invoke({"query": "MATCH (n:NoSuchLabel) DETACH DELETE n"}))
    assert out["error"]["type"] == "read_only_violation" and "DELETE" in out["error"]["message"]


# -- no Cypher built from strings in tools/ and agent/ -----------------------------------------
_CYPHER_WORDS = re.compile(r"\b(MATCH|MERGE|CREATE|DELETE|RETURN|UNWIND|DETACH|WHERE|CALL)\b")
_SQL = re.compile(r"\b(CREATE TABLE|INSERT INTO|SELECT)\b")  # the local trace store's SQLite DDL, not Cypher


def _string_built_cypher(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        text: str | None = None
        if isinstance(node, ast.JoinedStr):  # f"..."
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
            text = str(node.left.value)  # "..." % x
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant)
        ):
            text = str(node.func.value.value)  # "...".format(x)
        if text is not None and _CYPHER_WORDS.search(text) and not _SQL.search(text):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:80]!r}")
    return found


def test_no_string_built_cypher_in_tools_and_agent() -> None:
    files = sorted((ROOT / "tools").glob("*.py")) + sorted((ROOT / "agent").glob("*.py"))
    assert len(files) > 5
    offenders = [hit for path in files for hit in _string_built_cypher(path)]
    assert offenders == [], "Cypher text built from strings (use $parameters): " + "; ".join(offenders)


def test_the_string_built_cypher_detector_works(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def q(k):\n    return f\"MATCH (n {{key: '{k}'}}) RETURN n\"\n")
    bad.write_text(bad.read_text() + 'x = "MATCH (n) WHERE n.key = %s" % 1\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(_string_built_cypher(bad)) == 2
    finally:
        ROOT = saved
