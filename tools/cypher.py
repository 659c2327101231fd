"""Read-only Cypher for precise constraints, with errors shaped so a planner can repair its query.

Why check against the schema first: a query naming a label that does not exist returns zero rows
silently; the planner would conclude "no answer". A structured error that lists valid names lets
it fix the query in one repair round.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool
from pydantic import Field, field_validator

from graphs.errors import (
    CypherValidationError,
    ParameterValueError,
    QueryTimeoutError,
    QueryTooComplexError,
    ReadOnlyViolationError,
    SKBError,
    StoreError,
    StoreUnavailableError,
    TooManyRowsError,
)
from graphs.skb.compact import CompactSKB
from graphs.skb.model import GraphSchema
from graphs.store.base import QueryResult
from graphs.store.cypher_guard import (
    MAX_EXPRESSION_DEPTH,
    MAX_RANGE_ELEMENTS,
    check_against_schema,
    check_params,
    check_read_only,
    check_resources,
)
from graphs.store.falkordb_server import RESULTSET_SIZE
from graphs.store.skb_walks import Walk, parse_walk, skb_walk
from graphs.text_safety import clean_text
from tools.common import InjectedArgs, SKBTool, schema_of, truncate
from tools.results import (
    DEFAULT_BUDGET_TOKENS,
    Rows,
    ToolError,
    ToolProvenance,
    names_relationship_types,
    tool_error,
    tool_output,
)

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "cypher"
DESCRIPTION = (
    "Run a read-only Cypher query against the graph (MATCH/OPTIONAL MATCH/WHERE/WITH/RETURN/ORDER BY/LIMIT). "
    "Every node has properties `key` and `name`. Pass values as $parameters in `params`. "
    'Returns {"columns": [...], "truncated": bool, "rows": [[...]]} (rows past the token budget are counted in '
    '"omitted") or {"error": {"type","message","hint"}}.'
)
MAX_CELL_CHARS = 200
#: Longest list a cell may hold in the output (``collect()`` over a whole label would be huge).
MAX_CELL_ITEMS = 100
#: Deepest nesting of lists/maps kept in a cell.
MAX_CELL_DEPTH = 6
#: Byte cap on the rows of one result: rows past it are dropped and ``truncated`` is set.
MAX_RESULT_BYTES = 64_000
#: Byte cap on the JSON of ``params`` (values are data; a megabyte of them is a mistake or an attack).
MAX_PARAMS_BYTES = 20_000
READ_ONLY_HINT = "only read clauses are allowed: MATCH, OPTIONAL MATCH, WHERE, WITH, RETURN, ORDER BY, LIMIT"
PARAMS_HINT = "pass strings, finite numbers within 64 bits, booleans, null, lists and maps as params"
TOO_COMPLEX_HINT = (
    f"keep expressions shallow (at most {MAX_EXPRESSION_DEPTH} nested brackets/CASE/prefix operators), bound "
    f"range() by literals or $parameters (at most {MAX_RANGE_ELEMENTS} elements), grow reduce() accumulators "
    "by one element per step, and split long queries"
)
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class CypherArgs(InjectedArgs):
    query: str = Field(min_length=1, max_length=4000, description="a read-only Cypher query")
    params: dict[str, Any] | None = Field(default=None, description="query parameters, referenced as $name")
    max_rows: int = Field(default=50, ge=1, le=10000, description="most rows to return")

    @field_validator("query")
    @classmethod
    def _no_nul(cls, query: str) -> str:
        if "\x00" in query:
            raise ValueError("the query contains a NUL character; remove it")
        return query

    @field_validator("params")
    @classmethod
    def _plain_params(cls, params: dict[str, Any] | None) -> dict[str, Any] | None:
        if not params:
            return params
        bad = [name for name in params if not _PARAM_NAME.match(str(name))]
        if bad:
            raise ValueError(
                f"parameter names must be identifiers (letters, digits, _; not starting with a digit), got {bad[:5]}"
            )
        try:  # before json.dumps: a 3,000-deep value would raise RecursionError there
            check_params(params)
        except ParameterValueError as exc:
            raise ValueError(str(exc)) from exc
        try:
            size = len(json.dumps(params, ensure_ascii=False).encode("utf-8", "replace"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"params must be JSON data (strings, numbers, booleans, lists, maps): {exc}") from exc
        if size > MAX_PARAMS_BYTES:
            raise ValueError(f"params are {size} bytes of JSON; the limit is {MAX_PARAMS_BYTES}")
        return params


class CypherTool(SKBTool):
    """The cypher tool, with its arguments validated before LangChain's callbacks see them.

    Why: ``BaseTool.run`` renders the raw input with ``str()`` for its callbacks before it
    validates anything, so a 3,000-deep ``params`` value raised RecursionError instead of an
    argument error. Validating with CypherArgs first (iteratively, see check_params) turns it
    into the same pydantic ValidationError any other bad argument gives.
    """

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(tool_input, dict) and tool_input.get("params") is not None:
            CypherArgs.model_validate(tool_input)
        return super().run(tool_input, *args, **kwargs)


def jsonable(value: Any, limit: int = MAX_CELL_CHARS, depth: int = 0) -> Any:
    """A cell as JSON-safe data with long strings cut (node texts can be kilobytes), long lists cut
    to MAX_CELL_ITEMS (a trailing marker says how many were left out) and deep nesting flattened."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # NaN/inf are not JSON
    if isinstance(value, str):
        return clean_text(truncate(value, limit))
    if depth >= MAX_CELL_DEPTH:
        return truncate(clean_text(str(value)), limit)
    if isinstance(value, dict):
        items = list(value.items())
        out = {clean_text(str(k)): jsonable(v, limit, depth + 1) for k, v in items[:MAX_CELL_ITEMS]}
        if len(items) > MAX_CELL_ITEMS:
            out["\u2026"] = f"{len(items) - MAX_CELL_ITEMS} more entries"
        return out
    if isinstance(value, list | tuple | set):
        seq = list(value)
        cut = [jsonable(v, limit, depth + 1) for v in seq[:MAX_CELL_ITEMS]]
        if len(seq) > MAX_CELL_ITEMS:
            cut.append(f"\u2026 {len(seq) - MAX_CELL_ITEMS} more items")
        return cut
    props = getattr(value, "properties", None)
    if isinstance(props, dict):
        return jsonable(props, limit, depth + 1)
    return truncate(clean_text(str(value)), limit)


def cap_rows(rows: list[list[Any]], max_bytes: int = MAX_RESULT_BYTES) -> tuple[list[list[Any]], bool]:
    """The longest prefix of ``rows`` whose JSON fits in ``max_bytes``; True when rows were dropped."""
    used = 2  # the brackets of the list; each row adds its JSON and a ", " separator
    for i, row in enumerate(rows):
        used += len(json.dumps(row, ensure_ascii=False, default=str).encode("utf-8", "replace")) + 2
        if used > max_bytes:
            return rows[:i], True
    return rows, False


def schema_hint(schema: GraphSchema, max_props: int = 12) -> str:
    props = "; ".join(f"{lab}: {', '.join(schema.properties_of(lab)[:max_props])}" for lab in schema.label_names())
    patterns = ", ".join(f"(:{r.src_label})-[:{r.rel}]->(:{r.dst_label})" for r in schema.relations)
    return (
        f"valid labels: {', '.join(schema.label_names())}; valid relationship types: "
        f"{', '.join(schema.relation_names())}; patterns: {patterns}; properties: {props}"
    )


#: Read relation-path walks (``path_walk_query``'s text) from the in-process SKB when the store is its embedded
#: copy (``graphs.store.skb_walks``); False sends every query to the store.
READ_SKB = True


def _walk_here(bundle: IndexBundle, query: str, params: Any) -> tuple[CompactSKB, Walk, str] | None:
    """The SKB, walk and key when ``query`` is a walk this process may read from its SKB (see ``walked_here``)."""
    skb = bundle.skb
    if not (READ_SKB and bundle.store_kind == "falkordb" and isinstance(skb, CompactSKB)):
        return None
    if not isinstance(params, dict) or set(params) != {"key"}:
        return None
    key = params["key"]
    if not isinstance(key, str) or "\x00" in key:
        return None
    walk = parse_walk(query)
    if walk is None or walk.limit >= RESULTSET_SIZE:  # the server cuts a result set there and says so
        return None
    return skb, walk, key


def walked_here(bundle: IndexBundle, query: str, params: dict[str, Any] | None, max_rows: int) -> QueryResult | None:
    """The store's result for a relation-path walk, computed from the index's own SKB; None for any other query,
    another store (a live Neo4j source may differ from the SKB), a key the store could hold otherwise (a NUL
    is replaced there), or a walk too large to read here (``skb_walk``'s bound). Why: see ``skb_walks``."""
    found = _walk_here(bundle, query, params)
    if found is None:
        return None
    skb, walk, key = found
    rows = skb_walk(skb, walk.start_label, key, walk.hops, walk.limit)
    if rows is None or any("\x00" in str(row[0]) for row in rows):
        return None
    # as the store reports rows: at most max_rows of them, truncated when there were more
    return QueryResult(columns=["key", "walks"], rows=rows[:max_rows], truncated=len(rows) > max_rows)


def make_cypher(
    bundle: IndexBundle,
    *,
    timeout_ms: int = 5000,
    max_rows_cap: int = 1000,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
) -> BaseTool:
    """The cypher tool: typed ``Rows`` (or a ``ToolError`` naming what to fix) as the artifact, their
    compact text within ``budget_tokens`` as the content."""

    def run(
        query: str,
        params: dict[str, Any] | None = None,
        max_rows: int = 50,
        step: int = 0,
        question: str | None = None,
    ) -> tuple[str, Rows | ToolError]:
        schema = schema_of(bundle)
        max_rows = min(max_rows, max_rows_cap)

        def fail(type_: str, exc: Exception, hint: str) -> tuple[str, Rows | ToolError]:
            error = tool_error(NAME, step, query, type_, str(exc), hint)
            return tool_output(error, budget_tokens)[0], error

        try:
            check_read_only(query)  # before anything else: a write is refused as such, whatever it names
        except ReadOnlyViolationError as exc:
            return fail("read_only_violation", exc, READ_ONLY_HINT)
        except CypherValidationError as exc:  # unterminated string, comment or quoted name
            return fail("syntax", exc, "fix the Cypher syntax; " + schema_hint(schema))
        try:  # direct calls skip the args schema: the same value checks as CypherArgs
            check_params(params)
        except ParameterValueError as exc:
            return fail("invalid_params", exc, PARAMS_HINT)
        try:  # before the server parses it: parse time and list/string growth escape the server's limits
            check_resources(query, params)
        except QueryTooComplexError as exc:
            return fail("too_complex", exc, TOO_COMPLEX_HINT)
        try:
            check_against_schema(query, schema)
        except CypherValidationError as exc:
            return fail("unknown_schema", exc, schema_hint(schema))
        try:
            result = walked_here(bundle, query, params, max_rows) or bundle.store.query(
                query, params or {}, timeout_ms=timeout_ms, max_rows=max_rows
            )
        except ReadOnlyViolationError as exc:
            return fail("read_only_violation", exc, READ_ONLY_HINT)
        except QueryTooComplexError as exc:
            return fail("too_complex", exc, TOO_COMPLEX_HINT)
        except ParameterValueError as exc:
            return fail("invalid_params", exc, PARAMS_HINT)
        except CypherValidationError as exc:
            return fail("syntax", exc, "fix the Cypher syntax; " + schema_hint(schema))
        except QueryTimeoutError as exc:
            hint = (
                f"the query ran past {timeout_ms} ms; anchor it on node keys, add a LIMIT, avoid variable-length paths"
            )
            return fail("timeout", exc, hint)
        except TooManyRowsError as exc:
            return fail(
                "too_many_rows", exc, f"add LIMIT {max_rows} or aggregate (count, collect) to return fewer rows"
            )
        except StoreUnavailableError as exc:
            hint = "the graph store is restarted on the next call; retry once, or use semantic_search meanwhile"
            return fail("store_unavailable", exc, hint)
        except (StoreError, SKBError) as exc:
            return fail("store_error", exc, "check the query against the schema; " + schema_hint(schema))
        rows, cut = cap_rows([[jsonable(cell) for cell in row] for row in result.rows[:max_rows]])
        typed = Rows(
            provenance=ToolProvenance(tool=NAME, step=step, query=truncate(query, 500)),
            columns=[str(c) for c in result.columns],
            rows=rows,
            truncated=bool(result.truncated or len(result.rows) > max_rows or cut),
            typed_edges=names_relationship_types(query),
        )
        text, _ = tool_output(typed, budget_tokens)
        return text, typed

    def in_process(args: dict[str, Any]) -> bool:
        """A relation-path walk that ``walked_here`` reads from the SKB (unless it proves larger than its bound)."""
        return _walk_here(bundle, str(args.get("query") or ""), args.get("params")) is not None

    return CypherTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=CypherArgs, response_format="content_and_artifact",
        in_process=in_process,
    )
