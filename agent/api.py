"""The library entry points: build the agent graph, or ask one question."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManager
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from agent.config import AgentConfig
from agent.graph import AgentGraph
from agent.results import AgentResult
from graphs.errors import ConfigError, PlannerError

if TYPE_CHECKING:
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


_CACHE_LOCK = threading.Lock()
_CACHE: OrderedDict[tuple[int, str, bool], tuple[Any, CompiledStateGraph[Any, Any, Any, Any]]] = OrderedDict()
#: Compiled agents kept (a few bundles x configs); bounded because each holds its bundle alive.
CACHE_SIZE = 8


def _cached_agent(
    bundle: IndexBundle, config: AgentConfig | None, unobserved: bool = False
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """One compiled agent per (bundle, config, shape): evals ask thousands of questions with one config,
    and the graph keeps its planner model and entity linker between them. ``unobserved``: the graph of
    fewer steps (``AgentGraph.compile_unobserved``)."""
    cfg = config or AgentConfig()
    key = (id(bundle), cfg.model_dump_json(), unobserved)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is bundle:
            _CACHE.move_to_end(key)
            return hit[1]
        graph = AgentGraph(bundle, cfg).compile_unobserved() if unobserved else build_agent(cfg, bundle)
        _CACHE[key] = (bundle, graph)
        bundle.on_close("agent.api", functools.partial(_forget, bundle))  # its agents hold the build's graph
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
        return graph


def _forget(bundle: IndexBundle) -> None:
    """Drop the compiled agents of a closed bundle: their entity linkers hold its build's graph (and files)."""
    with _CACHE_LOCK:
        for key in [k for k, (held, _) in _CACHE.items() if held is bundle]:
            del _CACHE[key]


def _agent_for(
    bundle: IndexBundle, config: AgentConfig | None, chat_model: BaseChatModel | None, unobserved: bool = False
) -> CompiledStateGraph[Any, Any, Any, Any]:
    if chat_model is not None:
        return build_agent(config, bundle, chat_model=chat_model)
    return _cached_agent(bundle, config, unobserved)


def _unobserved(config: AgentConfig | None, chat_model: BaseChatModel | None, run_config: RunnableConfig | None) -> bool:
    """Nothing but the result is asked of this run: no run config (callbacks, tags, limits, overrides), no
    tracer from the environment (``LANGSMITH_TRACING`` or a tracing context: ``CallbackManager.configure``
    adds those), no model anywhere (the offline planner and no LLM stage, whose calls are counted per
    stage through the nodes' metadata). Such a run may take the graph of fewer steps."""
    cfg = config or AgentConfig()
    if run_config or chat_model is not None or cfg.planner != "offline" or cfg.stage_llm == "openai":
        return False
    return not CallbackManager.configure().handlers


def _result(state: dict[str, Any]) -> AgentResult:
    result = state.get("result")
    if not isinstance(result, AgentResult):
        raise PlannerError("the agent ended without a result; see the degraded notes in the trace")
    return result


def _check_question(question: object) -> None:
    """A clear error for a question that is not text (``ask(42)``, ``ask(b"...")``): without it the
    agent fails deep inside with an AttributeError that names no argument."""
    if not isinstance(question, str):
        hint = " (decode bytes first: question.decode('utf-8'))" if isinstance(question, bytes | bytearray) else ""
        raise ConfigError(
            f"ask: argument 'question' must be a str, got {type(question).__name__}{hint}; "
            "pass the question text, e.g. ask('which ... ?', bundle=bundle)"
        )


def ask(
    question: str,
    *,
    bundle: IndexBundle,
    config: AgentConfig | None = None,
    chat_model: BaseChatModel | None = None,
    run_config: RunnableConfig | None = None,
) -> AgentResult:
    """Answer one question: the ranked k + k' context with provenance and an answer message."""
    _check_question(question)
    graph = _agent_for(bundle, config, chat_model, _unobserved(config, chat_model, run_config))
    with bundle.pinned():  # one build per question, checked once (not per attribute access)
        return _result(graph.invoke({"question": question}, run_config))


async def aask(
    question: str,
    *,
    bundle: IndexBundle,
    config: AgentConfig | None = None,
    chat_model: BaseChatModel | None = None,
    run_config: RunnableConfig | None = None,
) -> AgentResult:
    _check_question(question)
    graph = _agent_for(bundle, config, chat_model)
    with bundle.pinned():  # the context (and so the pin) follows the awaited tasks
        return _result(await graph.ainvoke({"question": question}, run_config))
