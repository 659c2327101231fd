"""The two optional stages between the seed list and SAGE expansion: constraints and reranking.

    ... -> observe / fallback -> [constrain] -> [rerank] -> expand -> finalize

Why after the act loop: both refine a seed list that already exists. The constraint stage
(``agent.stages.constraints``) puts the candidates of the node-set join that satisfy at least
``constraint_min_share`` of the constraints in front (strict join first, then each relaxation
level; within a level by anchors reached, then by the planner's evidence), then the planner's
seeds, then the join candidates of deeper relaxations; the reranker (``agent.stages.rerank``) reorders the top
``rerank_top`` seeds with the model. Each stage is a graph node of its own, so traces show its
time, LLM calls and tokens (``usage`` key ``constraints`` / ``rerank``), and each leaves a report
(``AgentResult.constraints`` / ``AgentResult.rerank``). With ``constraints`` off and ``rerank``
``none`` (the defaults) the graph never enters them.

Without an LLM the constraints come from the plan and are held to what the planner found: built for
the label of its best seed, kept only if one of its seeds satisfies them, joined only when at least
two remain (measured in evals/reports/constraints/: without these rules the stage cost HPO R@20
0.865 -> 0.780 and MetaQA Hit@1 0.995 -> 0.820; with them it is neutral). Neither stage asks a
model that failed for good earlier in the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from agent.config import AgentConfig
from agent.llm.budget import Budget, CallFailed, Usage, call_or_fallback
from agent.runtime import Runtime
from agent.stages.constraints import extract_constraints, ground, offline_spec, run_constraints, satisfied_by_any
from agent.stages.rerank import Candidate as RerankCandidate
from agent.stages.rerank import bind_for, rerank
from agent.state import AgentState, Candidate, SeedItem
from tools.common import schema_of

Next = Literal["constrain", "rerank", "expand"]

REPORTED_KEYS = 10
"""Seed keys a stage report lists as it found them (``before``): enough for Hit@1/Hit@5 before and after."""


def next_stage(cfg: AgentConfig, after: str | None = None) -> Next:
    """The node after the seed list is ready (``after`` None) or after ``constrain``."""
    if after is None and cfg.constraints:
        return "constrain"
    if cfg.rerank != "none":
        return "rerank"
    return "expand"


def _elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)


def _llm_available(rt: Runtime, cfg: AgentConfig, state: AgentState) -> bool:
    """An LLM to ask: a configured LLM planner (or an injected chat model) whose budget is not spent and
    which has not failed for good this run (the planner then went offline; plan-once mode runs the
    offline executor by design, so there that flag says nothing about the model)."""
    failed = bool(state.get("planner_offline")) and cfg.planner_mode != "plan-once"
    return rt.stage_counts_llm(cfg) and not state.get("budget_stop") and not failed


def constrain(rt: Runtime, state: AgentState, config: RunnableConfig, cfg: AgentConfig) -> dict[str, Any]:
    """Extract, ground, join and relax; the join's candidates go in front of the seeds."""
    start = time.perf_counter()
    question = state["question"]
    linked = list(state.get("linked_entities") or [])
    schema = schema_of(rt.bundle)
    usage = Usage()
    degraded: list[str] = []
    # the top seeds as the stage found them: what a report of the stage's effect compares against
    report: dict[str, Any] = {"before": [str(s["key"]) for s in (state.get("seeds") or [])[:REPORTED_KEYS]]}
    spec = None
    anchors: dict[str, list[str]] = {}
    if _llm_available(rt, cfg, state):
        budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))

        def call(bound: Any, history: Sequence[BaseMessage]) -> AIMessage:
            return budget.call(bound, history, cfg, usage)

        got = call_or_fallback(
            lambda: extract_constraints(
                rt.stage_model(cfg),
                question,
                schema,
                linked,
                call,
                structured=cfg.structured_output,
                budget_tokens=cfg.constraint_prompt_tokens,
                repairs=cfg.plan_repairs,
            )
        )
        if isinstance(got, CallFailed):
            how = "skipped" if got.budget is not None else "failed"
            degraded.append(f"constraint extraction {how}: {got.error}; used the plan's constraints")
        else:
            spec, extraction = got
            report["extraction"] = extraction
            if spec is None:
                degraded.append("constraint extraction stayed invalid after the repair; used the plan's constraints")
    report["source"] = "llm" if spec is not None else "plan"
    if spec is None:
        # the planner's answer type: the label of its best seed (its path walk may end at another type
        # than the heuristic plan's guess), else the plan's target type
        planned = state.get("seeds") or []
        top = rt.bundle.skb.nodes.get(planned[0]["key"]) if planned else None
        spec, anchors = offline_spec(top.label if top is not None else state.get("target_type"), linked, schema)
    update: dict[str, Any] = {"degraded": degraded}
    if usage.llm_calls:
        update["usage"] = {"constraints": usage.as_dict()}
    if spec is None:
        report["skipped"] = "no constraint: no answer type, or no linked entity one hop from it"
        update.update(constraint_report=report, timings_ms={"constraints": _elapsed_ms(start)})
        return update

    def link(mention: str) -> list[dict[str, Any]]:
        return [e.model_dump() for e in rt.linker().link(mention, cfg.constraint_anchors)]

    constraints, ungrounded = ground(spec, schema, link, cfg.constraint_anchors, anchors)
    if report["source"] == "plan" and state.get("seeds"):
        # a constraint none of the planner's seeds satisfies is not what the plan found: the planner
        # walked a longer path from that entity (e.g. the films of the director of the films of X)
        keys = [str(s["key"]) for s in state.get("seeds") or []]
        implied = [c for c in constraints if c.kind != "triplet" or satisfied_by_any(rt.bundle.skb, keys, c)]
        report["not_implied"] = [c.text for c in constraints if all(c is not i for i in implied)]
        constraints = implied
        if len(constraints) < 2:
            # one constraint from the plan joins the planner's own one-hop neighbourhood of one entity:
            # nothing to intersect, and on a multi-hop question it is the wrong neighbourhood
            report["single"] = [c.text for c in constraints]
            constraints = []
    result = run_constraints(
        rt.bundle,
        spec.target_type,
        constraints,
        cfg.k,
        timeout_ms=cfg.cypher_timeout_ms,
        max_rows=cfg.cypher_max_rows,
    ) if constraints else None
    if result is None:
        report.update(
            target_type=spec.target_type,
            ungrounded=ungrounded,
            skipped="fewer than two constraints from the plan (ungrounded, not implied by the planner's seeds, or the "
            "question names one entity)" if report["source"] == "plan" else "no constraint could be grounded",
        )
        update.update(constraint_report=report, timings_ms={"constraints": _elapsed_ms(start)})
        return update
    result.ungrounded = ungrounded
    report.update(result.report())
    pool: dict[str, Candidate] = {
        k: Candidate(score=v["score"], support=v["support"], label=v["label"], provenance=list(v["provenance"]))
        for k, v in (state.get("candidates") or {}).items()
    }
    active = {s.level: "; ".join(s.active) for s in result.steps}
    total = max(1, len(constraints))
    ranked = sorted(
        result.candidates,
        key=lambda c: (c[1], -c[2], -(pool[c[0]]["score"] if c[0] in pool else 0.0), c[0]),
    )
    for key, level, support in ranked:
        prov = {"tool": "constraints", "step": level, "query": active[level]}
        entry = pool.get(key)
        if entry is None:
            pool[key] = Candidate(score=0.0, support=support, label=rt.bundle.skb.nodes[key].label, provenance=[prov])
        elif prov not in entry["provenance"]:
            entry["provenance"].append(prov)
    share = {s.level: len(s.active) / total for s in result.steps}
    front = [c for c in ranked if share[c[1]] >= cfg.constraint_min_share]
    back = [c for c in ranked if share[c[1]] < cfg.constraint_min_share]
    seeds: list[SeedItem] = []
    have: set[str] = set()
    last = float("inf")

    def add(key: str, score: float, origin: str) -> None:
        nonlocal last
        if len(seeds) < cfg.k and key not in have:
            last = min(last, score)
            seeds.append(SeedItem(key=key, score=last, origin=origin))
            have.add(key)

    for key, level, _ in front:
        add(key, 1.0 + share[level], "seed")  # above every planner seed (their scores are <= 1)
    for seed in state.get("seeds") or []:
        add(seed["key"], float(seed["score"]), seed["origin"])
    for key, _, _ in back:
        add(key, last, "seed")
    report["front"] = len([c for c in front if c[0] in have])
    update.update(
        seeds=seeds,
        candidates=pool,
        constraint_report=report,
        timings_ms={"constraints": _elapsed_ms(start)},
    )
    return update


def rerank_seeds(rt: Runtime, state: AgentState, config: RunnableConfig, cfg: AgentConfig) -> dict[str, Any]:
    """Reorder the top ``rerank_top`` seeds with the model; any failure keeps the original order."""
    start = time.perf_counter()
    mode = cfg.rerank
    seeds = list(state.get("seeds") or [])
    top = seeds[: cfg.rerank_top]
    report: dict[str, Any] = {"mode": mode, "candidates": len(top), "calls": 0, "changed": False, "notes": [],
                              "before": [str(s["key"]) for s in top]}
    update: dict[str, Any] = {"rerank_report": report}
    if mode == "none" or len(top) < 2:
        update["timings_ms"] = {"rerank": _elapsed_ms(start)}
        return update
    if not _llm_available(rt, cfg, state):
        report["notes"].append("rerank needs an LLM (planner openai, stage_llm openai or a chat model) that has budget left and has not failed this run; skipped")
        update["timings_ms"] = {"rerank": _elapsed_ms(start)}
        return update
    skb = rt.bundle.skb
    candidates = [
        RerankCandidate(key=s["key"], label=skb.nodes[s["key"]].label, name=skb.nodes[s["key"]].name,
                        text=skb.node_text(s["key"]))
        for s in top
    ]
    usage = Usage()
    budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
    bind = bind_for(rt.stage_model(cfg), cfg.structured_output)

    def invoke_for(which: Any) -> Any:
        bound = bind(which)

        def invoke(history: Sequence[BaseMessage]) -> AIMessage:
            return budget.call(bound, history, cfg, usage)

        return invoke

    degraded: list[str] = []
    got = call_or_fallback(
        lambda: rerank(
            mode,
            state["question"],
            candidates,
            invoke_for,
            budget_tokens=cfg.rerank_prompt_tokens,
            structured=cfg.structured_output,
            passes=cfg.rerank_passes,
        )
    )
    outcome = None if isinstance(got, CallFailed) else got
    if isinstance(got, CallFailed):  # call failures and spent budgets: the seeds keep their order
        report["notes"].append(f"rerank stopped, original order kept: {got.error}")
        degraded.append(f"rerank ({mode}) failed, original order kept: {got.error}")
    if usage.llm_calls:
        update["usage"] = {"rerank": usage.as_dict()}
    report["calls"] = usage.llm_calls
    if outcome is not None:
        report.update(outcome.report(mode, [c.key for c in candidates]))
        report["calls"] = usage.llm_calls
        if outcome.changed:
            scores = [s["score"] for s in top]  # the slots keep their scores; the nodes move
            reordered = [SeedItem(key=top[i]["key"], score=scores[slot], origin=top[i]["origin"])
                         for slot, i in enumerate(outcome.order)]
            update["seeds"] = reordered + seeds[len(top):]
    update["degraded"] = degraded
    update["timings_ms"] = {"rerank": _elapsed_ms(start)}
    return update
