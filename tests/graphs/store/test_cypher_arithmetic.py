"""The guard folds constant expressions (range() bounds and steps) the way the graph server evaluates them:
each expression of a table, and random ones, is asked of a real FalkorDB (``RETURN <expr>``) and the
guard's value must be the server's answer, or None where the server refuses to evaluate it. The reported
reproduction, ``range(0, 3000000, 1 - 1/2*2)`` (a step of 1 in Cypher, 0.5 read the Python way), is
refused before the server sees it, and the server answers afterwards."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from falkordb import Graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphs.store.cypher_arithmetic import Number, fold
from graphs.store.cypher_guard import MAX_RANGE_ELEMENTS, QueryTooComplexError, check_resources
from graphs.store.falkordb_server import FalkorDBServer
from graphs.store.falkordb_store import FalkorDBStore

pytestmark = pytest.mark.integration

PARAMS = {"n": 7, "f": 2.5, "neg": -3}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBServer]:
    srv = FalkorDBServer(tmp_path_factory.mktemp("arith") / "falkordb", persist=False)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def graph(server: FalkorDBServer) -> Graph:
    return server.client(socket_timeout=30).select_graph("skb")


def server_value(graph: Graph, expr: str) -> Number | None:
    """The server's answer to ``RETURN <expr>``, or None when it refuses to evaluate it."""
    try:
        rows = graph.query(f"RETURN {expr} AS v", PARAMS).result_set
    except Exception:  # noqa: BLE001 -- any refusal (syntax, overflow, division by zero, type) counts alike
        return None
    value = rows[0][0]
    assert isinstance(value, int | float) and not isinstance(value, bool), (expr, value)
    return value


def same(guard: Number | None, served: Number | None) -> bool:
    """Equal values of the same type (the client reads floats back with 15 significant digits)."""
    if guard is None or served is None:
        return guard is served
    if type(guard) is not type(served):
        return False
    if isinstance(guard, float):
        if math.isnan(guard) or math.isnan(served):
            return math.isnan(guard) and math.isnan(served)
        return guard == served or math.isclose(guard, served, rel_tol=1e-13)
    return guard == served


TABLE = [
    # integer division truncates toward zero; % takes the dividend's sign
    "7/2", "-7/2", "7/-2", "-7 % 2", "7 % -2", "-10 % 3", "17 % 5 % 3", "100 / 10 / 5",
    "1 - 1/2*2", "1-1/2*2", "(1 + 2) * (3 - 4) / 2", "10 / 4 * 4", "7 / 2 * 2.0", "10 / 3 / 2.0",
    # a float on either side gives a float
    "7.0/2", "7/2.0", "-7.5 % 2", "10 % 3.5", "1e3 % 7", "7 * 1.0 / 2", "10 / 4.0 * 4", "10.0 / 3 / 2",
    "1.0/0", "-1.0/0", "0.0/0", "5 / -0.0", "1 % 0.0", "1.5 % 0", "1.0 % 0", "5.0 % -0.0",
    # by zero on integers: the server refuses
    "1/0", "1 % 0", "5 % -0",
    # ^ is a float, right to left, and a sign binds tighter than it
    "2^3", "-2^2", "2^3^2", "2^2^3", "2^-1", "-2^-2", "2^-1^2", "-3^2*2", "-2*3^2", "2^-2*4", "+2^2",
    "--2^2", "-(2)^2", "- 2 ^ 2", "4^0.5", "2 ^ 0.5 * 2", "9 % 4 ^ 2", "2 ^ 2 / 3", "0^0", "0^-1",
    "(-8)^(1/3)", "(-8)^(1.0/3)", "2^1024", "10^400", "-(10^400)", "1 + 2 * 3 - 4 / 2 % 3 ^ 2",
    # signs
    "- -3", "+3", "-+3", "2*-3", "3 - -1", "3--1", "1 + + 2", "1 - - - 2", "-7 / 2", "-(7 / 2)", "- 7 % 3",
    # 64-bit integers wrap
    "9223372036854775807 + 1", "9223372036854775807 * 2", "(-9223372036854775807 - 1) / -1",
    "(-9223372036854775807 - 1) % -1", "-9223372036854775807 - 2",
    # literals
    "1e3", "1E3", "1.5e2", "2.5E+2", "1e+2", "1e-2", ".5", "0.5", "00.5", "1.5e3", "15e-1", "0.1e1",
    "007", "010", "0777", "-017", "00", "0", "0x10", "0X1F", "0x7FFFFFFFFFFFFFFF", "1e308", "1.7e308",
    "1e308*10",
    # literals the server refuses
    "08", "09", "0x", "1e", "5.", "1_000", "9223372036854775808", "0x8000000000000000", "1e400", "1e-400",
    # parameters
    "$n / 2", "-$n % 4", "$f * 2", "$n / $neg", "$n ^ 2",
    # the sizes of ranges
    "size(range(0, 10, 1 - 1/2*2))", "size(range(0, 10, 3))", "size(range(10, 0, -3))", "size(range(0, 10, -1))",
    "size(range(-7, 7 % 5))", "size(range(0, 2^3))", "size(range(0, 10, 0))", "size(range(0, 10, 7/2))",
    "size(range(9223372036854775800, 9223372036854775807))", "size(range(0, 10, 9223372036854775807))",
]  # fmt: skip


def _guard_size(expr: str) -> Number | None:
    """For ``size(range(...))``: the element count the guard reads (0 where the server refuses to build)."""
    from graphs.store.cypher_lexer import tokenize
    from graphs.store.cypher_limits import _call_args, _range_elements

    text = f"RETURN {expr}"
    tokens = tokenize(text)
    open_idx = next(i for i, t in enumerate(tokens) if t.text == "range") + 1
    args, _ = _call_args(tokens, open_idx)
    count = _range_elements(text, args, PARAMS)
    return None if count is None else int(count)


@pytest.mark.parametrize("expr", TABLE)
def test_the_guard_folds_as_the_server_evaluates(graph: Graph, expr: str) -> None:
    served = server_value(graph, expr)
    if expr.startswith("size(range("):
        # the server refuses a zero step and a float bound before building anything; the guard counts a zero
        # step as 0 and a float bound as the number of elements it would enumerate (never fewer)
        counted = _guard_size(expr)
        assert counted == served if served is not None else counted is not None and counted >= 0, expr
        return
    guard = fold(expr, PARAMS)
    assert same(guard, served), f"{expr}: guard {guard!r}, server {served!r}"


_ATOMS = st.sampled_from(["0", "1", "2", "3", "7", "10", "3.5", ".5", "1e3", "2e-2", "010", "0x1F", "$n", "$f", "$neg"])
_OPS = st.sampled_from(["+", "-", "*", "/", "%", "^"])
_EXPR = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["-", "+"]), inner).map("".join),
        inner.map(lambda e: f"({e})"),
        st.tuples(inner, st.sampled_from(["", " "]), _OPS, st.sampled_from(["", " "]), inner).map("".join),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(expr=_EXPR)
def test_random_expressions_fold_as_the_server_evaluates(graph: Graph, expr: str) -> None:
    guard, served = fold(expr, PARAMS), server_value(graph, expr)
    assert same(guard, served), f"{expr}: guard {guard!r}, server {served!r}"


def test_the_reproduction_is_refused_and_the_server_keeps_answering(server: FalkorDBServer) -> None:
    store = FalkorDBStore(server.data_dir, server=server)
    try:
        for query in (
            "RETURN size(range(0, 3000000, 1 - 1/2*2)) AS n",
            "RETURN size(range(0, 300000000, 1 - 1/2*2)) AS n",
            "RETURN size(range(0, 3000000, 3 % 2)) AS n",
            "RETURN size(range(0, 3000000 * (7/2 - 2))) AS n",
            "RETURN size(range(0, $big, -(-1))) AS n",
        ):
            with pytest.raises(QueryTooComplexError, match="produces"):
                store.query(query, {"big": 3_000_000})
        # within the limit, the guard's count is the server's
        n = MAX_RANGE_ELEMENTS - 1
        assert store.query(f"RETURN size(range(1, {n}, 1 - 1/2*2)) AS n").rows == [[n]]
        assert store.query("RETURN 1 AS x").rows == [[1]]
        assert server.is_running()
    finally:
        store.close()


def test_bounds_that_are_not_constants_are_refused() -> None:
    for query in ("RETURN range(0, 1.e3) AS r", "RETURN range(0, 10 / x) AS r", "RETURN range(0, $p.x) AS r"):
        with pytest.raises(QueryTooComplexError, match="not a constant number"):
            check_resources(query, {"p": {"x": 1}})
