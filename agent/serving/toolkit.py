"""`SKBToolkit`: the retrieval tools (and the whole agent as one tool) for *other* agents.

Why a toolkit: a LangChain/LangGraph agent someone else writes should get our tools with one line,
``SKBToolkit(".skb/hpo").get_tools()``, and bind them to its own model. The MCP server exposes the
same list, so an MCP client and a LangChain agent see identical names, descriptions and schemas.
The agent-internal ``finish`` tool is left out by default: it only makes sense inside our loop.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from agent.config import AgentConfig
    from graphs.bundle import IndexBundle

ASK_NAME = "ask"
ASK_DESCRIPTION = (
    "Answer a question over the knowledge base with the full retrieval agent (entity linking, "
    "relation-path planning, tool calls, SAGE expansion). Returns JSON with 'answer' and a ranked "
    "'context' list of nodes (key, label, name, score, rank, origin, provenance). Slower than the "
    "single tools; use it when you want ranked answer nodes rather than raw search hits."
)
DEFAULT_TOOLS = ("semantic_search", "search_nodes", "cypher")


class AskArgs(BaseModel):
    question: str = Field(min_length=1, max_length=4000, description="the question, in natural language")
    k: int | None = Field(default=None, ge=1, le=1000, description="how many seed nodes to return (default 20)")
    k_prime: int | None = Field(default=None, ge=0, le=1000, description="how many SAGE neighbors to add")


class SKBToolkit(BaseToolkit):
    """The tools over one index. Pass an index directory (opened here, closed by ``close()``) or an
    open `IndexBundle` (left open: the caller owns it)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bundle: Any = Field(description="the IndexBundle the tools read")
    tool_names: tuple[str, ...] = DEFAULT_TOOLS
    include_ask: bool = True
    agent_config: Any = Field(default=None, description="AgentConfig for the ask tool (default AgentConfig())")
    callbacks: list[BaseCallbackHandler] | None = Field(
        default=None, description="callbacks for the ask tool's agent runs (default: local tracing)"
    )

    _owns_bundle: bool = PrivateAttr(default=False)
    _graph: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, index_dir_or_bundle: Path | str | IndexBundle, **kwargs: Any) -> None:
        owns = isinstance(index_dir_or_bundle, str | Path)
        if isinstance(index_dir_or_bundle, str | Path):
            from graphs.bundle import IndexBundle

            bundle: Any = IndexBundle.open(Path(index_dir_or_bundle))
        else:
            bundle = index_dir_or_bundle
        super().__init__(bundle=bundle, **kwargs)  # type: ignore[call-arg]  # pydantic fields
        self._owns_bundle = owns

    # -- tools -------------------------------------------------------------------------------
    def get_tools(self) -> list[BaseTool]:
        """The retrieval tools in a stable order (semantic_search, search_nodes, cypher), then ``ask``.
        ``cypher`` is left out when the index has no graph store (built with ``--store none``)."""
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
        tools: list[BaseTool] = [by_name[n] for n in wanted]
        if self.include_ask:
            tools.append(self.ask_tool())
        return tools

    def ask_tool(self) -> BaseTool:
        def run(question: str, k: int | None = None, k_prime: int | None = None) -> str:
            return json.dumps(self.ask(question, k=k, k_prime=k_prime), ensure_ascii=False)

        return StructuredTool.from_function(run, name=ASK_NAME, description=ASK_DESCRIPTION, args_schema=AskArgs)

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
        from agent.results import AgentResult
        from agent.tracing.tracer import callbacks_for
        from graphs.errors import PlannerError

        overrides: dict[str, Any] = {}
        if k is not None:
            overrides["k"] = k
        if k_prime is not None:
            overrides["k_prime"] = k_prime
        callbacks = self.callbacks if self.callbacks is not None else callbacks_for(self.bundle.index_dir)
        state = self.graph().invoke(
            {"question": question},
            {"configurable": overrides, "callbacks": callbacks, "run_name": "skb-agent.ask"},
        )
        result = state.get("result")
        if not isinstance(result, AgentResult):
            raise PlannerError("the agent ended without a result; see `skb trace list` for the run")
        return result.model_dump(mode="json")

    def close(self) -> None:
        if self._owns_bundle:
            self.bundle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


__all__ = ["ASK_NAME", "DEFAULT_TOOLS", "AskArgs", "SKBToolkit", "tool_input_schema"]
