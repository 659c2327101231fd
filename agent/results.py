"""What the agent hands back: a ranked, provenance-carrying context plus the cost of getting it.

Why pydantic: results cross process boundaries (CLI `--json`, eval runs, MCP), so they
need one validated, serialisable shape that every consumer can rely on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class _JsonModel(BaseModel):
    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)


class Provenance(_JsonModel):
    """Which tool call, in which step, with which query surfaced a node."""

    tool: str
    step: int
    query: str


class ContextItem(_JsonModel):
    key: str
    label: str
    name: str
    score: float
    rank: int
    origin: Literal["seed", "sage", "fallback"]
    provenance: list[Provenance] = Field(default_factory=list)


class StageUsage(_JsonModel):
    """LLM cost of one stage (``plan``, ``act``)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_prompt_tokens: int = Field(
        default=0, description="the pre-call estimates of the same calls (graphs.tokens, calibrated per model)"
    )


class AgentResult(_JsonModel):
    question: str
    answer: str
    context: list[ContextItem] = Field(default_factory=list)
    target_type: str | None = None
    relation_paths: list[list[str]] = Field(default_factory=list)
    path_scores: dict[str, Any] | None = Field(
        default=None,
        description="relation paths the path planner scored from the topic entity: topic, walked (how many of "
        "the best were walked), candidates (path as >rel/<rel steps, score, and its parts: words, meaning "
        "(render), answer type, order, pivot...)",
    )
    steps: int = 0
    used_explicit_relations: bool = False
    fallback_used: bool = False
    degraded: list[str] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="why the context is shorter than asked (k, k') and how to get more"
    )
    constraints: dict[str, Any] | None = Field(
        default=None,
        description="constraint stage (AgentConfig.constraints): source (llm|plan), extraction report, constraints, "
        "ungrounded mentions and each relaxation step (active constraints, the one dropped, candidates found)",
    )
    rerank: dict[str, Any] | None = Field(
        default=None, description="rerank stage (AgentConfig.rerank): mode, candidates, calls, changed, order, notes"
    )
    timings_ms: dict[str, float] = Field(default_factory=dict)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_tokens: int = Field(
        default=0,
        description="tokens (graphs.tokens) of the tool results' text a model read (0 where the offline planner "
        "planned: it reads the typed results)",
    )
    usage_by_stage: dict[str, StageUsage] = Field(default_factory=dict)
    stopped_by_budget: Literal["llm_calls", "prompt_tokens", "wall_time"] | None = Field(
        default=None, description="the per-question budget that stopped the LLM calls, if one did"
    )
    guided: list[dict[str, Any]] | None = Field(
        default=None,
        description="guided mode: one row per round (attempts, valid_first_try, valid, choice, estimated and reported "
        "prompt tokens, error)",
    )
    plan: dict[str, Any] | None = Field(
        default=None,
        description="how the LLM plan came about: mode, attempts, valid_first_try, repaired, errors, fixes "
        "(None when no LLM was asked for a plan)",
    )

    def ranked(self) -> list[tuple[str, float]]:
        """(key, score) in rank order: the shape evals consume."""
        return [(item.key, item.score) for item in self.context]
