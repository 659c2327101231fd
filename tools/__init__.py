"""LangChain tools over an IndexBundle: semantic_search (Query), search_nodes (Search), cypher, finish.

They work without the agent: ``make_tools(bundle)`` and ``tool.invoke({...})``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_core.tools import BaseTool

from tools.common import QuestionGetter
from tools.cypher import make_cypher
from tools.finish import make_finish
from tools.results import DEFAULT_BUDGET_TOKENS
from tools.search_nodes import make_search_nodes
from tools.semantic_search import make_semantic_search

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

TOOL_NAMES = ("semantic_search", "search_nodes", "cypher", "finish")


def make_tools(
    bundle: IndexBundle,
    question_getter: QuestionGetter | None = None,
    *,
    cypher_timeout_ms: int = 5000,
    cypher_max_rows: int = 1000,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    weight_property: str | None = None,
) -> list[BaseTool]:
    """The four tools, in a stable order. ``question_getter`` supplies the question used to rank
    ``search_nodes`` results when the caller does not pass one; ``budget_tokens`` caps each result's
    model-facing text; ``weight_property`` names a numeric edge property ``search_nodes`` sums per
    neighbour."""
    return [
        make_semantic_search(bundle, budget_tokens=budget_tokens),
        make_search_nodes(bundle, question_getter, budget_tokens=budget_tokens, weight_property=weight_property),
        make_cypher(bundle, timeout_ms=cypher_timeout_ms, max_rows_cap=cypher_max_rows, budget_tokens=budget_tokens),
        make_finish(bundle, budget_tokens=budget_tokens),
    ]


__all__ = ["TOOL_NAMES", "make_tools"]
