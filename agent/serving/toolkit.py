"""`SKBToolkit`: the retrieval tools (and the whole agent as one tool) for *other* agents.

Why a toolkit: a LangChain/LangGraph agent someone else writes should get our tools with one line,
``SKBToolkit(".skb/hpo").get_tools()``, and bind them to its own model. The MCP server exposes the
same list, so an MCP client and a LangChain agent see identical names, descriptions and schemas.
The agent-internal ``finish`` tool is left out by default: it only makes sense inside our loop.

Why ``ask`` comes first and the others say "follow-up": a tool-calling model, small ones above all,
picks the first tool whose description matches the user's message. Measured with a 1.5B model, a
toolkit that listed ``semantic_search`` first made it search with the whole question and answer
from raw text hits, never calling ``ask`` (which links entities, walks typed edges and ranks). So
``ask`` is listed first and says it answers a whole question; the primitives keep their own
descriptions (our own planner reads those too) with a prefix, added only here, naming them as the
tools for follow-ups on keys ``ask`` returned. ``ask``'s text result is compact (top answers, keys,
one evidence line: `agent.serving.answers`); the full ranked context is the artifact, and the text on
request (``detail="full"``, an enum whose default comes first: a small model fills every optional
argument, and given a boolean ``full`` it set it to true and read 1,500 tokens instead of 400).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool
from pydantic import BaseModel, Field, PrivateAttr

from agent.serving.answers import ASK_OUTPUT_TOKENS, TOP_ANSWERS
from agent.serving.base import BundleOwner

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from agent.config import AgentConfig
    from agent.results import AgentResult
    from graphs.bundle import IndexBundle

ASK_NAME = "ask"
ASK_DESCRIPTION = (
    "Answer a whole question over the knowledge graph. Call this first, with the user's question as written: "
    "it finds the entities the question mentions, follows the typed relationships between them and ranks the "
    "answer nodes. Returns the top answers, best first, each with name, key, label and one line of evidence. "
    "Use the other tools only for follow-ups on the keys it returns."
)
#: A system prompt for an agent over these tools (also the MCP server's instructions). Short and imperative:
#: measured with a 1.5B model, a longer "you answer questions..." prompt made it write a plan instead of
#: calling a tool, and without any prompt it called ``ask`` again instead of replying with its answer.
AGENT_INSTRUCTIONS = (
    "Call the ask tool with the user's whole question. Then reply to the user with the top_answer from its "
    "result (and the next answers if the question asks for several). Use the other tools only for follow-ups."
)
#: Prefix of the primitives' descriptions in the toolkit (not in our own loop, which has no ``ask``).
FOLLOW_UP_PREFIX = "Follow-up tool, for after `ask` (for a whole question call `ask`). "
DEFAULT_TOOLS = ("semantic_search", "search_nodes", "cypher")
#: Step limit of one ``ask`` run. Set explicitly because LangChain hands a caller's run config down to
#: every child runnable: inside another agent (whose limit fits its own few model turns) our graph
#: would inherit that limit and stop mid-question.
ASK_RECURSION_LIMIT = 200
#: Times a question is asked again when a rebuild was swapped in while it ran (a rebuild takes minutes).
RELOAD_RETRIES = 2
T = TypeVar("T")


#: Longest question ``ask`` takes (characters): the tool's and `skb serve`'s /ask limit.
QUESTION_MAX_CHARS = 4000
#: Most answer nodes (k) and similar neighbours (k') one ``ask`` ranks.
MAX_K = 1000


class AskArgs(BaseModel):
    question: str = Field(min_length=1, max_length=QUESTION_MAX_CHARS, description="the user's whole question, as asked")
    k: int | None = Field(default=None, ge=1, le=MAX_K, description="how many answer nodes to rank (default 20)")
    k_prime: int | None = Field(default=None, ge=0, le=MAX_K, description="how many similar neighbours to add")
    detail: Literal["answers", "full"] = Field(
        default="answers",
        description="answers: the top answers (use this); full: the whole ranked list, only when the user asks for it",
    )


class SKBToolkit(BundleOwner, BaseToolkit):
    """The tools over one index. Pass an index directory (opened here, closed by ``close()``) or an
    open `IndexBundle` (left open: the caller owns it)."""

    bundle: Any = Field(description="the IndexBundle the tools read")
    tool_names: tuple[str, ...] = DEFAULT_TOOLS
    include_ask: bool = True
    agent_config: Any = Field(
        default=None,
        description="the agent's settings: an AgentConfig, or a mapping of settings (field, section.key or section) "
        "checked as `skb ask --set` checks them; default AgentConfig()",
    )
    callbacks: list[BaseCallbackHandler] | None = Field(
        default=None, description="callbacks for the ask tool's agent runs (default: local tracing)"
    )
    ask_output_tokens: int = Field(
        default=ASK_OUTPUT_TOKENS, ge=50, le=100_000, description="token budget of ask's compact text result"
    )
    ask_top: int = Field(default=TOP_ANSWERS, ge=1, le=100, description="answers ask's compact text lists at most")

    _graph: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, index_dir_or_bundle: Path | str | IndexBundle, **kwargs: Any) -> None:
        if "agent_config" in kwargs:
            kwargs["agent_config"] = _agent_config(kwargs["agent_config"])  # before the index is opened
        self._init_over(index_dir_or_bundle, **kwargs)

    @property
    def instructions(self) -> str:
        """A system prompt that leads a model through these tools: ``create_agent(model, tools,
        system_prompt=toolkit.instructions)``."""
        return AGENT_INSTRUCTIONS if self.include_ask else ""

    # -- tools -------------------------------------------------------------------------------
    def get_tools(self) -> list[BaseTool]:
        """``ask`` first (unless ``include_ask=False``), then the retrieval tools in a stable order
        (semantic_search, search_nodes, cypher), their descriptions marked as follow-ups when ``ask`` is
        there. ``cypher`` is left out when the index has no graph store (built with ``--store none``)."""
        from tools import make_tools

        wanted = list(self.tool_names)
        if getattr(self.bundle, "store_kind", None) == "none" and "cypher" in wanted:
            wanted.remove("cypher")
        cfg = self._config()
        by_name = {
            t.name: t
            for t in make_tools(
                self.bundle,
                cypher_timeout_ms=cfg.cypher_timeout_ms,
                cypher_max_rows=cfg.cypher_max_rows,
                budget_tokens=cfg.tool_output_tokens,
                weight_property=cfg.edge_weight_property,
            )
        }
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            from graphs.errors import ConfigError

            raise ConfigError(f"unknown tool name(s) {unknown}; choose from {sorted(by_name)}")
        tools: list[BaseTool] = [self.ask_tool()] if self.include_ask else []
        for name in wanted:
            tool = by_name[name]  # made fresh by make_tools: ours to edit
            if self.include_ask:
                tool.description = FOLLOW_UP_PREFIX + tool.description
            func = getattr(tool, "func", None)
            if func is not None:  # each call on one build: a server answers calls while rebuilds are swapped in
                tool.func = self._on_one_build_of(func)  # type: ignore[attr-defined]
            tools.append(tool)
        return tools

    def _on_one_build_of(self, func: Callable[..., T]) -> Callable[..., T]:
        """``func`` run on one build of the index, pinned (`IndexBundle.pinned`); run again on the new build when
        the build was replaced meanwhile (another caller followed it, or it is no longer the one on disk), whatever
        the first run returned or raised.

        Why: a tool reads several parts (vectors, the graph, the store); unpinned, a call that a rebuild overtook
        read some from each build (a key found by one and looked up in the other) or queried a store connection
        the reload had closed."""

        def overtaken(reloads: int) -> bool:  # inside the pin: the pinned build against the one on disk
            replaced = getattr(self.bundle, "replaced", None)
            return getattr(self.bundle, "reloads", 0) != reloads or (replaced is not None and replaced())

        def call(*args: Any, **kwargs: Any) -> T:
            for attempt in range(RELOAD_RETRIES + 1):
                reloads = getattr(self.bundle, "reloads", 0)
                last = attempt == RELOAD_RETRIES
                with self.bundle.pinned():
                    try:
                        out = func(*args, **kwargs)
                    except Exception:
                        # the pinned build was replaced under the run (IndexMismatchError, a closed store
                        # connection, however a layer wrapped it)
                        if last or not overtaken(reloads):
                            raise
                        continue
                    again = not last and overtaken(reloads)
                if not again:
                    return out
            raise AssertionError("unreachable")  # pragma: no cover

        return call

    def ask_tool(self) -> BaseTool:
        """The whole agent as one tool: compact text for the model (`agent.serving.answers`), the full
        `AgentResult` dump as the artifact."""

        def run(
            question: str, k: int | None = None, k_prime: int | None = None, detail: str = "answers"
        ) -> tuple[str, dict[str, Any]]:
            text, result = self.answer(question, k=k, k_prime=k_prime, detail=detail)
            return text, result.model_dump(mode="json")

        return StructuredTool.from_function(
            run, name=ASK_NAME, description=ASK_DESCRIPTION, args_schema=AskArgs, response_format="content_and_artifact"
        )

    # -- the whole agent ---------------------------------------------------------------------
    def _config(self) -> AgentConfig:
        from agent.config import AgentConfig

        return self.agent_config if self.agent_config is not None else AgentConfig()

    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The agent graph, compiled once and shared by every ``ask`` call (it is reentrant)."""
        with self._lock:
            if self._graph is None:
                from agent.api import build_agent

                self._graph = build_agent(self._config(), self.bundle)
            return self._graph

    def ask(self, question: str, *, k: int | None = None, k_prime: int | None = None) -> dict[str, Any]:
        """The AgentResult of one question as a JSON-ready dict."""
        return self.answer(question, k=k, k_prime=k_prime)[1].model_dump(mode="json")

    def answer(
        self,
        question: str,
        *,
        k: int | None = None,
        k_prime: int | None = None,
        detail: str = "answers",
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[str, AgentResult]:
        """One question on one build: the compact text (``detail="full"``: the whole ranking) and the result.

        ``settings`` are agent settings for this call (field or dotted names, checked by
        ``AgentConfig.with_overrides``). The run is pinned to the build it starts on; when a rebuild is
        swapped in while it runs (the bundle reloaded meanwhile), it is asked again on the new build, so
        a server following rebuilds neither fails the question nor answers it from two builds."""
        if settings:
            self._config().with_overrides(settings, runtime_keys=False)  # every name a setting: a typo is an error
        result, linked = self._on_one_build_of(self._run)(question, k=k, k_prime=k_prime, settings=settings)
        return self._text(result, linked, k, detail), result

    def _text(self, result: AgentResult, linked: list[dict[str, Any]], k: int | None, detail: str) -> str:
        from agent.serving.answers import compact_answers, full_context

        if detail == "full":
            return full_context(result, budget_tokens=self._config().tool_output_tokens)
        top = min(self.ask_top, k) if k is not None else self.ask_top
        return compact_answers(result, self.bundle.skb, linked, top=top, budget_tokens=self.ask_output_tokens)

    def _run(
        self,
        question: str,
        *,
        k: int | None = None,
        k_prime: int | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[AgentResult, list[dict[str, Any]]]:
        """One agent run: its result and the entities it linked (the evidence of the compact answers)."""
        from agent.results import AgentResult
        from agent.tracing.tracer import callbacks_for
        from graphs.errors import PlannerError

        overrides: dict[str, Any] = dict(settings or {})
        if k is not None:
            overrides["k"] = k
        if k_prime is not None:
            overrides["k_prime"] = k_prime
        callbacks = self.callbacks if self.callbacks is not None else callbacks_for(self.bundle.index_dir)
        # node by node: the linked entities are internal state, not part of the graph's output
        result: Any = None
        linked: list[dict[str, Any]] = []
        for chunk in self.graph().stream(
            {"question": question},
            {
                "configurable": overrides,
                "callbacks": callbacks,
                "run_name": "skb-agent.ask",
                "recursion_limit": ASK_RECURSION_LIMIT,
            },
            stream_mode="updates",
        ):
            for update in chunk.values():
                if not isinstance(update, dict):
                    continue
                if isinstance(update.get("linked_entities"), list):
                    linked = list(update["linked_entities"])
                if "result" in update:
                    result = update["result"]
        if not isinstance(result, AgentResult):
            raise PlannerError("the agent ended without a result; see `skb trace list` for the run")
        return result, linked


def _agent_config(value: Any) -> AgentConfig | None:
    """``agent_config`` as an AgentConfig: a mapping of settings is checked where every entry point checks
    them (``AgentConfig.with_overrides``: a ConfigError naming the setting and its allowed range)."""
    from agent.config import AgentConfig
    from graphs.errors import ConfigError

    if value is None or isinstance(value, AgentConfig):
        return value
    if isinstance(value, Mapping):
        return AgentConfig().with_overrides(value, runtime_keys=False, trusted=True)
    raise ConfigError(f"agent_config must be an AgentConfig or a mapping of its settings, got {type(value).__name__}")


def tool_input_schema(tool: BaseTool) -> dict[str, Any]:
    """The JSON schema a model (or MCP client) sees for ``tool``: injected args (step, question) removed."""
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        out = schema.model_json_schema()
    else:
        out = dict(schema)  # type: ignore[arg-type]  # a JSON-schema dict already
    out.pop("title", None)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


__all__ = [
    "AGENT_INSTRUCTIONS",
    "ASK_DESCRIPTION",
    "ASK_NAME",
    "DEFAULT_TOOLS",
    "FOLLOW_UP_PREFIX",
    "AskArgs",
    "SKBToolkit",
    "tool_input_schema",
]
