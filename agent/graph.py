"""The agent as a LangGraph state machine: the wiring.

    link_entities -> plan -> act (x T, planner tool calls) -> [fallback] -> [constrain] -> [rerank]
        -> expand (SAGE, k') -> finalize

Why this shape (SPARK/PASemiQA planning + SAGE expansion): linking and planning ground the
question in the schema before any search; the act loop lets a planner (LLM or offline rules)
walk explicit relations, search by meaning, or query precisely; the fallback guarantees an
answer when the plan finds nothing; SAGE adds the k' best neighbors of the top-k seeds,
which recovers answers one hop away from what the planner found.

The node bodies live in ``agent.nodes`` (by what they do) and the optional stages in
``agent.stages``; both receive the ``Runtime`` (``agent.runtime``: bundle, tools, models, linker,
threads, settings). This module keeps thin adapters (methods, so a subclass can wrap one node, as
the chat server's graph does) and the edges at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from agent.config import AgentConfig
from agent.nodes import act, finish, link
from agent.nodes import plan as plan_node
from agent.runtime import Runtime
from agent.stages.refine import Next, constrain, rerank_seeds
from agent.state import AgentInput, AgentOutput, AgentState

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from graphs.bundle import IndexBundle

#: The nodes of one planner round (the ``act`` stage).
ACT_NODES = ("call_planner", "run_tools", "observe")


class AgentGraph:
    """The agent's nodes over one shared ``Runtime``, and their wiring (``compile``)."""

    def __init__(
        self,
        bundle: IndexBundle,
        config: AgentConfig,
        chat_model: BaseChatModel | None = None,
        *,
        runtime: Runtime | None = None,
    ) -> None:
        """``runtime``: shared resources built elsewhere (a test's or a server's); by default one is built
        for ``bundle``, ``config`` and ``chat_model``."""
        self.runtime = runtime if runtime is not None else Runtime(bundle, config, chat_model)

    @property
    def bundle(self) -> IndexBundle:
        return self.runtime.bundle

    @property
    def config(self) -> AgentConfig:
        """The graph's settings (the profile's ``max_hops`` applied); calls override them per run."""
        return self.runtime.config

    # -- nodes (agent.nodes, agent.stages) ----------------------------------------------------
    def link_entities(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return link.link_entities(self.runtime, state, config)

    def plan(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return plan_node.plan(self.runtime, state, config)

    def call_planner(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return act.call_planner(self.runtime, state, config)

    def run_tools(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return act.run_tools(self.runtime, state, config)

    def observe(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return act.observe(self.runtime, state, config)

    def fallback(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return finish.fallback(self.runtime, state, config)

    def constrain(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """AF-Retriever constraints with incremental scope expansion (``agent.stages.refine.constrain``)."""
        return constrain(self.runtime, state, config, self.runtime.settings(config))

    def rerank(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """LLM reranking of the top seeds (``agent.stages.refine.rerank_seeds``)."""
        return rerank_seeds(self.runtime, state, config, self.runtime.settings(config))

    def expand(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return finish.expand(self.runtime, state, config)

    def finalize(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return finish.finalize(self.runtime, state, config)

    # -- routes ---------------------------------------------------------------------------------
    def route(
        self, state: AgentState, config: RunnableConfig
    ) -> Literal["call_planner", "fallback", "constrain", "rerank", "expand"]:
        return act.route(self.runtime, state, config)

    def route_refine(self, state: AgentState, config: RunnableConfig) -> Next:
        return act.route_refine(self.runtime, state, config)

    def route_after_constraints(self, state: AgentState, config: RunnableConfig) -> Next:
        return act.route_after_constraints(self.runtime, state, config)

    # -- assembly ---------------------------------------------------------------------------
    def compile(self, **compile_kwargs: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The state machine; input, output and config schemas let LangGraph Studio show the knobs."""
        # AgentConfig as the context schema: LangGraph Studio lists its fields (with defaults and
        # descriptions) as the assistant's configurable knobs; nodes read them from ``configurable``.
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(
            AgentState, context_schema=AgentConfig, input_schema=AgentInput, output_schema=AgentOutput
        )
        nodes: dict[str, Callable[..., dict[str, Any]]] = {
            "link_entities": self.link_entities,
            "plan": self.plan,
            "call_planner": self.call_planner,
            "run_tools": self.run_tools,
            "observe": self.observe,
            "fallback": self.fallback,
            "constrain": self.constrain,
            "rerank": self.rerank,
            "expand": self.expand,
            "finalize": self.finalize,
        }
        for name, fn in nodes.items():
            # one planner round is three nodes; traces and usage count them as the ``act`` stage
            # the constrain node's LLM calls count as stage ``constraints`` (AgentResult.usage_by_stage)
            metadata = {"stage": "act"} if name in ACT_NODES else {"stage": "constraints"} if name == "constrain" else None
            graph.add_node(name, fn, metadata=metadata)
        graph.add_edge(START, "link_entities")
        graph.add_edge("link_entities", "plan")
        graph.add_edge("plan", "call_planner")
        graph.add_edge("call_planner", "run_tools")
        graph.add_edge("run_tools", "observe")
        graph.add_conditional_edges(
            "observe", self.route, ["call_planner", "fallback", "constrain", "rerank", "expand"]
        )
        graph.add_conditional_edges("fallback", self.route_refine, ["constrain", "rerank", "expand"])
        graph.add_conditional_edges("constrain", self.route_after_constraints, ["rerank", "expand"])
        graph.add_edge("rerank", "expand")
        graph.add_edge("expand", "finalize")
        graph.add_edge("finalize", END)
        return graph.compile(name="skb-agent", **compile_kwargs)
