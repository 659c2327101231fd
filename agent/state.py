"""The LangGraph state of one agent run.

Why a separate ``scratchpad``: ``messages`` is the conversation the caller sees (their question,
our answer); the planner's system prompt, plan block, tool calls and tool results are working
notes that would bloat a chat history, yet they stay in the state for tracing and streaming.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict  # pydantic (Studio's JSON schemas) needs it before Python 3.12

from agent.results import AgentResult


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer: later keys win; lets every node add its own timing/usage entry."""
    return {**(left or {}), **(right or {})}


class Candidate(TypedDict):
    """One node in the candidate pool: accumulated evidence and where it came from."""

    score: float
    support: int
    label: str
    provenance: list[dict[str, Any]]


class SeedItem(TypedDict):
    key: str
    score: float
    origin: str


class AgentState(TypedDict, total=False):
    question: str
    messages: Annotated[list[AnyMessage], add_messages]
    scratchpad: Annotated[list[AnyMessage], add_messages]
    linked_entities: list[dict[str, Any]]
    target_type: str | None
    relation_paths: list[list[dict[str, Any]]]
    candidates: dict[str, Candidate]
    observations: Annotated[list[dict[str, Any]], operator.add]
    step: int
    repairs: int
    done: bool
    finish: dict[str, Any] | None
    used_explicit_relations: bool
    fallback_used: bool
    seeds: list[SeedItem]
    constraint_report: dict[str, Any] | None
    """The constraint stage's extraction, constraints and relaxation steps (agent.stages.constraints)."""
    rerank_report: dict[str, Any] | None
    """The rerank stage's mode, calls, new order and notes (agent.stages.rerank)."""
    expanded: list[SeedItem]
    degraded: Annotated[list[str], operator.add]
    timings_ms: Annotated[dict[str, float], merge_dicts]
    usage: Annotated[dict[str, dict[str, int]], merge_dicts]
    tool_calls: int
    tool_output_tokens: int
    """Tokens (graphs.tokens) of every tool result's model-facing text so far (what an LLM planner reads)."""
    pending_calls: list[dict[str, Any]]
    """The current round's validated tool calls (args clamped), set by call_planner, run by run_tools."""
    round_messages: list[AnyMessage]
    """The current round's tool messages in call order (results, then rejected calls), for observe."""
    planner_offline: bool
    """The configured planner failed for good this run (or plan-once mode); later rounds use the offline planner."""
    started_at: float
    """Epoch seconds when the question started: the wall-time budget (max_wall_s) counts from here."""
    budget_stop: str | None
    """Which per-question budget stopped the model calls (llm_calls | prompt_tokens | wall_time), if any."""
    plan_report: dict[str, Any] | None
    guided_rounds: Annotated[list[dict[str, Any]], operator.add]
    """How the LLM plan came about (attempts, valid first try, repaired, errors); None without an LLM plan."""
    result: AgentResult


class AgentInput(TypedDict, total=False):
    """What a caller passes: a question, or a chat whose last human message is the question."""

    question: str
    messages: Annotated[list[AnyMessage], add_messages]


class AgentOutput(TypedDict, total=False):
    """What a caller gets back: the question as read, the ranked result and the answer appended to the chat."""

    question: str
    result: AgentResult
    messages: Annotated[list[AnyMessage], add_messages]
