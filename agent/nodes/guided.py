"""One guided planner round (``planner_mode="guided"``): the offline planner's next actions as a menu
the model picks from (``agent.planning.guided`` builds the view, the tools and the state block)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from agent.config import AgentConfig
from agent.llm.budget import Budget, CallFailed, Usage, call_or_fallback
from agent.llm.client import invoke_with_retry
from agent.llm.toolcalls import check_tool_calls
from agent.nodes.common import add_time, path_text
from agent.nodes.tool_io import clamped
from agent.planning.guided import (
    MAX_FINISH,
    GuidedCallError,
    RoundView,
    ranked_candidates,
    read_call,
    round_tools,
    round_view,
    state_block,
)
from agent.runtime import Runtime
from agent.state import AgentState
from prompts import load_prompt
from tools.common import schema_of


def guided_round(rt: Runtime, state: AgentState, cfg: AgentConfig, start: float) -> dict[str, Any]:
    """One guided round (``planner_mode="guided"``, ``agent.planning.guided``): the offline planner's next
    actions become a menu, the round's tool schemas offer only what exists, and the model sees a bounded
    state block, never the message history. A call that names something not offered is repaired up to
    ``guided_repairs`` times (the error goes into the next state block); after that, or when the model
    cannot be reached, the menu's first option runs (noted in ``degraded``)."""
    question = state["question"]
    tools = rt.tools(cfg, question)
    scratchpad = state.get("scratchpad") or []
    schema = schema_of(rt.bundle)
    linked = state.get("linked_entities") or []
    pool = state.get("candidates") or {}
    target = state.get("target_type")
    proposal = check_tool_calls(invoke_with_retry(rt.offline_model(cfg), scratchpad, cfg), tools).valid
    view = round_view(schema, linked, pool, target, proposal)
    names = display_names(rt, view, linked)
    ranked = list(dict.fromkeys([*view.finish_keys, *ranked_candidates(pool, target)]))[:MAX_FINISH]
    candidates = [(k, str(pool[k].get("label", "")), names.get(k, ""), float(pool[k].get("score", 0.0))) for k in ranked]
    round_no = int(state.get("step") or 0) + 1
    system = load_prompt("guided_system.md")

    def block(error: str | None) -> str:
        text, shown = state_block(
            question=question, target=target, paths=[path_text(p) for p in state.get("relation_paths") or []],
            linked=linked, history=state.get("observations") or [], candidates=candidates, view=view, names=names,
            round_no=round_no, max_rounds=cfg.max_rounds, budget_tokens=cfg.guided_state_tokens,
            model=cfg.model, error=error,
        )
        del view.menu[shown:]  # ``pick`` offers only the options the text shows
        return text

    first_text = block(None)
    menu_only = cfg.guided_tools == "menu"
    bound = rt.model(cfg).bind_tools(round_tools(view, cfg.per_call_k, menu_only), tool_choice="required")
    budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
    usage, degraded = Usage(), []
    error: str | None = None
    calls: list[dict[str, Any]] | None = None
    budget_stop: str | None = None
    offline = False
    row: dict[str, Any] = {"round": round_no, "attempts": 0, "valid_first_try": False, "valid": False,
                           "view": view.to_json(), "estimated_prompt_tokens": [], "prompt_tokens": []}
    for _ in range(1 + cfg.guided_repairs):
        text = first_text if error is None else block(error)
        messages = [SystemMessage(system), HumanMessage(text)]
        before = usage.estimated_prompt_tokens
        got = call_or_fallback(partial(budget.call, bound, messages, cfg, usage), degrade=rt.can_degrade(cfg))
        if isinstance(got, CallFailed):
            offline = True
            if got.budget is not None:
                budget_stop = got.budget
                degraded.append(f"{got.error}: " + ("continued with the offline planner" if rt.can_degrade(cfg) else "stopped planning"))
                calls = None if rt.can_degrade(cfg) else []
            else:
                degraded.append(f"planner model failed, continued with the offline planner: {got.error}")
            break
        reply = got
        row["attempts"] += 1
        row["estimated_prompt_tokens"].append(usage.estimated_prompt_tokens - before)
        meta: Mapping[str, Any] = reply.usage_metadata or {}
        row["prompt_tokens"].append(int(meta.get("input_tokens", 0) or 0))
        try:
            if not reply.tool_calls:
                raise GuidedCallError("no tool call in the reply; call exactly one of the tools")
            calls = read_call(reply.tool_calls[0], view, cfg.per_call_k, menu_only)
        except GuidedCallError as exc:
            error = str(exc)
            row.setdefault("errors", []).append(error)
            continue
        row["valid"] = True
        row["valid_first_try"] = row["attempts"] == 1
        first = reply.tool_calls[0]
        row["choice"] = f"pick:{first['args'].get('option')}" if first["name"] == "pick" else first["name"]
        break
    if calls is None:
        calls = [{"name": c["name"], "args": dict(c.get("args") or {}), "id": c.get("id")} for c in proposal]
        if not offline:
            degraded.append(f"guided round {round_no}: no valid call after {row['attempts']} attempt(s); ran the "
                            "offline planner's next action")
    step = int(state.get("step") or 0) + (1 if calls else 0)
    pending = clamped(calls, cfg, step)
    executed = AIMessage(content="", tool_calls=[{"name": c["name"], "args": c["args"], "id": c["id"]} for c in pending])
    update: dict[str, Any] = {
        "scratchpad": [executed],
        "pending_calls": pending,
        "round_messages": [],
        "step": step,
        "planner_offline": offline,
        "degraded": degraded,
        "guided_rounds": [row] if row["attempts"] else [],
        "timings_ms": add_time(state, "call_planner", start),
    }
    if budget_stop:
        update["budget_stop"] = budget_stop
    if usage.llm_calls:
        previous = (state.get("usage") or {}).get("act") or {}
        update["usage"] = {"act": {k: int(previous.get(k, 0)) + v for k, v in usage.as_dict().items()}}
    return update

def display_names(rt: Runtime, view: RoundView, linked: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Display names of the keys a round shows (graph text: shown quoted by the state block)."""
    names = {str(e["key"]): str(e.get("name") or "") for e in linked if e.get("key")}
    wanted = {*view.keys, *view.finish_keys}
    for option in view.menu:
        for call in option:
            wanted.update(str(k) for k in (call.get("args") or {}).get("keys") or [])
    for key in wanted - set(names):
        node = rt.bundle.node(key)
        if node is not None:
            names[key] = node.name
    return names

