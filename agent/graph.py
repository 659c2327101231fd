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

``compile`` gives every node its own LangGraph step (what a stream, a trace or Studio shows);
``compile_unobserved`` runs the same nodes in fewer steps for a run that nothing observes step by step
(``agent.api.ask`` without a run config or tracer), with the same result.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

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

Node = Callable[[AgentState, RunnableConfig], dict[str, Any]]


def _state_reducers() -> dict[str, Callable[[Any, Any], Any]]:
    """The reducer of every AgentState field that has one (LangGraph's rule: the last callable of the
    ``Annotated`` metadata); the other fields keep the last value written."""
    reducers: dict[str, Callable[[Any, Any], Any]] = {}
    for name, hint in get_type_hints(AgentState, include_extras=True).items():
        meta = getattr(hint, "__metadata__", ())
        if meta and callable(meta[-1]):
            reducers[name] = meta[-1]
    return reducers


def fused(
    *nodes: Node,
    route: Callable[[AgentState, RunnableConfig], str] | None = None,
    goto: Mapping[str, str] | None = None,
    then: Mapping[str, Sequence[Node]] | None = None,
) -> Callable[..., Any]:
    """One LangGraph node that runs ``nodes`` in order, as the graph would run them one step each.

    Each node sees the state with the earlier nodes' updates applied by the state's own reducers (the
    scratchpad's ``add_messages``, the lists' ``operator.add``, the timings' dict merge), and the
    combined update, applied once by the graph, leaves the state those steps would leave: the
    reducers combine associatively (``add_messages`` gives the messages their ids on the way, so the
    graph appends them rather than replacing any). With ``route``, the route is read from the same
    state and the node goes there itself (``Command``; ``goto`` renames its answers), instead of a
    conditional edge re-reading the whole state after the step; a route named in ``then`` runs those
    nodes too, in the same step, and ends the run (the last of them ends the graph)."""
    reducers = _state_reducers()

    def apply(chain: Sequence[Node], local: dict[str, Any], combined: dict[str, Any], config: RunnableConfig) -> None:
        for node in chain:
            for key, value in node(local, config).items():  # type: ignore[arg-type]
                reduce = reducers.get(key)
                if reduce is None:
                    combined[key] = local[key] = value
                    continue
                combined[key] = reduce(combined[key], value) if key in combined else value
                local[key] = reduce(local[key], value) if key in local else value

    def run(state: AgentState, config: RunnableConfig) -> Any:
        local: dict[str, Any] = dict(state)
        combined: dict[str, Any] = {}
        apply(nodes, local, combined, config)
        if route is None:
            return combined
        target = route(local, config)  # type: ignore[arg-type]
        rest = (then or {}).get(target)
        if rest is not None:
            apply(rest, local, combined, config)
            return Command(update=combined, goto=END)
        return Command(update=combined, goto=(goto or {}).get(target, target))

    return run


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

    def compile_unobserved(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The same nodes and routes in fewer LangGraph steps, for a run that nothing observes step by step.

        Why: every LangGraph step costs its own work (task preparation, channel writes, a checkpoint of the
        state, a callback run per node and per route), about 0.4 ms on the 2-core development box, a
        quarter of a short offline question. ``ask`` without a run config, callback or tracer returns
        only the final result, so it runs this shape: linking, planning and the first planner round as
        one step (``start``), each later round as one (``act``: call_planner, run_tools, observe and the
        route); a round after which expansion comes runs expansion and the result in its own step too,
        otherwise the fallback and the optional stages keep their own steps and ``finish`` ends.
        The nodes are the same functions on the same state (``fused``), so the result is the same; a
        streamed, traced or configured run gets ``compile``'s node-per-step graph."""
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(
            AgentState, context_schema=AgentConfig, input_schema=AgentInput, output_schema=AgentOutput
        )
        to_finish: dict[Hashable, str] = {"expand": "finish"}
        rounds = ("act", "fallback", "constrain", "rerank", END)
        # a round after which SAGE expansion is next ends the run in the same step
        planner_round: dict[str, Any] = {
            "route": self.route, "goto": {"call_planner": "act"}, "then": {"expand": (self.expand, self.finalize)},
        }
        graph.add_node(
            "start",
            fused(self.link_entities, self.plan, self.call_planner, self.run_tools, self.observe, **planner_round),
            destinations=rounds,
        )
        graph.add_node("act", fused(self.call_planner, self.run_tools, self.observe, **planner_round), destinations=rounds)
        graph.add_node("fallback", self.fallback)
        graph.add_node("constrain", self.constrain)
        graph.add_node("rerank", self.rerank)
        graph.add_node("finish", fused(self.expand, self.finalize))
        graph.add_edge(START, "start")
        graph.add_conditional_edges(
            "fallback", self.route_refine, {"constrain": "constrain", "rerank": "rerank", **to_finish}
        )
        graph.add_conditional_edges("constrain", self.route_after_constraints, {"rerank": "rerank", **to_finish})
        graph.add_edge("rerank", "finish")
        graph.add_edge("finish", END)
        return graph.compile(name="skb-agent")
