"""What every node and stage of one compiled agent shares: the runtime.

Why an object of its own: the bundle, the tools built for a setting, the chat models, the entity
linker and the tool threads are built once and shared by every run of the graph. The nodes
(``agent.nodes``) and the optional stages (``agent.stages``) receive this object instead of the
graph, so no room below the wiring imports ``agent.graph`` (the stages once used the whole graph as
a service locator, an import circle hidden behind a type-checking import).

``settings(config)`` is the graph's AgentConfig with the call's ``configurable`` overrides applied,
so one compiled graph serves many configurations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ContextThreadPoolExecutor
from langchain_core.tools import BaseTool

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.llm.client import openai_chat_model
from agent.llm.toolcalls import visible_args
from agent.planning.offline import OfflinePlanner
from graphs.skb.profile import profile_for
from tools import make_tools

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

_T = TypeVar("_T")
_R = TypeVar("_R")

#: Threads shared by every run's tool calls (a round holds at most ``max_parallel_tools`` of them).
TOOL_THREADS = 32
_tool_pool: ContextThreadPoolExecutor | None = None
_tool_pool_lock = threading.Lock()


def shared_pool() -> ContextThreadPoolExecutor:
    """The process-wide tool threads (started on first use)."""
    global _tool_pool
    with _tool_pool_lock:
        if _tool_pool is None:
            _tool_pool = ContextThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="skb-tool")
        return _tool_pool


def run_concurrently(fn: Callable[[_T], _R], items: Sequence[_T], limit: int) -> list[_R]:
    """``[fn(x) for x in items]`` with at most ``limit`` running at once; results in item order.

    Why this shape: ``limit - 1`` workers from a process-wide pool plus the calling thread pull items
    from one queue. A pool per round started its threads every round (a measurable share of a
    round's time on a busy machine); the calling thread doing its share saves a hand-off and keeps the
    round moving even when the shared pool is busy with other questions' calls. The pool copies the
    caller's context into its workers, so tool runs are traced under the calling node.
    """
    if len(items) <= 1 or limit <= 1:
        return [fn(x) for x in items]
    results: list[_R | None] = [None] * len(items)
    queue = iter(range(len(items)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            results[i] = fn(items[i])

    futures = [shared_pool().submit(work) for _ in range(min(limit, len(items)) - 1)]
    work()
    for future in futures:
        if not future.cancel():  # a worker that never started has nothing left to do
            future.result()
    return results  # type: ignore[return-value]  # every slot was filled: the queue was drained


def make_chat_model(config: AgentConfig, bundle: IndexBundle) -> BaseChatModel:
    """The chat model behind the planner: ``ChatOpenAI`` or the offline (rule-based) planner."""
    if config.planner == "offline":
        return OfflinePlanner(bundle)
    return openai_chat_model(config)


class Runtime:
    """The shared resources of one compiled agent: bundle, settings, tools, chat models, linker, threads."""

    def __init__(self, bundle: IndexBundle, config: AgentConfig, chat_model: BaseChatModel | None = None) -> None:
        self.bundle = bundle
        planner = profile_for(bundle.skb).planner
        if "max_hops" not in config.model_fields_set and planner.relation_paths:
            # a graph planned by relation paths walks as deep as its profile says (written or induced); an
            # LLM's plan and the heuristic paths offered to it follow, unless the caller set max_hops
            config = config.model_copy(update={"max_hops": planner.max_hops})
        self.config = config
        self.chat_model = chat_model
        self._lock = threading.Lock()
        self._models: dict[Hashable, BaseChatModel] = {}
        self._linker: EntityLinker | None = None
        self._tools: dict[Hashable, dict[str, BaseTool]] = {}
        self._tool_texts: dict[int, str] = {}

    def settings(self, config: RunnableConfig | None) -> AgentConfig:
        """The graph's config with this call's ``configurable`` overrides."""
        return self.config.with_overrides((config or {}).get("configurable"))

    def pool(self) -> ContextThreadPoolExecutor:
        """The tool threads (process-wide: every runtime shares them)."""
        return shared_pool()

    def tools(self, cfg: AgentConfig, question: str) -> dict[str, BaseTool]:
        """The tools for these settings, built once and shared by every run (they are stateless: the
        question reaches them as an injected argument of each call). Rebuilding them per node cost
        more than a tool call, mostly in JSON-schema generation."""
        key = (cfg.cypher_timeout_ms, cfg.cypher_max_rows, cfg.tool_output_tokens, cfg.edge_weight_property)
        with self._lock:
            tools = self._tools.get(key)
            if tools is None:
                made = make_tools(
                    self.bundle,
                    cypher_timeout_ms=cfg.cypher_timeout_ms,
                    cypher_max_rows=cfg.cypher_max_rows,
                    budget_tokens=cfg.tool_output_tokens,
                    weight_property=cfg.edge_weight_property,
                )
                tools = self._tools[key] = {t.name: t for t in made}
        return tools

    def tool_text(self, cfg: AgentConfig, question: str) -> str:
        """The tools as the planner's system prompt lists them (one line each), built once per tool set."""
        tools = self.tools(cfg, question)
        text = self._tool_texts.get(id(tools))
        if text is None:
            lines = []
            for tool in tools.values():
                params = visible_args(tool)
                lines.append(f"- {tool.name}({', '.join(params)}): {tool.description}")
            text = self._tool_texts[id(tools)] = "\n".join(lines)
        return text

    def model(self, cfg: AgentConfig) -> BaseChatModel:
        """The planner's chat model for these settings (an injected one serves every setting)."""
        if self.chat_model is not None:
            return self.chat_model
        key = (cfg.planner, cfg.model, cfg.base_url, cfg.temperature, cfg.llm_timeout_s)
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = make_chat_model(cfg, self.bundle)
        return model

    def stage_model(self, cfg: AgentConfig) -> BaseChatModel:
        """The model the optional stages ask: the planner's, or with ``stage_llm="openai"`` the configured
        OpenAI-compatible model whichever planner plans (an injected chat model serves both)."""
        if self.chat_model is None and cfg.stage_llm == "openai":
            return self.model(cfg.model_copy(update={"planner": "openai"}))
        return self.model(cfg)

    def stage_counts_llm(self, cfg: AgentConfig) -> bool:
        """The stages have a real model to ask (``counts_llm`` for the planner's, or ``stage_llm="openai"``)."""
        return self.counts_llm(cfg) or cfg.stage_llm == "openai"

    def offline_model(self, cfg: AgentConfig) -> BaseChatModel:
        """The offline planner, used when the configured planner keeps failing (``degrade_to_offline``)."""
        with self._lock:
            model = self._models.get("offline-fallback")
            if model is None:
                model = self._models["offline-fallback"] = make_chat_model(
                    cfg.model_copy(update={"planner": "offline"}), self.bundle
                )
        return model

    def can_degrade(self, cfg: AgentConfig) -> bool:
        """A failing model may be replaced by the offline planner for the rest of the run."""
        return cfg.degrade_to_offline and (self.chat_model is not None or cfg.planner != "offline")

    def counts_llm(self, cfg: AgentConfig) -> bool:
        """The offline planner is a chat model by interface only; its calls are not LLM calls."""
        return self.chat_model is not None or cfg.planner != "offline"

    def linker(self) -> EntityLinker:
        """The entity linker of the build being served (built on first use: it loads the lexicon and phrase
        vectors); a rebuild gets a new one (the old one kept the replaced build's graph, and with it its mapped
        files, for as long as the process ran)."""
        skb = self.bundle.skb
        linker = self._linker
        if linker is None or linker.skb is not skb:
            with self._lock:
                linker = self._linker
                if linker is None or linker.skb is not skb:
                    linker = self._linker = EntityLinker(self.bundle)
        return linker
