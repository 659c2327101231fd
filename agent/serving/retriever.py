"""`SKBRetriever`: the agent (or one of its searches) as a LangChain ``BaseRetriever``.

Why a retriever: chains, ``create_retrieval_chain``, ``EnsembleRetriever`` and most LangChain RAG
code take a retriever (``retriever.invoke(question) -> list[Document]``). Without one a user wraps
``ask()`` by hand and invents the Document mapping; this is that mapping, once, with the context's
scores and provenance kept in ``metadata``.

Modes: ``agent`` (default: the whole agent, ``ask``; the Documents are its ranked context, k seeds
then up to k' SAGE neighbours) or one search of the index (``hybrid``, ``vss``, ``bm25``: ``k`` hits).
Any ``AgentConfig`` field can be set when the retriever is built, per call as a keyword
(``retriever.invoke(q, k=5)``) or through LangChain's ``configurable`` (a chain's config reaches the
retriever). Callbacks pass through: the agent's runs are children of the retriever's run, so the
local tracer (``trace=True``) records a retriever call as ``skb ask`` records a question.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    BaseCallbackHandler,
    BaseCallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config, run_in_executor
from pydantic import Field

from agent.config import AgentConfig, is_runtime_key
from agent.serving.base import BundleOwner
from graphs.errors import ConfigError
from graphs.text_safety import clean_text

if TYPE_CHECKING:

    from agent.results import AgentResult
    from graphs.bundle import IndexBundle
    from graphs.skb.model import SKB

RetrieverMode = Literal["agent", "hybrid", "vss", "bm25"]
MODES: tuple[str, ...] = get_args(RetrieverMode)
FusionName = Literal["minmax", "rrf", "dice"]
#: Settings of the retriever itself that a call may override (besides every AgentConfig field).
CALL_FIELDS = ("k", "mode", "label", "fusion")


class SKBRetriever(BundleOwner, BaseRetriever):
    """Documents from an index: ``page_content`` is the node's text, ``metadata`` holds ``key``,
    ``label``, ``name``, ``score``, ``rank``, ``origin`` (seed / sage / fallback), ``provenance``
    (the tool calls that found the node: tool, step, query) and ``mode``.

    Build it from an index directory (opened here, closed by ``close()``) or an open `IndexBundle`
    (left open: the caller owns it)::

        retriever = SKBRetriever(".skb/hpo", k=5, policy="never")
        docs = retriever.invoke("Which genes are associated with Marfan syndrome?")

    ``k`` is the agent's seed count (``AgentConfig.k``) in ``agent`` mode and the number of hits in the
    search modes; in ``agent`` mode up to ``k_prime`` SAGE neighbours follow the seeds (``k_prime=0``:
    exactly the seeds). ``label`` restricts the search modes to one node type; ``fusion`` is the
    hybrid fusion (``minmax``, ``rrf``, ``dice``). ``chat_model`` replaces the planner model (default:
    ``AgentConfig.planner``).
    """

    bundle: Any = Field(description="the IndexBundle the retriever reads")
    mode: RetrieverMode = "agent"
    k: int = Field(default=20, ge=1, le=1000, description="agent: seed count (AgentConfig.k); search: hits")
    label: str | None = Field(default=None, description="search modes: only nodes of this type")
    fusion: FusionName = "minmax"
    config: AgentConfig = Field(default_factory=AgentConfig, description="the agent's settings (k comes from `k`)")
    chat_model: Any = Field(default=None, description="planner chat model replacing AgentConfig.planner's")
    trace: bool = Field(default=False, description="record each call in the index's local trace database")

    def __init__(self, index_dir_or_bundle: Path | str | IndexBundle | None = None, **kwargs: Any) -> None:
        index_dir = kwargs.pop("index_dir", None)
        source = index_dir_or_bundle if index_dir_or_bundle is not None else kwargs.pop("bundle", None) or index_dir
        if source is None:
            raise ConfigError(
                "SKBRetriever needs an index: SKBRetriever('.skb/NAME') or SKBRetriever(bundle=IndexBundle.open(...)); "
                "build one with `skb index`"
            )
        if not isinstance(source, str | Path) and "store" in kwargs:
            raise ConfigError("store= applies when the retriever opens an index directory; open the bundle with it")
        store = kwargs.pop("store", None)
        base = kwargs.pop("config", None)
        if base is not None and not isinstance(base, AgentConfig):
            raise ConfigError(f"config must be an AgentConfig, got {type(base).__name__}")
        own, agent_fields = _split(kwargs, allow=set(type(self).model_fields) - {"bundle", "config"})
        if "k" in own:
            agent_fields = {**agent_fields, "k": own["k"]}  # checked once, where every setting is (AgentConfig)
        config = (base or AgentConfig()).with_overrides(agent_fields, trusted=True)  # the operator's own settings
        own["k"] = config.k  # one k: the config's when only a config was given
        self._init_over(source, store=store, config=config, **own)

    # -- LangChain entry points ---------------------------------------------------------------
    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """``configurable`` entries naming a retriever or AgentConfig setting become call overrides
        (keywords win); the local tracer joins the callbacks when ``trace`` is on."""
        config, kwargs = self._prepare(config, kwargs)
        return super().invoke(input, config, **kwargs)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        config, kwargs = self._prepare(config, kwargs)
        return await super().ainvoke(input, config, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        mode, k, label, fusion, config = self._settings(kwargs)
        if mode != "agent":
            return self._search(query, mode, k, label, fusion)
        from agent.api import ask

        result = ask(
            query,
            bundle=self.bundle,
            config=config,
            chat_model=self.chat_model,
            run_config={"callbacks": run_manager.get_child(), "run_name": "skb-agent"},
        )
        return self._documents(result)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        mode, k, label, fusion, config = self._settings(kwargs)
        if mode != "agent":
            return await run_in_executor(None, self._search, query, mode, k, label, fusion)
        from agent.api import aask

        result = await aask(
            query,
            bundle=self.bundle,
            config=config,
            chat_model=self.chat_model,
            run_config={"callbacks": run_manager.get_child(), "run_name": "skb-agent"},
        )
        return self._documents(result)

    # -- internals ------------------------------------------------------------------------------
    def _prepare(self, config: RunnableConfig | None, kwargs: dict[str, Any]) -> tuple[RunnableConfig, dict[str, Any]]:
        cfg = ensure_config(config)
        configurable = cfg.get("configurable") or {}
        # every entry but LangGraph's and LangChain's own: a misspelt or out-of-range setting is an error here as
        # in the graph's configurable, never silently dropped (sections such as {"clause": {...}} included)
        merged = {str(key): value for key, value in configurable.items() if not is_runtime_key(str(key))}
        merged.update(kwargs)
        if self.trace:
            from agent.tracing.tracer import tracer_for

            cfg = {**cfg, "callbacks": _with_handler(cfg.get("callbacks"), tracer_for(self.bundle.index_dir))}
        return cfg, merged

    def _settings(self, kwargs: dict[str, Any]) -> tuple[str, int, str | None, str, AgentConfig]:
        """This call's mode, k, label, fusion and agent config, each override checked."""
        own, agent_fields = _split(kwargs, allow=set(CALL_FIELDS))
        mode = str(own.get("mode", self.mode))
        if mode not in MODES:
            raise ConfigError(f"unknown retriever mode {mode!r}; use one of {', '.join(MODES)}")
        if isinstance(own.get("k"), bool):
            raise ConfigError("k must be an integer between 1 and 1000, got a bool")
        fusion = str(own.get("fusion", self.fusion))
        if fusion not in get_args(FusionName):
            raise ConfigError(f"unknown fusion {fusion!r}; use minmax, rrf or dice")
        label = own.get("label", self.label)
        # a call's settings, k among them, checked where every setting is; not trusted (base_url)
        config = self.config.with_overrides({**agent_fields, "k": own.get("k", self.k)})
        return mode, config.k, label, fusion, config

    def _search(self, query: str, mode: str, k: int, label: str | None, fusion: str) -> list[Document]:
        hits = self.bundle.search(
            query, mode=mode, k=k, label=label, weight=self.config.hybrid_weight, fusion=fusion
        )
        return [
            self._document(
                hit.key, hit.label, hit.name, hit.score, rank, "seed",
                [{"tool": mode, "step": 0, "query": query}], mode,
            )
            for rank, hit in enumerate(hits, 1)
        ]

    def _documents(self, result: AgentResult) -> list[Document]:
        return [
            self._document(
                item.key, item.label, item.name, item.score, item.rank, item.origin,
                [p.model_dump() for p in item.provenance], "agent",
            )
            for item in result.context
        ]

    def _document(
        self, key: str, label: str, name: str, score: float, rank: int, origin: str,
        provenance: list[dict[str, Any]], mode: str,
    ) -> Document:
        text = _node_text(self.bundle.skb, key)
        return Document(
            page_content=clean_text(text or name),
            id=key,
            metadata={
                "key": key, "label": label, "name": name, "score": float(score), "rank": int(rank),
                "origin": origin, "provenance": provenance, "mode": mode,
            },
        )

_texts_lock = threading.Lock()
_texts: weakref.WeakKeyDictionary[SKB, dict[str, str]] = weakref.WeakKeyDictionary()
#: Node texts kept per graph (then that graph's cache starts over): a Document's text is built from the node's
#: fields and, for some types, the names of many neighbours (about 1 ms per node on HPO), and the same nodes
#: come back question after question.
TEXT_CACHE_SIZE = 100_000


def _node_text(skb: SKB, key: str) -> str:
    """The node's text (what the index embedded), built once per node and graph; '' for a key not in it."""
    with _texts_lock:
        texts = _texts.get(skb)
        if texts is None or len(texts) >= TEXT_CACHE_SIZE:
            texts = _texts[skb] = {}
        text = texts.get(key)
    if text is None:
        text = skb.node_text(key) if key in skb.nodes else ""
        with _texts_lock:
            texts[key] = text
    return text


#: The names an agent setting may be given by: a field or its ``section.key`` (``AgentConfig.setting_names``).
AGENT_SETTINGS = frozenset(AgentConfig.setting_names())
#: The sections a setting may be given in (``{"clause": {"candidates": 3}}``).
SECTIONS = frozenset(AgentConfig.sections())


def _split(kwargs: dict[str, Any], *, allow: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the retriever's own settings, AgentConfig fields); anything else is an error naming the valid names."""
    own = {key: value for key, value in kwargs.items() if key in allow}
    agent_fields = {
        key: value for key, value in kwargs.items()
        if key not in allow and (key in AGENT_SETTINGS or (key in SECTIONS and isinstance(value, Mapping)))
    }
    unknown = sorted(set(kwargs) - set(own) - set(agent_fields))
    if unknown:
        raise ConfigError(
            f"unknown SKBRetriever setting(s) {', '.join(unknown)}; use {', '.join(sorted(allow))} "
            "or an AgentConfig setting (a field or section.key; see agent/config.py)"
        )
    return own, agent_fields


def _with_handler(callbacks: Any, handler: BaseCallbackHandler) -> Any:
    """``callbacks`` (None, a list or a manager) with ``handler`` added once, inherited by child runs."""
    if callbacks is None:
        return [handler]
    if isinstance(callbacks, list):
        return callbacks if handler in callbacks else [*callbacks, handler]
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        if handler not in manager.handlers:
            manager.add_handler(handler, inherit=True)
        return manager
    return callbacks


__all__ = ["MODES", "RetrieverMode", "SKBRetriever"]
