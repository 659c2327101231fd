"""Small helpers every node uses: timings, the question, plain dicts, relation paths as text."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import HumanMessage

from agent.state import AgentState
from graphs.errors import ConfigError


def elapsed_ms(start: float) -> float:
    """Milliseconds since ``start`` (``time.perf_counter()``), rounded for reports."""
    return round((time.perf_counter() - start) * 1000.0, 3)


def question_of(state: AgentState) -> str:
    """The question: the state's, else the last human message's text."""
    question = (state.get("question") or "").strip()
    if question:
        return question
    for message in reversed(state.get("messages") or []):
        if isinstance(message, HumanMessage):
            text = str(message.text).strip()
            if text:
                return text
    raise ConfigError('the agent needs a question: pass {"question": "..."} or {"messages": [HumanMessage(...)]}')


def to_dict(obj: Any) -> dict[str, Any]:
    """A mapping, pydantic model or plain object as a dict (state values stay plain data)."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(vars(obj))


def path_text(path: Sequence[Mapping[str, Any]]) -> str:
    """A relation path as ``-[HAS_PHENOTYPE]->Phenotype`` / ``<-[CAUSES]-Gene``."""
    parts = []
    for step in path:
        rel, to = step.get("rel"), step.get("to_label")
        parts.append(f"-[{rel}]->{to}" if step.get("direction", "out") == "out" else f"<-[{rel}]-{to}")
    return "".join(parts)


def add_time(state: AgentState, stage: str, start: float) -> dict[str, float]:
    """The stage's accumulated time (the act loop's nodes run once per round) plus the ``act`` total."""
    timings = state.get("timings_ms") or {}
    elapsed = elapsed_ms(start)
    return {
        stage: round(float(timings.get(stage, 0.0)) + elapsed, 3),
        "act": round(float(timings.get("act", 0.0)) + elapsed, 3),
    }

