"""What readers of the trace database get back: one run (as a tree) and one trace's summary line.

Why LangSmith's run-schema field names: the same mental model as the hosted tool, so traces can be
exported or compared.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field


class TraceRun(BaseModel):
    """One stored run, in LangSmith's run-schema field names, with its children when read as a tree."""

    id: str
    trace_id: str
    parent_run_id: str | None = None
    dotted_order: str = ""
    name: str
    run_type: str
    status: str = "success"
    inputs: Any = None
    outputs: Any = None
    error: str | None = None
    start_time: str
    end_time: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    events: list[Any] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    stage: str | None = None
    llm_call: bool = False
    child_runs: list[TraceRun] = Field(default_factory=list)

    @property
    def duration_ms(self) -> float | None:
        if not self.end_time:
            return None
        start = _dt.datetime.fromisoformat(self.start_time)
        end = _dt.datetime.fromisoformat(self.end_time)
        return (end - start).total_seconds() * 1000.0

    def walk(self) -> Iterable[tuple[int, TraceRun]]:
        """(depth, run) in tree order."""
        stack: list[tuple[int, TraceRun]] = [(0, self)]
        while stack:
            depth, run = stack.pop()
            yield depth, run
            stack.extend((depth + 1, child) for child in reversed(run.child_runs))

    def subtree_tokens(self) -> tuple[int, int, int]:
        """(prompt, completion, total) tokens of every LLM run at or under this one."""
        p = c = t = 0
        for _, run in self.walk():
            p += run.prompt_tokens
            c += run.completion_tokens
            t += run.total_tokens
        return p, c, t


class TraceSummary(BaseModel):
    """One line of `skb trace list`: a root run and totals over its trace."""

    id: str
    name: str
    status: str
    start_time: str
    duration_ms: float | None
    runs: int
    llm_calls: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    preview: str = ""
    error: str | None = None
