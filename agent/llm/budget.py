"""What one question may spend on the model (calls, prompt tokens, wall time), what each stage spent,
and the one way every caller reacts when a budgeted call gives no reply (``call_or_fallback``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from agent.config import AgentConfig
from agent.llm.client import invoke_with_retry, prompt_text, prompt_tokens
from graphs.errors import BudgetSpentError, PlannerError, PlannerTimeoutError
from graphs.tokens import raw_count, record_usage

_T = TypeVar("_T")


@dataclass
class Usage:
    """LLM calls and tokens of one stage."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_prompt_tokens: int = 0
    """The pre-call estimates (``prompt_tokens`` the function) of the same calls: reports show both."""

    def add(self, message: AIMessage, estimate: int = 0) -> None:
        self.llm_calls += 1
        meta: Mapping[str, Any] = message.usage_metadata or {}
        self.prompt_tokens += int(meta.get("input_tokens", 0) or 0)
        self.completion_tokens += int(meta.get("output_tokens", 0) or 0)
        self.estimated_prompt_tokens += estimate

    def as_dict(self) -> dict[str, int]:
        return {
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated_prompt_tokens": self.estimated_prompt_tokens,
        }


#: Names of the per-question budgets, as reported in AgentResult.stopped_by_budget.
BUDGET_NAMES = ("llm_calls", "prompt_tokens", "wall_time")


@dataclass
class Budget:
    """What one question may still spend on the model: LLM calls, prompt tokens, wall time.

    Built per graph node from the config and the run's usage so far (``Budget.of``); every model call
    of the node goes through ``call`` which refuses (BudgetSpentError) before a call that the budget
    does not allow, and shortens the call's timeout to the wall time left.
    """

    max_calls: int | None = None
    max_prompt_tokens: int | None = None
    model_name: str | None = None
    """Whose calibration the pre-call estimate uses (``graphs.tokens``)."""
    deadline: float | None = None
    """Epoch seconds (``time.time()``) after which no model call starts."""
    calls: int = 0
    prompt_tokens: int = 0

    @classmethod
    def of(
        cls, cfg: AgentConfig, usage: Mapping[str, Mapping[str, Any]] | None, started_at: float | None
    ) -> Budget:
        spent = list((usage or {}).values())
        return cls(
            max_calls=cfg.max_llm_calls,
            max_prompt_tokens=cfg.max_prompt_tokens,
            model_name=cfg.model,
            deadline=(started_at + cfg.max_wall_s) if cfg.max_wall_s is not None and started_at else None,
            calls=sum(int(u.get("llm_calls", 0) or 0) for u in spent),
            prompt_tokens=sum(int(u.get("prompt_tokens", 0) or 0) for u in spent),
        )

    def check(self, messages: Sequence[BaseMessage], model: object = None) -> int:
        """Raise BudgetSpentError when no further call fits; returns the call's prompt estimate (real tokens,
        calibrated for the model, with the tool schemas bound to ``model``)."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise BudgetSpentError(
                "llm_calls", f"LLM call budget spent ({self.calls} of max_llm_calls={self.max_calls})"
            )
        estimate = prompt_tokens(messages, self.model_name, model)
        if self.max_prompt_tokens is not None and self.prompt_tokens + estimate > self.max_prompt_tokens:
            raise BudgetSpentError(
                "prompt_tokens",
                f"prompt token budget spent ({self.prompt_tokens:,} used + about {estimate:,} for the next call "
                f"> max_prompt_tokens={self.max_prompt_tokens:,})",
            )
        if self.deadline is not None and time.time() >= self.deadline:
            raise BudgetSpentError("wall_time", "wall-time budget spent (max_wall_s) before the next LLM call")
        return estimate

    def timeout(self, cfg: AgentConfig) -> float | None:
        """The call's timeout: ``llm_timeout_s``, or less when the wall-time budget ends sooner."""
        if self.deadline is None:
            return None
        left = self.deadline - time.time()
        return max(0.05, min(cfg.llm_timeout_s, left)) if left < cfg.llm_timeout_s else None

    def call(
        self,
        model: Runnable[LanguageModelInput, BaseMessage],
        messages: Sequence[BaseMessage],
        cfg: AgentConfig,
        usage: Usage,
    ) -> AIMessage:
        """One budgeted model call (retries as ``invoke_with_retry``); its cost is added to ``usage``, and the
        endpoint's reported prompt tokens calibrate the model's estimate (``graphs.tokens.record_usage``)."""
        estimate = self.check(messages, model)
        timeout = self.timeout(cfg)
        try:
            reply = invoke_with_retry(model, messages, cfg, timeout_s=timeout)
        except PlannerTimeoutError as exc:
            if timeout is not None:  # the wall-time budget cut this call short
                raise BudgetSpentError("wall_time", f"wall-time budget spent (max_wall_s) during an LLM call: {exc}") from exc
            raise
        usage.add(reply, estimate)
        self.calls += 1
        meta: Mapping[str, Any] = reply.usage_metadata or {}
        reported = int(meta.get("input_tokens", 0) or 0)
        self.prompt_tokens += reported
        if self.model_name and reported:
            record_usage(self.model_name, raw_count(prompt_text(messages, model), self.model_name), reported)
        return reply


@dataclass(frozen=True)
class CallFailed:
    """A budgeted model call that gave no reply: the caller goes on without the model's answer."""

    error: PlannerError
    budget: str | None = None
    """The budget that refused the call (``BudgetSpentError.budget``); None when the call itself failed."""
    offline: bool = False
    """The model is done for this run: the rest of the run uses the offline planner (or stops asking)."""


def call_or_fallback(
    call: Callable[[], _T], *, degrade: bool | None = None, fatal: type[PlannerError] = PlannerError
) -> _T | CallFailed:
    """``call()`` (one or more budgeted model calls), or how it failed, for the caller to fall back on.

    Why one function: every place that asks the model (the plan, a planner round, a guided round, the
    constraint and rerank stages) reacts to the same failures the same way. A spent budget always
    falls back (``offline``: nothing later can call the model either). A failure of type ``fatal`` is
    re-raised when the run may not degrade (``degrade`` False) and otherwise sends the rest of the run
    offline; ``degrade`` None: the caller has its own fallback and nothing is re-raised."""
    try:
        return call()
    except BudgetSpentError as exc:
        return CallFailed(exc, budget=exc.budget, offline=True)
    except PlannerError as exc:
        if degrade is False and isinstance(exc, fatal):
            raise
        return CallFailed(exc, offline=degrade is True and isinstance(exc, fatal))

