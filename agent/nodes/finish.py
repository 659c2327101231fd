"""The nodes after the act loop: the fallback search, SAGE expansion, and the result."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig

from agent.config import AgentConfig
from agent.nodes.common import elapsed_ms, path_text
from agent.results import AgentResult, ContextItem, Provenance, StageUsage
from agent.runtime import Runtime
from agent.state import AgentState, Candidate, SeedItem
from graphs.errors import ConfigError
from graphs.sage.expand import expand as sage_expand
from prompts import render_prompt

#: Timings that are parts of ``act`` (one planner round each), not stages of their own.
_SUB_STAGES = frozenset({"total", "call_planner", "run_tools", "observe"})
#: Context items the answer message lists.
ANSWER_ITEMS = 5


def fallback(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = rt.settings(config)
    question = state["question"]
    label = state.get("target_type")
    degraded: list[str] = []
    try:
        hits = rt.bundle.search(
            question, mode="hybrid", k=cfg.k, label=label, weight=cfg.hybrid_weight, fusion=cfg.fallback_fusion
        )
    except ConfigError as exc:  # a predicted type the index does not know: search all types
        degraded.append(f"fallback search without type filter: {exc}")
        hits = rt.bundle.search(
            question, mode="hybrid", k=cfg.k, weight=cfg.hybrid_weight, fusion=cfg.fallback_fusion
        )
    seeds = list(state.get("seeds") or [])
    have = {s["key"] for s in seeds}
    floor = seeds[-1]["score"] if seeds else float("inf")
    tool = "hybrid_search" if cfg.fallback_fusion == "minmax" else f"hybrid_search:{cfg.fallback_fusion}"
    prov = {"tool": tool, "step": int(state.get("step") or 0), "query": question}
    pool = dict(state.get("candidates") or {})
    for hit in hits:
        if len(seeds) >= cfg.k:
            break
        if hit.key in have:
            continue
        floor = min(floor, float(hit.score))
        seeds.append(SeedItem(key=hit.key, score=floor, origin="fallback"))
        have.add(hit.key)
        pool[hit.key] = Candidate(score=float(hit.score), support=1, label=hit.label, provenance=[prov])
    return {
        "seeds": seeds,
        "candidates": pool,
        "fallback_used": True,
        "degraded": degraded,
        "timings_ms": {"fallback": elapsed_ms(start)},
    }

def expand(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    """SAGE: the k' best one-hop neighbors of the top-k seeds (prune folded in: keep k')."""
    start = time.perf_counter()
    cfg = rt.settings(config)
    seeds = state.get("seeds") or []
    skip = (
        cfg.policy == "never"
        or cfg.k_prime == 0
        or not seeds
        or (cfg.policy == "skip-when-explicit-edges" and bool(state.get("used_explicit_relations")))
    )
    if skip:
        return {"expanded": [], "timings_ms": {"expand": elapsed_ms(start)}}
    ranked = sage_expand(
        rt.bundle,
        state["question"],
        [(s["key"], float(s["score"])) for s in seeds],
        cfg.k_prime,
        weight=cfg.sage_weight,
        use_similarity_edges=cfg.use_similarity_edges,
    )
    have = {s["key"] for s in seeds}
    floor = float(seeds[-1]["score"])
    expanded: list[SeedItem] = []
    for key, score in ranked:
        if key in have or key not in rt.bundle.skb.nodes:
            continue
        have.add(key)
        floor = min(floor, float(score))
        expanded.append(SeedItem(key=key, score=floor, origin="sage"))
        if len(expanded) >= cfg.k_prime:
            break
    return {"expanded": expanded, "timings_ms": {"expand": elapsed_ms(start)}}

def finalize(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    start = time.perf_counter()
    question = state["question"]
    pool = state.get("candidates") or {}
    finish = state.get("finish") or {}
    finish_prov = finish.get("provenance")
    step = int(state.get("step") or 0)
    sage_prov = Provenance(tool="sage_expand", step=step, query=question)
    items: list[ContextItem] = []
    for rank, seed in enumerate([*(state.get("seeds") or []), *(state.get("expanded") or [])], 1):
        key = seed["key"]
        node = rt.bundle.skb.nodes[key]
        cand = pool.get(key)
        provs = [Provenance(**p) for p in (cand["provenance"] if cand else [])]
        if finish_prov and key in (finish.get("keys") or []):
            provs.append(Provenance(**finish_prov))
        if seed["origin"] == "sage":
            provs.append(sage_prov)
        items.append(
            ContextItem(
                key=key,
                label=node.label,
                name=node.name,
                score=float(seed["score"]),
                rank=rank,
                origin=seed["origin"],  # type: ignore[arg-type]
                provenance=provs,
            )
        )
    answer = _answer_text(question, items)
    notes = _shortfall_notes(rt.settings(config), state)
    timings = dict(state.get("timings_ms") or {})
    timings["finalize"] = elapsed_ms(start)
    timings["total"] = round(sum(v for k, v in timings.items() if k not in _SUB_STAGES), 3)
    usage = {stage: StageUsage(**u) for stage, u in (state.get("usage") or {}).items()}
    result = AgentResult(
        question=question,
        answer=answer,
        context=items,
        target_type=state.get("target_type"),
        relation_paths=[[path_text([s]) for s in p] for p in state.get("relation_paths") or []],
        path_scores=_path_scores(state.get("scratchpad") or []),
        steps=step,
        used_explicit_relations=bool(state.get("used_explicit_relations")),
        fallback_used=bool(state.get("fallback_used")),
        degraded=list(state.get("degraded") or []),
        notes=notes,
        constraints=state.get("constraint_report"),
        rerank=state.get("rerank_report"),
        timings_ms=timings,
        llm_calls=sum(u.llm_calls for u in usage.values()),
        prompt_tokens=sum(u.prompt_tokens for u in usage.values()),
        completion_tokens=sum(u.completion_tokens for u in usage.values()),
        tool_calls=int(state.get("tool_calls") or 0),
        tool_output_tokens=int(state.get("tool_output_tokens") or 0),
        usage_by_stage=usage,
        stopped_by_budget=state.get("budget_stop"),  # type: ignore[arg-type]  # one of BUDGET_NAMES
        plan=state.get("plan_report"),
        guided=state.get("guided_rounds") or None,
    )
    return {"result": result, "messages": [AIMessage(answer)], "timings_ms": {"finalize": timings["finalize"]}}



def _path_scores(messages: Sequence[Any]) -> dict[str, Any] | None:
    """The path planner's scored candidates, carried by the planner message that walked them (the last)."""
    for message in reversed(messages):
        found = getattr(message, "additional_kwargs", {}).get("path_scores")
        if isinstance(found, dict):
            return found
    return None


def _shortfall_notes(cfg: AgentConfig, state: AgentState) -> list[str]:
    """Say why fewer than k seeds or k' expansions came back, instead of a silently short list."""
    notes: list[str] = []
    seeds = len(state.get("seeds") or [])
    if seeds < cfg.k:
        how = (
            "raise per_call_k (K, results per tool call) or max_rounds"
            if cfg.fallback_fill
            else "set fallback_fill=true to top up with hybrid search, or raise per_call_k (K, results per tool call)"
        )
        notes.append(
            f"k={cfg.k} seed nodes asked, {seeds} found: the planner's tool calls return at most "
            f"per_call_k={cfg.per_call_k} results each and found no more candidates; {how}"
        )
    expanded = len(state.get("expanded") or [])
    skipped = cfg.policy == "never" or (
        cfg.policy == "skip-when-explicit-edges" and bool(state.get("used_explicit_relations"))
    )
    if cfg.k_prime > expanded and seeds and not skipped:  # a configured skip is not a shortfall
        notes.append(
            f"k'={cfg.k_prime} expansions asked, {expanded} added: the seeds have no more one-hop neighbours "
            "or similar nodes to add"
        )
    return notes


def _answer_text(question: str, items: Sequence[ContextItem]) -> str:
    if not items:
        return f'No nodes found for "{question}".'
    lines = [f"{item.rank}. {item.name} [{item.key}] ({item.label})" for item in items[:ANSWER_ITEMS]]
    return render_prompt("answer.md", question=question, items="\n".join(lines)).strip()
