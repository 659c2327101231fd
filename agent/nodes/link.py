"""The first node: read the question, reset the run's state, link the entities it names."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from agent.nodes.common import elapsed_ms, question_of, to_dict
from agent.runtime import Runtime
from agent.state import AgentState
from graphs.errors import ConfigError
from graphs.text_safety import clean_text


def link_entities(rt: Runtime, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    start = time.perf_counter()
    cfg = rt.settings(config)
    question = clean_text(question_of(state))
    if len(question) > cfg.max_question_chars:
        raise ConfigError(
            f"the question is {len(question):,} characters; the limit is max_question_chars="
            f"{cfg.max_question_chars:,}: shorten it (ask about the key facts) or raise the limit"
        )
    update: dict[str, Any] = {
        "question": question,
        "linked_entities": [],
        "candidates": {},
        "step": 0,
        "repairs": 0,
        "done": False,
        "finish": None,
        "used_explicit_relations": False,
        "fallback_used": False,
        "seeds": [],
        "expanded": [],
        "tool_calls": 0,
        "tool_output_tokens": 0,
        "pending_calls": [],
        "round_messages": [],
        "planner_offline": False,
        "started_at": time.time(),
        "budget_stop": None,
        "plan_report": None,
        "scratchpad": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
    }
    if not state.get("messages"):
        update["messages"] = [HumanMessage(question)]
    degraded: list[str] = []
    partial = rt.bundle.missing_note()  # a staged index before its later stages: say what is missing
    if partial is not None:
        degraded.append(partial)
    if cfg.max_entities > 0:
        linked = rt.linker().link(
            question, cfg.max_entities, clauses=cfg.clause_settings(), confidence_power=cfg.link_confidence_power
        )
        update["linked_entities"] = [to_dict(e) for e in linked]
    update["degraded"] = degraded
    update["constraint_report"] = update["rerank_report"] = None  # a new question: no stale reports
    update["timings_ms"] = {"link_entities": elapsed_ms(start)}
    return update
