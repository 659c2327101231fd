"""The retrieval agent: ``build_agent``, ``ask``/``aask``, ``AgentConfig``, ``AgentResult``, ``SKBToolkit``,
``SKBRetriever``.

Rooms: ``linking`` (which nodes a question names), ``scoring`` (ranking targets by the evidence they
share with the question), ``planning`` (target type, relation paths, the offline and LLM planners),
``stages`` (constraints, rerank), ``tracing``, ``serving`` (MCP, LangGraph server, toolkit, LangChain
retriever), ``cli``;
``graph`` wires them into the LangGraph state machine and ``api`` runs it.

Every error the agent raises on purpose is an ``SKBError`` (``graphs.errors``, one module) and is
exported here too: ``from agent import SKBError, ConfigError, PlannerError, BudgetSpentError``.

Exports resolve lazily so that importing a submodule (``agent.linking.entities``) does not pull in
LangGraph and the tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.api import aask, ask, build_agent
    from agent.config import AgentConfig
    from agent.results import AgentResult
    from agent.serving.retriever import SKBRetriever
    from agent.serving.toolkit import SKBToolkit
    from graphs.errors import (
        BudgetSpentError,
        ConfigError,
        InvalidPlanError,
        PlannerCallError,
        PlannerError,
        PlannerTimeoutError,
        SKBError,
    )

__all__ = [
    "AgentConfig",
    "AgentResult",
    "BudgetSpentError",
    "ConfigError",
    "InvalidPlanError",
    "PlannerCallError",
    "PlannerError",
    "PlannerTimeoutError",
    "SKBError",
    "SKBRetriever",
    "SKBToolkit",
    "aask",
    "ask",
    "build_agent",
]

_HOMES = {
    "build_agent": "agent.api",
    "ask": "agent.api",
    "aask": "agent.api",
    "AgentConfig": "agent.config",
    "AgentResult": "agent.results",
    "SKBToolkit": "agent.serving.toolkit",
    "SKBRetriever": "agent.serving.retriever",
}


def __getattr__(name: str) -> Any:
    import importlib

    home = _HOMES.get(name)
    if home is None:
        # every public error of the project (graphs.errors: one module, one root) is an export too
        errors = importlib.import_module("graphs.errors")
        found = getattr(errors, name, None) if name.endswith(("Error", "Error_")) else None
        if isinstance(found, type) and issubclass(found, errors.SKBError):
            return found
        raise AttributeError(f"module 'agent' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
