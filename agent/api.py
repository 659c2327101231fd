"""The library entry points: build the agent graph, or ask one question."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from agent.config import AgentConfig
from agent.graph import AgentGraph
from agent.results import AgentResult
from graphs.errors import ConfigError, PlannerError

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from graphs.bundle import IndexBundle


def build_agent(
    config: AgentConfig | None = None,
    bundle: IndexBundle | None = None,
    index_dir: Path | None = None,
    *,
    chat_model: BaseChatModel | None = None,
    **compile_kwargs: Any,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled LangGraph agent over ``bundle`` (or the index at ``index_dir``).

    ``chat_model`` replaces the planner model (tests pass a ScriptedChatModel; callers may pass
    any tool-calling chat model). ``compile_kwargs`` go to ``StateGraph.compile`` (checkpointer...).
    """
    if bundle is None:
        if index_dir is None:
            raise ConfigError("build_agent needs a bundle or an index_dir; build an index with `skb index`")
        from graphs.bundle import IndexBundle

        bundle = IndexBundle.open(index_dir)
    return AgentGraph(bundle, config or AgentConfig(), chat_model).compile(**compile_kwargs)


def _result(state: dict[str, Any]) -> AgentResult:
    result = state.get("result")
    if not isinstance(result, AgentResult):
        raise PlannerError("the agent ended without a result; see the degraded notes in the trace")
    return result


def ask(
    question: str,
    *,
    bundle: IndexBundle,
    config: AgentConfig | None = None,
    chat_model: BaseChatModel | None = None,
    run_config: RunnableConfig | None = None,
) -> AgentResult:
    """Answer one question: the ranked k + k' context with provenance and an answer message."""
    graph = build_agent(config, bundle, chat_model=chat_model)
    return _result(graph.invoke({"question": question}, run_config))


async def aask(
    question: str,
    *,
    bundle: IndexBundle,
    config: AgentConfig | None = None,
    chat_model: BaseChatModel | None = None,
    run_config: RunnableConfig | None = None,
) -> AgentResult:
    graph = build_agent(config, bundle, chat_model=chat_model)
    return _result(await graph.ainvoke({"question": question}, run_config))
