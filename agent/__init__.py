"""The retrieval agent: ``build_agent``, ``ask``/``aask``, ``AgentConfig``, ``AgentResult``.

Exports resolve lazily so that importing a submodule (``agent.linking``) does not pull in
LangGraph and the tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.api import aask, ask, build_agent
    from agent.config import AgentConfig
    from agent.results import AgentResult

__all__ = ["AgentConfig", "AgentResult", "aask", "ask", "build_agent"]

_HOMES = {
    "build_agent": "agent.api",
    "ask": "agent.api",
    "aask": "agent.api",
    "AgentConfig": "agent.config",
    "AgentResult": "agent.results",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
