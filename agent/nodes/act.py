"""The act loop, one planner round in three nodes: ``call_planner`` (the model's tool calls, checked
and clamped), ``run_tools`` (run concurrently) and ``observe`` (fold the results into the pool, decide
whether the loop is done); ``route`` picks the node after a round."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool

from agent.config import AgentConfig
from agent.llm.budget import Budget, CallFailed, Usage, call_or_fallback
from agent.llm.client import invoke_with_retry
from agent.llm.feedback import fed_back
from agent.llm.toolcalls import check_tool_calls
from agent.nodes.common import add_time
from agent.nodes.guided import guided_round
from agent.nodes.pool import merge_observation, select_seeds
from agent.nodes.tool_io import budgeted, clamped
from agent.planning.offline import OfflinePlanner
from agent.runtime import Runtime, run_concurrently
from agent.stages.refine import Next, next_stage
from agent.state import AgentState, Candidate
from graphs.errors import SKBError
from tools.common import prefetch_query
from tools.results import Finish, ToolError, estimate_tokens, parse_result, tool_error, tool_output, unread_by_model

#: Tool error types that mean the graph store failed the call (recorded in ``degraded``), as opposed
#: to errors in the planner's input (unknown schema, syntax, too many rows) that it is told to fix.
STORE_FAILURES = frozenset({"store_unavailable", "store_error", "timeout", "internal"})


def call_planner(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    """One planner turn: the model's tool calls, validated against the tools and clamped to K."""
    start = time.perf_counter()
    cfg = rt.settings(config)
    tools = rt.tools(cfg, state["question"])
    usage = Usage()
    degraded: list[str] = []
    offline = bool(state.get("planner_offline"))
    scratchpad = state.get("scratchpad") or []
    if not state.get("step"):
        prefetch_question_vector(rt, cfg, state["question"], offline, scratchpad)
    if not offline and cfg.planner_mode == "guided":
        return guided_round(rt, state, cfg, start)
    reply: AIMessage | None = None
    budget_stop: str | None = None
    if not offline and not rt.counts_llm(cfg):
        # the offline planner is a chat model by interface only: no prompt goes anywhere, so none is
        # counted against a budget (counting one cost more than the planner's own work)
        reply = _planner_reply(rt.model(cfg).bind_tools(list(tools.values())), scratchpad, cfg, config)
    elif not offline:
        bound: Runnable[LanguageModelInput, BaseMessage] = rt.model(cfg).bind_tools(list(tools.values()))
        budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
        got = call_or_fallback(lambda: budget.call(bound, scratchpad, cfg, usage), degrade=rt.can_degrade(cfg))
        if not isinstance(got, CallFailed):
            reply = got
        elif got.budget is not None:
            budget_stop, offline = got.budget, True
            if rt.can_degrade(cfg):
                degraded.append(f"{got.error}: continued with the offline planner")
            else:  # stop calling the model; the round ends with what the pool holds (or the fallback)
                degraded.append(f"{got.error}: stopped planning")
                reply = AIMessage(content="")
        else:
            offline = True
            degraded.append(f"planner model failed, continued with the offline planner: {got.error}")
    if reply is None:
        reply = _planner_reply(rt.offline_model(cfg), scratchpad, cfg, config)
    checked = check_tool_calls(reply, tools)
    step = int(state.get("step") or 0) + (1 if checked.valid else 0)
    pending = clamped(checked.valid, cfg, step)
    update: dict[str, Any] = {
        # what the model wrote goes back into every later prompt: cut to a tool result's budget
        # (the offline planner reads no prompt: its reply goes back as it is, counted by no tokenizer)
        "scratchpad": [reply if offline or not model_reads_results(rt, state, cfg)
                       else fed_back(reply, cfg.tool_output_tokens, cfg.model)],
        "pending_calls": pending,
        "round_messages": list(checked.errors),
        "step": step,
        "planner_offline": offline,
        "degraded": degraded,
        "timings_ms": add_time(state, "call_planner", start),
    }
    if budget_stop:
        update["budget_stop"] = budget_stop
    if rt.counts_llm(cfg) and usage.llm_calls:
        previous = (state.get("usage") or {}).get("act") or {}
        update["usage"] = {"act": {k: int(previous.get(k, 0)) + v for k, v in usage.as_dict().items()}}
    return update


def _planner_reply(
    model: Runnable[LanguageModelInput, BaseMessage], scratchpad: Sequence[BaseMessage], cfg: AgentConfig,
    config: RunnableConfig,
) -> AIMessage:
    """The offline planner's reply without the chat-model call around it when nothing observes that call
    (``OfflinePlanner.unobserved_reply``: the same message); any other model, or an observed call, is invoked."""
    if isinstance(model, OfflinePlanner):
        reply = model.unobserved_reply(scratchpad, config)
        if reply is not None:
            return reply
    return invoke_with_retry(model, scratchpad, cfg)


def prefetch_question_vector(
    rt: Runtime, cfg: AgentConfig, question: str, offline: bool, scratchpad: Sequence[BaseMessage]
) -> None:
    """Start embedding the question on the tool pool when the planner says its first round will
    need the vector (``wants_question_vector``): the forward pass then overlaps the planner's turn
    instead of leading the first tool round. A planner without the hook gets no prefetch."""
    model = rt.offline_model(cfg) if offline else rt.model(cfg)
    wants = getattr(model, "wants_question_vector", None)
    if callable(wants) and wants(scratchpad):
        prefetch_query(rt.bundle, question, rt.pool())

def run_tools(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    """Run the round's calls concurrently (they are independent by construction: one model turn),
    at most ``max_parallel_tools`` at a time. Results keep the call order; every tool run is traced
    under this node (see ``run_concurrently``)."""
    start = time.perf_counter()
    cfg = rt.settings(config)
    question = state["question"]
    step = int(state.get("step") or 0)
    tools = rt.tools(cfg, question)
    calls = state.get("pending_calls") or []

    def run_one(call: Mapping[str, Any]) -> tuple[ToolMessage, str | None]:
        name, call_id = str(call["name"]), str(call["id"])
        run_args = {**call["args"], "step": step, "question": question}
        try:
            message = tools[name].invoke({"type": "tool_call", "id": call_id, "name": name, "args": run_args})
        except Exception as exc:  # noqa: BLE001 - one failing call must not end the run; it is reported
            detail = str(exc) if isinstance(exc, SKBError) else f"{type(exc).__name__}: {exc}"
            error = tool_error(name, step, str(call["args"]), "tool_failed", detail, "try another tool")
            text, _ = tool_output(error, cfg.tool_output_tokens)
            failed = ToolMessage(content=text, artifact=error, tool_call_id=call_id, name=name, status="error")
            return failed, f"tool {name} failed: {detail}"
        if not isinstance(message, ToolMessage):
            message = ToolMessage(content=str(message), tool_call_id=call_id, name=name)
        return budgeted(message, name, cfg.tool_output_tokens), None

    with unread_by_model(not model_reads_results(rt, state, cfg)):
        outcomes = run_concurrently(run_one, calls, 1 if all_in_process(tools, calls) else cfg.max_parallel_tools)
    messages = [m for m, _ in outcomes]
    return {
        "round_messages": [*messages, *(state.get("round_messages") or [])],
        "degraded": [d for _, d in outcomes if d],
        "timings_ms": add_time(state, "run_tools", start),
    }

def model_reads_results(rt: Runtime, state: AgentState, cfg: AgentConfig) -> bool:
    """Whether a model reads this round's tool results: not when the offline planner plans (it reads their typed
    artifacts), whether configured or fallen back to. Then no tokenizer runs for them: their text is held to its
    budget by a bound (``tools.results.unread_by_model``) and not counted into ``tool_output_tokens``."""
    if state.get("planner_offline"):
        return False
    if rt.chat_model is not None:  # an injected model serves every setting (``Runtime.model``)
        return not isinstance(rt.chat_model, OfflinePlanner)
    return cfg.planner != "offline"  # asked without making the model: a guided round may not have made it


def all_in_process(tools: Mapping[str, BaseTool], calls: Sequence[Mapping[str, Any]]) -> bool:
    """Every call of the round runs on this process's own data (``SKBTool.in_process``): then they run one
    after another on the calling thread. Why: such calls are Python and numpy work under one interpreter
    lock, so threads add hand-offs and lock contention and no overlap (on the 2-core development box a
    round of three in-process neighbour aggregations took 12% longer per question on threads). A call that
    may wait on a store, a model or the network keeps the round concurrent; the results are the same
    either way (call order is kept, the tools are stateless)."""
    for call in calls:
        tool = tools.get(str(call["name"]))
        judge = getattr(tool, "in_process", None)
        if not callable(judge) or not judge(dict(call.get("args") or {})):
            return False
    return True


def observe(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    """Fold the round's results into the candidate pool and decide whether the loop is done."""
    start = time.perf_counter()
    cfg = rt.settings(config)
    pool: dict[str, Candidate] = dict(state.get("candidates") or {})  # entries copied on write
    owned: set[str] = set()
    calls = state.get("pending_calls") or []
    round_messages = list(state.get("round_messages") or [])
    results = {str(m.tool_call_id): m for m in round_messages if isinstance(m, ToolMessage)}
    step = int(state.get("step") or 0)
    finish = state.get("finish")
    explicit = bool(state.get("used_explicit_relations"))
    degraded: list[str] = []
    observations: list[dict[str, Any]] = []
    tokens = 0
    reads = model_reads_results(rt, state, cfg)
    for call in calls:
        message = results.get(str(call["id"]))
        if message is None:
            continue
        name = str(call["name"])
        if reads:
            tokens += estimate_tokens(str(message.content))
        result = parse_result(name, getattr(message, "artifact", None) or message.content)
        if isinstance(result, ToolError) and result.error.type == "store_unavailable":
            degraded.append(f"tool {name}: graph store unavailable: {result.error.message}")
        elif isinstance(result, ToolError) and result.error.type in STORE_FAILURES:
            # the store failed the call (not the planner's input): the answer lacks what it would have found
            degraded.append(f"tool {name} failed ({result.error.type}): {result.error.message}")
        added = merge_observation(pool, result, rt.bundle, owned)
        explicit = explicit or (result is not None and result.explicit_edges and added > 0)
        error = result.error.model_dump() if isinstance(result, ToolError) else None
        observations.append({"step": step, "tool": name, "args": call["args"], "nodes": added, "error": error})
        if isinstance(result, Finish):
            finish = result.model_dump(mode="json")
    rejected = [
        m for m in round_messages if isinstance(m, ToolMessage) and m.tool_call_id not in {c["id"] for c in calls}
    ]
    if reads:
        tokens += sum(estimate_tokens(str(m.content)) for m in rejected)
    repairs = int(state.get("repairs") or 0)
    done = finish is not None
    if rejected and not calls:
        repairs += 1
        if repairs > cfg.max_repairs:
            degraded.append(f"planner made invalid tool calls {repairs} rounds in a row; stopped after max_repairs")
            done = True
    elif not calls and not rejected:
        done = True  # the planner answered in text: nothing more to run
    if step >= cfg.max_rounds:
        done = True
    update: dict[str, Any] = {
        "scratchpad": round_messages,
        "candidates": pool,
        "observations": observations,
        "repairs": repairs,
        "done": done,
        "finish": finish,
        "used_explicit_relations": explicit,
        "tool_calls": int(state.get("tool_calls") or 0) + len(calls),
        "tool_output_tokens": int(state.get("tool_output_tokens") or 0) + tokens,
        "pending_calls": [],
        "round_messages": [],
        "degraded": degraded,
        "timings_ms": add_time(state, "observe", start),
    }
    if done:
        update["seeds"] = select_seeds(pool, finish, state.get("target_type"), cfg.k)
    return update

def route(
    rt: Runtime, state: AgentState, config: RunnableConfig
) -> Literal["call_planner", "fallback", "constrain", "rerank", "expand"]:
    if not state.get("done"):
        return "call_planner"
    cfg = rt.settings(config)
    seeds = state.get("seeds") or []
    if not seeds or (cfg.fallback_fill and len(seeds) < cfg.k):
        return "fallback"
    return next_stage(cfg)

def route_refine(rt: Runtime, state: AgentState, config: RunnableConfig) -> Next:
    """After the fallback: the optional constraint and rerank stages, then SAGE."""
    return next_stage(rt.settings(config))

def route_after_constraints(rt: Runtime, state: AgentState, config: RunnableConfig) -> Next:
    return next_stage(rt.settings(config), after="constrain")
