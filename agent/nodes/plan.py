"""The plan node: the answer type and relation paths (from an LLM plan or the heuristic one), and the
planner's prompt (system message and the plan block the offline planner parses)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from agent.config import AgentConfig
from agent.llm.budget import Budget, CallFailed, Usage, call_or_fallback
from agent.nodes.common import elapsed_ms, path_text, to_dict
from agent.planning.llm import PlanOutcome, llm_plan
from agent.planning.targets import predict_target_type, relation_paths
from agent.planning.walks import ranked_walks
from agent.runtime import Runtime
from agent.state import AgentState
from graphs.errors import InvalidPlanError, PlannerCallError
from graphs.skb.profile import profile_for
from graphs.text_safety import block_json, neutralize_plan_tags, quoted
from prompts import render_prompt
from tools.common import schema_of

if TYPE_CHECKING:
    from graphs.skb.model import GraphSchema


def plan(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = rt.settings(config)
    question = state["question"]
    linked = state.get("linked_entities") or []
    schema = schema_of(rt.bundle)
    degraded: list[str] = []
    usage = Usage()
    target: str | None = None
    paths: list[list[dict[str, Any]]] = []
    planned = False
    offline = False
    once = cfg.planner_mode == "plan-once"
    sources: list[str] = []
    search_text: str | None = None
    report: dict[str, Any] | None = None
    budget_stop: str | None = None
    if cfg.planner == "openai" and (cfg.planner_mode != "guided" or cfg.guided_llm_plan):
        budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))

        def ask() -> PlanOutcome:
            preferred = ranked_walks(rt.bundle, question, linked)  # the best walks, when too many to list
            return llm_plan(rt.model(cfg), question, schema, linked, cfg, usage, budget, once=once, preferred=preferred)

        # a model that cannot be reached after retries sends the run offline: no retries paid again per round
        outcome = call_or_fallback(ask, degrade=rt.can_degrade(cfg), fatal=PlannerCallError)
        if isinstance(outcome, CallFailed):
            exc, offline = outcome.error, outcome.offline
            if outcome.budget is not None:  # no model call fits the question's budget: nor can any later one
                budget_stop = outcome.budget
                degraded.append(f"{exc}: used the heuristic plan and the offline planner")
            elif offline:
                degraded.append(f"LLM plan failed, used the heuristic plan and the offline planner: {exc}")
            else:
                if isinstance(exc, InvalidPlanError):
                    report = exc.report
                degraded.append(f"LLM plan failed, used the heuristic plan: {exc}")
        else:
            target, paths, report = outcome.target_type, outcome.relation_paths, outcome.report
            sources, search_text = outcome.sources, outcome.search_text
            planned = True
    llm_paths = planned and bool(paths)
    if not planned:
        target, paths = heuristic_plan(rt, question, linked, cfg)
    elif target is None or not paths:
        # a valid but partial LLM plan: what the model left open comes from the heuristic plan
        # (a model's target is kept; paths are predicted for it)
        guess, guessed_paths = heuristic_plan(rt, question, linked, cfg, target=target)
        if report is not None:
            report["completed"] = [f for f, missing in (("target_type", target is None), ("relation_paths", not paths)) if missing]
        target, paths = target or guess, paths or guessed_paths
    plan: dict[str, Any] = {
        "question": question,
        "linked_entities": linked,
        "target_type": target,
        "relation_paths": paths,
        "k": cfg.k,
        "per_call_k": cfg.per_call_k,
        "max_rounds": cfg.max_rounds,
        "semantic_net": cfg.semantic_net,
        "scoring": cfg.scoring_overrides(),
    }
    if once:
        # plan-once (SPARK): the plan and its tool arguments came from one model call; the offline
        # planner is the deterministic executor that walks it (its paths, sources and search text)
        offline = True
        if planned:
            # walk the model's own paths when it gave some; else the executor predicts them
            plan.update({"sources": sources, "search_text": search_text, "walk_plan_paths": llm_paths})
    system = render_prompt(
        "planner_system.md",
        schema=schema.render(),
        tools=rt.tool_text(cfg, question),
        per_call_k=cfg.per_call_k,
        max_rounds=cfg.max_rounds,
        k=cfg.k,
    )
    # Untrusted text (the question, node names) is shown as data: names JSON-quoted, and no
    # value can open or close the <plan> block the offline planner parses (block_json escapes
    # <, > and & inside it; neutralize_plan_tags defuses tags everywhere else).
    entities = "\n".join(f"- {e['key']} ({e['label']}): {quoted(e['name'])}" for e in linked) or "(none)"
    human = render_prompt(
        "plan_message.md",
        question=neutralize_plan_tags(question),
        entities=neutralize_plan_tags(entities),
        target_type=target or "(unknown)",
        paths=neutralize_plan_tags("\n".join(f"- {path_text(p)}" for p in paths) or "(none)"),
        plan_json=block_json(plan),
    )
    update: dict[str, Any] = {
        "target_type": target,
        "relation_paths": paths,
        "scratchpad": [SystemMessage(system), HumanMessage(human)],
        "planner_offline": offline,
        "degraded": degraded,
        "plan_report": report,
        "timings_ms": {"plan": elapsed_ms(start)},
    }
    if budget_stop:
        update["budget_stop"] = budget_stop
    if usage.llm_calls and rt.counts_llm(cfg):
        update["usage"] = {"plan": usage.as_dict()}
    return update

def heuristic_plan(
    rt: Runtime, question: str, linked: Sequence[Mapping[str, Any]], cfg: AgentConfig, target: str | None = None
) -> tuple[str | None, list[list[dict[str, Any]]]]:
    """Target type from the wording (unless given) and the schema's relation paths to it."""
    schema = schema_of(rt.bundle)
    target = target or predict_target_type(question, schema) or default_answer_label(rt, schema)
    if target is None:
        return None, []
    sources = list(dict.fromkeys(str(e["label"]) for e in linked if e.get("label") != target))
    if not sources:
        return target, []
    raw = relation_paths(schema, sources, target, max_hops=cfg.max_hops)
    return target, [[to_dict(step) for step in path] for path in raw]

def default_answer_label(rt: Runtime, schema: GraphSchema) -> str | None:
    """The profile's answer type for questions that name none, when this SKB has that label."""
    label = profile_for(rt.bundle.skb).planner.default_answer_label
    return label if label is not None and label in schema.label_names() else None
