"""The planner's way to stop: the answer keys, best first, with optional scores and confidence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool
from pydantic import Field, model_validator

from tools.common import InjectedArgs, SKBTool, truncate
from tools.results import DEFAULT_BUDGET_TOKENS, Finish, ToolProvenance, tool_output

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "finish"
DESCRIPTION = (
    "Stop searching and return the answer node keys, best first (only keys that tools returned). "
    "Optional `scores` (same length as keys, higher is better) and `confidence` in [0, 1]."
)


class FinishArgs(InjectedArgs):
    keys: list[str] = Field(max_length=1000, description="answer node keys, best first")
    scores: list[float] | None = Field(default=None, description="one score per key, higher is better")
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _scores_match_keys(self) -> FinishArgs:
        if self.scores is not None and len(self.scores) != len(self.keys):
            raise ValueError(f"scores has {len(self.scores)} values but keys has {len(self.keys)}; give one per key")
        return self


def make_finish(bundle: IndexBundle, *, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> BaseTool:
    def run(
        keys: list[str],
        scores: list[float] | None = None,
        confidence: float | None = None,
        step: int = 0,
        question: str | None = None,
    ) -> tuple[str, Any]:
        seen: set[str] = set()
        accepted: list[str] = []
        accepted_scores: list[float] = []
        unknown: list[str] = []
        for i, key in enumerate(keys):
            if key in seen:
                continue
            seen.add(key)
            if key not in bundle.skb.nodes:
                unknown.append(key)
                continue
            accepted.append(key)
            accepted_scores.append(float(scores[i]) if scores is not None else 1.0 - i / max(len(keys), 1))
        result = Finish(
            provenance=ToolProvenance(tool=NAME, step=step, query=truncate("finish " + ", ".join(keys[:20]), 500)),
            keys=accepted,
            scores=accepted_scores,
            confidence=confidence,
            unknown=unknown,
        )
        return tool_output(result, budget_tokens)

    return SKBTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=FinishArgs, response_format="content_and_artifact"
    )
