"""The one interface every evaluated method goes through.

Baselines, SAGE expansion and the agent are all reduced to "a question in, a
ranked list of node keys out, plus what it cost", so the runner, the metrics and
the report never special-case a method.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field


class Retrieval(BaseModel):
    """What one method returned for one question, and what it cost."""

    ranked: list[tuple[str, float]] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_tokens: int = 0
    """chars/4 of the tool results' model-facing text (what an LLM planner would read)."""


@runtime_checkable
class Retriever(Protocol):
    """A named, configured method; ``config`` is written verbatim into the report."""

    name: str
    config: dict[str, Any]

    def retrieve(self, question: str) -> Retrieval: ...
