"""The agent as a chat assistant: a graph factory for `langgraph dev` / LangGraph Server, and an
in-process chat graph with multi-turn memory in SQLite.

Why both: `langgraph.json` points at `make_graph`, which returns the graph *without* a checkpointer
(LangGraph Server persists threads itself and refuses graphs that bring their own). Library callers
and the examples use `chat_graph(...)`, which compiles the same graph with a `SqliteSaver`, so a
thread id keeps the conversation across calls and processes.

Conversation semantics (what a chat UI sends): each turn is ``{"messages": [HumanMessage(q)]}``
(or ``{"question": q}``); the newest human message is the question; the answer comes back as an
AI message appended to the thread, and ``result`` holds the structured AgentResult of that turn.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from agent.config import AgentConfig
from agent.graph import AgentGraph
from agent.state import AgentState
from graphs.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph.state import CompiledStateGraph

    from graphs.bundle import IndexBundle

INDEX_DIR_ENV = "SKB_INDEX_DIR"
THREADS_DB_ENV = "SKB_THREADS_DB"
THREADS_FILE = "threads.sqlite"

#: Types of ours that live in checkpointed state; the serializer must be allowed to restore them.
CHECKPOINT_TYPES = (
    ("agent.results", "AgentResult"),
    ("agent.results", "ContextItem"),
    ("agent.results", "Provenance"),
    ("agent.results", "StageUsage"),
)


class ConversationalAgentGraph(AgentGraph):
    """The agent graph with chat-thread semantics for the question.

    With a checkpointer, the state of the previous turn is still there when the next turn starts:
    ``question`` would be the old one, and a ``{"question": ...}`` turn would not be added to the
    messages. This makes the newest human message the question (or appends the question as one).
    """

    def link_entities(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        messages = list(state.get("messages") or [])
        appended: list[HumanMessage] = []
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and str(last.text).strip():
            question = str(last.text).strip()
        else:
            question = (state.get("question") or "").strip()
            if messages and question:
                appended = [HumanMessage(question)]
        update = super().link_entities({**state, "question": question} if question else state, config)
        if appended:
            update["messages"] = appended
        return update


def build_chat_agent(
    bundle: IndexBundle,
    config: AgentConfig | None = None,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    chat_model: BaseChatModel | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent graph with chat semantics; pass a checkpointer for memory across turns."""
    graph = ConversationalAgentGraph(bundle, config or AgentConfig(), chat_model)
    return graph.compile(checkpointer=checkpointer) if checkpointer is not None else graph.compile()


def sqlite_checkpointer(path: Path | str) -> SqliteSaver:
    """A SQLite checkpointer (one file, many threads) whose serializer may restore our result types."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=10.0)
        conn.execute("PRAGMA journal_mode=WAL")
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot open the thread database {path}: {exc}; pass a writable path") from exc
    serde = JsonPlusSerializer(allowed_msgpack_modules=list(CHECKPOINT_TYPES))
    saver = SqliteSaver(conn, serde=serde)
    saver.setup()
    return saver


def default_index_dir() -> Path:
    """``$SKB_INDEX_DIR``: the server factories take no arguments, so the index comes from the environment."""
    value = os.environ.get(INDEX_DIR_ENV)
    if not value:
        raise ConfigError(
            f"no index directory: set {INDEX_DIR_ENV} to an index built by `skb index` "
            f"(e.g. {INDEX_DIR_ENV}=.skb/hpo langgraph dev) or pass index_dir"
        )
    return Path(value)


def default_threads_db(index_dir: Path) -> Path:
    env = os.environ.get(THREADS_DB_ENV)
    return Path(env).expanduser() if env else index_dir / THREADS_FILE


def chat_graph(
    index_dir: Path | str | None = None,
    *,
    bundle: IndexBundle | None = None,
    threads_db: Path | str | None = None,
    config: AgentConfig | None = None,
    chat_model: BaseChatModel | None = None,
    tracing: bool | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The chat agent with SQLite memory (default `<index_dir>/threads.sqlite`) and local tracing
    (default on; `SKB_TRACING=0` or ``tracing=False`` turns it off). Call it with
    ``config={"configurable": {"thread_id": "..."}}``."""
    from agent.tracing.tracer import callbacks_for

    if bundle is None:
        bundle = _bundle_for(Path(index_dir) if index_dir is not None else default_index_dir())
    root = Path(bundle.index_dir)
    saver = sqlite_checkpointer(Path(threads_db) if threads_db is not None else default_threads_db(root))
    graph = build_chat_agent(bundle, config, checkpointer=saver, chat_model=chat_model)
    callbacks = callbacks_for(root, enabled=tracing)
    return graph.with_config(callbacks=callbacks) if callbacks else graph


# -- the factory langgraph.json points at --------------------------------------------------------

_BUNDLES: dict[Path, IndexBundle] = {}
_GRAPHS: dict[Path, CompiledStateGraph[Any, Any, Any, Any]] = {}
_LOCK = threading.Lock()


def _bundle_for(index_dir: Path) -> IndexBundle:
    from graphs.bundle import IndexBundle

    key = index_dir.resolve()
    with _LOCK:
        bundle = _BUNDLES.get(key)
        if bundle is None:
            bundle = _BUNDLES[key] = IndexBundle.open(index_dir)
        return bundle


def load_graph(index_dir: Path | str | None = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The chat agent over ``index_dir`` (default `$SKB_INDEX_DIR`; unset is a ConfigError) without a
    checkpointer, with local tracing; built once per index and shared (the graph is reentrant)."""
    from agent.tracing.tracer import callbacks_for

    root = Path(index_dir) if index_dir is not None else default_index_dir()
    key = root.resolve()
    with _LOCK:
        graph = _GRAPHS.get(key)
    if graph is None:
        graph = build_chat_agent(_bundle_for(root))
        callbacks = callbacks_for(root)
        if callbacks:
            graph = graph.with_config(callbacks=callbacks)
        with _LOCK:
            graph = _GRAPHS.setdefault(key, graph)
    return graph


async def make_graph(config: RunnableConfig | None = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Graph factory for LangGraph Server (`langgraph dev`, see langgraph.json). The server calls
    it on its event loop for every run, so the first (blocking) load runs in a worker thread.
    Persistence is the server's; per-run settings go in ``configurable`` (any AgentConfig field,
    e.g. ``{"k": 10, "planner": "openai"}``)."""
    return await asyncio.to_thread(load_graph)


__all__ = [
    "CHECKPOINT_TYPES",
    "ConversationalAgentGraph",
    "build_chat_agent",
    "chat_graph",
    "load_graph",
    "make_graph",
    "sqlite_checkpointer",
]
