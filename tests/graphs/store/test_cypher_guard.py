"""The static Cypher guard: table-driven cases, property-based robustness, schema checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.planning.paths import Hop, walk_query
from graphs.errors import CypherValidationError, ReadOnlyViolationError, SKBError
from graphs.store.aggregate import aggregation_query
from graphs.store.cypher_guard import (
    MAX_EXPRESSION_DEPTH,
    MAX_PARAM_DEPTH,
    MAX_QUERY_CHARS,
    MAX_RANGE_ELEMENTS,
    ParameterValueError,
    QueryTooComplexError,
    check_against_schema,
    check_params,
    check_query,
    check_read_only,
    check_resources,
    extract_refs,
)
from tests.paths import DATA
from tests.store_fixtures import tiny_skb

CASES: list[dict[str, Any]] = json.loads((DATA / "cypher_guard_cases.json").read_text())
SCHEMA = tiny_skb().schema()


@pytest.mark.parametrize("case", CASES, ids=[c["query"][:50] for c in CASES])
def test_guard_cases(case: dict[str, Any]) -> None:
    assert case["expected"] in ("ok", "violation")
    if case["expected"] == "ok":
        check_read_only(case["query"])
    else:
        with pytest.raises(ReadOnlyViolationError):
            check_read_only(case["query"])


def test_cases_file_covers_every_refused_clause() -> None:
    text = " ".join(c["query"].upper() for c in CASES if c["expected"] == "violation")
    for clause in (
        "CREATE",
        "MERGE",
        "DELETE",
        "DETACH",
        "SET",
        "REMOVE",
        "DROP",
        "LOAD CSV",
        "FOREACH",
        "CALL {",
        ";",
    ):
        assert clause in text, clause


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("MATCH (n) DETACH DELETE n", "DETACH DELETE"),
        ("LOAD CSV FROM 'x' AS r RETURN r", "LOAD CSV"),
        ("CALL dbms.killQuery('1')", "dbms.killQuery"),
        ("MATCH (n) RETURN n; MATCH (m) RETURN m", "multiple statements"),
    ],
)
def test_violation_message_names_the_clause(query: str, named: str) -> None:
    with pytest.raises(ReadOnlyViolationError, match=named):
        check_read_only(query)


@pytest.mark.parametrize(
    "query", ["MATCH (n) WHERE n.name = 'oops RETURN n", "MATCH (n) /* open", "MATCH (`n) RETURN 1", ""]
)
def test_malformed_input_is_a_validation_error(query: str) -> None:
    with pytest.raises(CypherValidationError):
        check_read_only(query)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes_the_guard(text: str) -> None:
    for check in (check_read_only, lambda q: check_against_schema(q, SCHEMA)):
        try:
            check(text)
        except SKBError:
            pass


_ALPHABET = st.sampled_from(list("()[]{}:;,.'\"`$-><|/*\\ \n\tnmrCREATEsetMATCH0123456789"))


@settings(max_examples=300, deadline=None)
@given(st.text(_ALPHABET, max_size=120))
def test_cypher_like_noise_never_crashes_the_guard(text: str) -> None:
    for check in (check_read_only, lambda q: check_against_schema(q, SCHEMA)):
        try:
            check(text)
        except SKBError:
            pass


_WRITES = ["CREATE (x)", "MERGE (x)", "DELETE n", "DETACH DELETE n", "SET n.a = 1", "REMOVE n.a", "DROP INDEX x",
           "FOREACH (i IN [1] | SET n.a = i)", "LOAD CSV FROM 'f' AS r"]  # fmt: skip
_SPACE = st.lists(
    st.sampled_from([" ", "\n", "\t", "\r\n", " /* c */ ", "\u00a0", "// c\n"]), min_size=1, max_size=3
).map("".join)


def _vary_case(word: str, flips: list[bool]) -> str:
    return "".join(c.lower() if flips[i % len(flips)] else c.upper() for i, c in enumerate(word))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(_WRITES),
    st.lists(st.booleans(), min_size=1, max_size=8),
    _SPACE,
    _SPACE,
    st.sampled_from(["MATCH (n) WITH n", "MATCH (n:Disease {key: 'a'})", "OPTIONAL MATCH (n) WHERE n.x = 1 WITH n"]),
)
def test_hidden_writes_are_always_caught(write: str, flips: list[bool], pre: str, mid: str, prefix: str) -> None:
    head, _, rest = write.partition(" ")
    disguised = _vary_case(head, flips) + mid + rest
    with pytest.raises(ReadOnlyViolationError):
        check_read_only(prefix + pre + disguised + " RETURN n")


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(_WRITES + ["CALL dbms.x()", "; MATCH (m) RETURN m", "CALL { CREATE (q) }"]),
    st.text(st.characters(blacklist_characters="'\\", blacklist_categories=["Cs"]), max_size=20),
    st.sampled_from(["'", '"']),
)
def test_keywords_inside_string_literals_pass(write: str, noise: str, quote: str) -> None:
    noise = noise.replace(quote, "")
    check_read_only(f"MATCH (n) WHERE n.name = {quote}{noise}{write}{noise}{quote} RETURN n")


# -- schema check ---------------------------------------------------------------


def test_extract_refs_finds_labels_rels_and_props() -> None:
    refs = extract_refs(
        "MATCH (d:Disease {name: $n})-[r:HAS_PHENOTYPE|IS_A]->(p:Phenotype) "
        "WHERE p.depth > 2 AND d:Disease RETURN d.key, r.weight, size([x IN [1] | x]) AS s, {a: p.name} AS m"
    )
    assert refs.labels == {"Disease", "Phenotype"}
    assert refs.rel_types == {"HAS_PHENOTYPE", "IS_A"}
    assert refs.properties == {("Disease", "name"), ("Phenotype", "depth"), ("Disease", "key"), ("Phenotype", "name")}


def test_valid_query_passes_schema_check() -> None:
    check_against_schema(
        "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE d.key IN $keys "
        "WITH d, p UNWIND d.synonyms AS s RETURN d.name, p.name, s, count(*) AS c",
        SCHEMA,
    )
    check_against_schema("MATCH (x:`Odd Label`)-[:`ODD REL`]->(d:Disease) RETURN x.name", SCHEMA)
    check_against_schema("MATCH p = (a)-[*1..2]->(b) RETURN [x IN nodes(p) WHERE x:Gene | x.name]", SCHEMA)


def test_unknown_names_are_listed_with_valid_choices() -> None:
    with pytest.raises(CypherValidationError) as info:
        check_against_schema("MATCH (d:Diseases)-[:HAS_PHENOTYPES]->(p:Phenotype) WHERE p.label = 'x' RETURN d", SCHEMA)
    msg = str(info.value)
    assert "'Diseases' (did you mean Disease?)" in msg
    assert "'HAS_PHENOTYPES'" in msg and "HAS_PHENOTYPE" in msg
    assert "'label'" in msg and "valid properties on Phenotype" in msg and "depth" in msg
    assert "Gene" in msg  # the valid labels are listed


def test_unlabelled_node_props_check_against_all_labels() -> None:
    check_against_schema("MATCH (n {key: 'HP:1'}) RETURN n.score, n.depth", SCHEMA)
    with pytest.raises(CypherValidationError, match="'colour'"):
        check_against_schema("MATCH (n) RETURN n.colour", SCHEMA)


def test_relationship_and_alias_properties_are_not_flagged() -> None:
    check_against_schema("MATCH (a:Disease)-[r:ASSOCIATED_WITH]->(g) RETURN r.source, r.anything", SCHEMA)
    check_against_schema("UNWIND $rows AS row WITH row.foo AS f RETURN f", SCHEMA)
    check_against_schema("MATCH (n:Disease) WITH n AS m RETURN m.whatever", SCHEMA)


# ---------------------------------------------------------------------------
# resource bounds (issue 15, items 2 and 3): refused before the server parses or evaluates them


@pytest.mark.parametrize(
    "query",
    [
        "RETURN " + "-" * 22 + "1 AS x",  # the 35-character query (7 s of parsing)
        "RETURN " + "+" * 13 + "1 AS x",
        "RETURN " + "NOT " * 13 + "true AS x",
        "RETURN " + "(" * 13 + "1" + ")" * 13 + " AS x",
        "RETURN " + "(" * 1990 + "1" + ")" * 1990 + " AS x",  # kept a server thread busy for minutes
        "RETURN " + "[" * 13 + "1" + "]" * 13 + " AS x",
        "RETURN " + "{a:" * 13 + "1" + "}" * 13 + " AS x",
        "RETURN " + "-(" * 7 + "1" + ")" * 7 + " AS x",  # mixed: each pair is two levels
        "RETURN " + "CASE WHEN true THEN " * 13 + "1" + " END" * 13 + " AS x",
        "RETURN " + "abs(" * 13 + "1" + ")" * 13 + " AS x",
        "RETURN " + "[x IN " * 13 + "[1]" + " | x]" * 13 + " AS y",
    ],
    ids=lambda q: q[:40],
)
def test_deep_nesting_is_refused_with_the_limit_named(query: str) -> None:
    with pytest.raises(QueryTooComplexError, match=f"nesting deeper than {MAX_EXPRESSION_DEPTH}") as err:
        check_resources(query)
    assert "flatten" in str(err.value)
    assert isinstance(err.value, CypherValidationError)  # callers that handle validation errors keep working


def test_nesting_at_the_limit_passes() -> None:
    check_resources("RETURN " + "-" * MAX_EXPRESSION_DEPTH + "1 AS x")
    check_resources("RETURN " + "(" * MAX_EXPRESSION_DEPTH + "1" + ")" * MAX_EXPRESSION_DEPTH + " AS x")


def test_many_moderately_deep_subexpressions_are_refused_by_parse_cost() -> None:
    """300 depth-11 chains parsed for 10 s although none passes the depth limit."""
    query = "RETURN " + "+".join(["(" + "-" * 10 + "1)"] * 300) + " AS y"
    with pytest.raises(QueryTooComplexError, match="too expensive to parse"):
        check_resources(query)


def test_long_query_text_is_refused() -> None:
    query = "MATCH (n) WHERE n.key IN [" + ",".join(["'k'"] * 4000) + "] RETURN n"
    assert len(query) > MAX_QUERY_CHARS
    with pytest.raises(QueryTooComplexError, match=r"\$parameters"):
        check_resources(query)


@pytest.mark.parametrize(
    "query",
    [
        "RETURN size(range(1, 1000000000)) AS n",
        "RETURN size(range(1, 300000000)) AS n",
        "RETURN size(range(1, 1000*1000*1000)) AS n",
        "RETURN size(range(-5, 10^9)) AS n",
        "RETURN size(RANGE(1, 1e9)) AS n",
        "RETURN " + " + ".join(["size(range(1, 90000))"] * 12) + " AS n",  # together past MAX_RANGE_TOTAL
        "UNWIND range(1, 400000000) AS x RETURN count(x)",  # UNWIND materialises its list first
    ],
)
def test_large_literal_ranges_are_refused(query: str) -> None:
    with pytest.raises(QueryTooComplexError, match=f"limit is {MAX_RANGE_ELEMENTS}"):
        check_resources(query)


def test_range_bounds_from_parameters_are_checked() -> None:
    check_resources("RETURN size(range(1, $n)) AS n", {"n": 1000})
    with pytest.raises(QueryTooComplexError, match="elements"):
        check_resources("RETURN size(range(1, $n)) AS n", {"n": 10**9})


def test_range_bound_computed_from_data_is_refused() -> None:
    with pytest.raises(QueryTooComplexError, match="not a constant number"):
        check_resources("MATCH (n) WITH count(n) AS c RETURN size(range(1, c * 1000000)) AS n")


@pytest.mark.parametrize(
    "query",
    [
        "RETURN size(reduce(s='aaaaaaaa', i IN range(1,30) | s + s)) AS n",
        "RETURN size(reduce(s = 'a', i IN range(1, 40) | s + 'x' + s)) AS n",
        "RETURN size(reduce(acc = [1], i IN range(1, 40) | acc + [acc])) AS n",
        "RETURN size(reduce(s = 'ab', i IN range(1, 40) | [s, s])) AS n",
    ],
)
def test_reduce_that_doubles_its_accumulator_is_refused(query: str) -> None:
    with pytest.raises(QueryTooComplexError, match="accumulator"):
        check_resources(query)


@pytest.mark.parametrize(
    "query",
    [
        "RETURN reduce(total = 0, x IN [1, 2, 3] | total + x) AS s",
        "RETURN reduce(m = 0, x IN [3, 1] | CASE WHEN x > m THEN x ELSE m END) AS best",
        "RETURN reduce(acc = [], x IN [1, 1, 2] | CASE WHEN x IN acc THEN acc ELSE acc + x END) AS uniq",
        "RETURN reduce(s = '', x IN ['a', 'b'] | s + x + ', ') AS joined",
        "UNWIND range(0, 9) AS i RETURN i",
        "UNWIND range(1, 3000) AS x UNWIND range(1, 3000) AS y RETURN count(*)",  # streamed rows: timeout-bound
        "RETURN range(10, 1, -1) AS r",
        "MATCH (a:Disease)--(b)--(c)<-[:HAS_PHENOTYPE]-(d) WHERE NOT a.key = 'x' AND -a.n < -1 RETURN a.key",
        (
            "MATCH (d:Disease) WHERE NOT (d)-[:HAS_PHENOTYPE]->(:Phenotype {key: $k}) "
            "AND toLower(d.name) CONTAINS toLower($q) RETURN d.key, size([(d)--(x) | x.key][..5]) AS n"
        ),
        "MATCH (n) RETURN CASE WHEN n.x IS NOT NULL THEN -n.x ELSE +1 END AS v",
    ],
)
def test_ordinary_queries_pass_the_resource_check(query: str) -> None:
    check_resources(query, {"k": "HP:1", "q": "x"})


@pytest.mark.parametrize("case", [c for c in CASES if c["expected"] == "ok"], ids=lambda c: c["query"][:50])
def test_guard_ok_cases_pass_the_resource_check(case: dict[str, Any]) -> None:
    check_resources(case["query"])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="()[]{}-+ NOTCASEWHENTHEN1xrange,reduce|s=", max_size=400))
def test_resource_check_never_crashes(text: str) -> None:
    try:
        check_resources(text)
    except CypherValidationError:
        pass


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n": 2**63}, r"\$n = 9223372036854775808 does not fit in a signed 64-bit integer"),
        ({"n": -(2**63) - 1}, r"\$n = .* does not fit"),
        ({"keys": ["a", ["b", 10**30]]}, r"\$keys\[1\]\[1\] = .* 64-bit"),
        ({"x": float("nan")}, r"\$x is nan; NaN and infinite"),
        ({"m": {"score": float("-inf")}}, r"\$m\.score is -inf"),
        ({"m": {"a b": float("inf")}}, r"\$m\['a b'\] is inf"),
        ({"s": "ab\x00c"}, r"\$s contains a NUL character \(U\+0000\) at position 2"),
        ({"m": {"k\x00": 1}}, r"\$m has the map key .* without NUL"),
        ({"b": b"bytes"}, r"\$b is a bytes"),
        ({"s": {1, 2}}, r"\$s is a set"),
    ],
)
def test_unsendable_parameter_values_name_their_path(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterValueError, match=message):
        check_params(params)


def test_parameter_nesting_is_bounded_without_recursion() -> None:
    value: Any = 1
    for _ in range(100_000):  # far past Python's recursion limit
        value = {"a": [value]}
    with pytest.raises(ParameterValueError, match=f"deeper than {MAX_PARAM_DEPTH} levels"):
        check_params({"x": value})
    shallow: Any = 1
    for _ in range(MAX_PARAM_DEPTH):
        shallow = [shallow]
    check_params({"x": shallow, "n": 2**63 - 1, "f": 1.5, "t": True, "z": None, "s": "ok"})


def test_check_query_runs_every_check() -> None:
    with pytest.raises(ReadOnlyViolationError):
        check_query("MATCH (n) DELETE n")
    with pytest.raises(ParameterValueError):
        check_query("RETURN $x", {"x": float("nan")})
    with pytest.raises(QueryTooComplexError):
        check_query("RETURN " + "-" * 20 + "1")
    check_query("MATCH (n:Disease {key: $k}) RETURN n.name", {"k": "OMIM:1"})


@pytest.mark.parametrize(
    "query",
    [
        # ran past 60 s and 1.7 GB on 20,000 nodes under a 5 s timeout and a 256 MiB cap
        "MATCH (a:A) WITH collect(a.key) AS l RETURN size([x IN l | [y IN l | x + y]]) AS n",
        "MATCH (a:A) WITH collect(a.key) AS l RETURN size([x IN l WHERE any(y IN l WHERE y = x)]) AS n",
        "MATCH (a:A) WITH collect(a.key) AS l RETURN reduce(s = 0, x IN l | s + size([y IN l WHERE y > x])) AS n",
    ],
)
def test_nested_iteration_inside_one_expression_is_refused(query: str) -> None:
    with pytest.raises(QueryTooComplexError, match="nested list iteration.*UNWIND"):
        check_resources(query)


@pytest.mark.parametrize(
    "query",
    [
        "WITH [1, 2] AS l RETURN [x IN [y IN l WHERE y > 1] | x] AS a",  # an iteration as the source is sequential
        "WITH [1, 2] AS l RETURN [x IN l WHERE x > 1 | x * 2] AS a, all(z IN l WHERE z > 0) AS b",
        "MATCH (d) RETURN [(d)-->(m) | m.key][..5] AS keys",
        "WITH [1, 2] AS l UNWIND l AS x RETURN size([y IN l WHERE y > x]) AS n",  # the outer loop as rows
    ],
)
def test_single_level_iteration_passes(query: str) -> None:
    check_resources(query)


def test_cypher_the_code_generates_passes_every_check() -> None:
    """The guard sits on store.query(), which search_nodes and the path planner's walks also use:
    their generated queries (longest shapes included) must never be refused."""
    for hops in range(1, 7):
        path = [Hop(f"REL_{i}", "out" if i % 2 else "in", f"L{i}") for i in range(hops)]
        check_query(walk_query("Disease", path, 50), {"key": "OMIM:1"})
    for direction in ("out", "in", "both"):
        for weight in (None, "weight"):
            params = {"keys": ["a", "b"], "limit": 10}
            check_query(aggregation_query("A", ["R1", "R2", "R3"], direction, "B", weight), params)
            check_query(aggregation_query("A", None, direction, None, weight), params)


@pytest.mark.parametrize("value", [10**400, -(10**400), 10**5000], ids=["1e400", "-1e400", "1e5000"])
def test_a_parameter_past_any_float_is_refused_not_a_traceback(value: int) -> None:
    """A range() bound of 10**400 has no float value; the guard counts it as unbounded and refuses the query,
    and the parameter check names the value by its size (a 5000-digit number has no str())."""
    for query in ("RETURN range(0, $n) AS r", "RETURN range($n, 0, -1) AS r", "RETURN range(0, 10, $n) AS r"):
        try:
            check_resources(query, {"n": value})
        except QueryTooComplexError:
            pass
    with pytest.raises(QueryTooComplexError, match="range"):
        check_resources("RETURN range(0, $n) AS r", {"n": abs(value)})
    with pytest.raises(ParameterValueError, match=r"\$n = .*does not fit in a signed 64-bit integer"):
        check_params({"n": value})
