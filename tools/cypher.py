"""Read-only Cypher for precise constraints, with errors shaped so a planner can repair its query.

Why check against the schema first: a query naming a label that does not exist returns zero rows
silently; the planner would conclude "no answer". A structured error that lists valid names lets
it fix the query in one repair round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import Field

from graphs.errors import (
    CypherValidationError,
    QueryTimeoutError,
    ReadOnlyViolationError,
    SKBError,
    StoreError,
    TooManyRowsError,
)
from graphs.model import GraphSchema
from tools.common import InjectedArgs, error_payload, provenance, schema_of, tool_output, truncate

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "cypher"
DESCRIPTION = (
    "Run a read-only Cypher query against the graph (MATCH/OPTIONAL MATCH/WHERE/WITH/RETURN/ORDER BY/LIMIT). "
    "Every node has properties `key` and `name`. Pass values as $parameters in `params`. "
    'Returns {"columns": [...], "rows": [[...]], "truncated": bool} or {"error": {"type","message","hint"}}.'
)
MAX_CELL_CHARS = 200


class CypherArgs(InjectedArgs):
    query: str = Field(min_length=1, max_length=4000, description="a read-only Cypher query")
    params: dict[str, Any] | None = Field(default=None, description="query parameters, referenced as $name")
    max_rows: int = Field(default=50, ge=1, le=10000, description="most rows to return")


def jsonable(value: Any, limit: int = MAX_CELL_CHARS) -> Any:
    """A cell as JSON-safe data with long strings cut (node texts can be kilobytes)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return truncate(value, limit)
    if isinstance(value, dict):
        return {str(k): jsonable(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v, limit) for v in value]
    props = getattr(value, "properties", None)
    if isinstance(props, dict):
        return jsonable(props, limit)
    return truncate(str(value), limit)


def schema_hint(schema: GraphSchema, max_props: int = 12) -> str:
    props = "; ".join(f"{lab}: {', '.join(schema.properties_of(lab)[:max_props])}" for lab in schema.label_names())
    patterns = ", ".join(f"(:{r.src_label})-[:{r.rel}]->(:{r.dst_label})" for r in schema.relations)
    return (
        f"valid labels: {', '.join(schema.label_names())}; valid relationship types: "
        f"{', '.join(schema.relation_names())}; patterns: {patterns}; properties: {props}"
    )


def _check_schema(query: str, schema: GraphSchema) -> None:
    try:
        from graphs.store.cypher_guard import check_against_schema
    except ImportError:  # the guard module is optional at import time; the store still guards writes
        return
    check_against_schema(query, schema)


def make_cypher(bundle: IndexBundle, *, timeout_ms: int = 5000, max_rows_cap: int = 1000) -> BaseTool:
    def run(
        query: str,
        params: dict[str, Any] | None = None,
        max_rows: int = 50,
        step: int = 0,
        question: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        schema = schema_of(bundle)
        max_rows = min(max_rows, max_rows_cap)
        try:
            _check_schema(query, schema)
        except ReadOnlyViolationError as exc:
            hint = "only read clauses are allowed: MATCH, OPTIONAL MATCH, WHERE, WITH, RETURN, ORDER BY, LIMIT"
            return tool_output(error_payload(NAME, step, query, "read_only_violation", str(exc), hint))
        except CypherValidationError as exc:
            return tool_output(error_payload(NAME, step, query, "unknown_schema", str(exc), schema_hint(schema)))
        try:
            result = bundle.store.query(query, params or {}, timeout_ms=timeout_ms, max_rows=max_rows)
        except ReadOnlyViolationError as exc:
            hint = "only read clauses are allowed: MATCH, OPTIONAL MATCH, WHERE, WITH, RETURN, ORDER BY, LIMIT"
            return tool_output(error_payload(NAME, step, query, "read_only_violation", str(exc), hint))
        except CypherValidationError as exc:
            hint = "fix the Cypher syntax; " + schema_hint(schema)
            return tool_output(error_payload(NAME, step, query, "syntax", str(exc), hint))
        except QueryTimeoutError as exc:
            hint = f"the query ran past {timeout_ms} ms; anchor it on node keys, add a LIMIT, avoid variable-length paths"
            return tool_output(error_payload(NAME, step, query, "timeout", str(exc), hint))
        except TooManyRowsError as exc:
            hint = f"add LIMIT {max_rows} or aggregate (count, collect) to return fewer rows"
            return tool_output(error_payload(NAME, step, query, "too_many_rows", str(exc), hint))
        except (StoreError, SKBError) as exc:
            hint = "check the query against the schema; " + schema_hint(schema)
            return tool_output(error_payload(NAME, step, query, "store_error", str(exc), hint))
        rows = [[jsonable(cell) for cell in row] for row in result.rows[:max_rows]]
        payload = {
            "columns": list(result.columns),
            "rows": rows,
            "truncated": bool(result.truncated or len(result.rows) > max_rows),
            "provenance": provenance(NAME, step, query),
        }
        return tool_output(payload)

    return StructuredTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=CypherArgs, response_format="content_and_artifact"
    )
