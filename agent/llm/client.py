"""The chat-model client: building the OpenAI-compatible model, one call with bounded retries, and
what a call's prompt is (text and tokens).

Why our own retries: one policy (tenacity), counted and bounded, with timeouts not retried (the same
prompt takes as long again); the client library's retries are switched off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from agent.config import AgentConfig
from agent.llm.deadline import deadline_http_client, total_deadline
from graphs.errors import ConfigError, PlannerCallError, PlannerError, PlannerTimeoutError
from graphs.tokens import count_tokens

#: HTTP statuses worth the same request again after a wait (408, a timeout, is not among them).
_TRANSIENT_STATUS = {409, 429, 500, 502, 503, 504}


def openai_chat_model(config: AgentConfig) -> BaseChatModel:
    """``ChatOpenAI`` for the configured model and endpoint (``OPENAI_API_KEY`` required)."""
    if not os.environ.get("OPENAI_API_KEY"):
        raise ConfigError(
            "planner 'openai' needs OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server); "
            "set them or use --planner offline"
        )
    from langchain_openai import ChatOpenAI

    kwargs: dict[str, Any] = {
        "model": config.model,
        "temperature": config.temperature,
        "timeout": config.llm_timeout_s,
        "max_retries": 0,  # retries are ours (tenacity): one policy, counted, bounded
        "http_client": deadline_http_client(config.llm_timeout_s),  # a total deadline per call (invoke_with_retry)
    }
    if config.base_url:
        kwargs["base_url"] = config.base_url
    return ChatOpenAI(**kwargs)


def _openai_module() -> Any:
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on openai
        return None
    return openai


def is_timeout(exc: BaseException) -> bool:
    """The client gave up waiting for the reply (as opposed to not reaching the server)."""
    openai = _openai_module()
    if openai is not None and isinstance(exc, openai.APITimeoutError):
        return True
    if isinstance(exc, TimeoutError):
        return True
    return type(exc).__name__ in {"ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException"}


def is_transient(exc: BaseException) -> bool:
    """Worth retrying the same request after a wait: rate limits (429), connection failures and
    overloaded servers (5xx). Timeouts are not: the same prompt takes as long again."""
    if is_timeout(exc):
        return False
    openai = _openai_module()
    if openai is not None:
        if isinstance(exc, openai.APIConnectionError | openai.RateLimitError):
            return True
        if isinstance(exc, openai.InternalServerError):
            return True
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in _TRANSIENT_STATUS
    if isinstance(exc, ConnectionError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status in _TRANSIENT_STATUS


def prompt_text(messages: Sequence[BaseMessage], model: object = None) -> str:
    """What a call sends, as one text to count: every message's content and tool calls, and the tool
    schemas bound to ``model`` (a ``bind_tools`` binding carries them in ``kwargs``)."""
    parts = [str(m.content) + (json.dumps(m.tool_calls) if isinstance(m, AIMessage) and m.tool_calls else "")
             for m in messages]
    kwargs = getattr(model, "kwargs", None)
    if isinstance(kwargs, Mapping) and kwargs.get("tools"):
        parts.append(json.dumps(kwargs["tools"], ensure_ascii=False, default=str))
    return "\n".join(parts)


def prompt_tokens(messages: Sequence[BaseMessage], model_name: str | None, model: object = None) -> int:
    """The prompt's tokens before the call (``graphs.tokens.count_tokens``, calibrated for ``model_name``
    by the usage its earlier replies reported)."""
    return count_tokens(prompt_text(messages, model), model_name)


def invoke_with_retry(
    model: Runnable[LanguageModelInput, BaseMessage],
    messages: Sequence[BaseMessage],
    config: AgentConfig,
    timeout_s: float | None = None,
) -> AIMessage:
    """One model call; rate limits, connection errors and 5xx retried with capped exponential backoff,
    then PlannerCallError. A timeout raises PlannerTimeoutError at once (no retry with the same prompt).

    ``timeout_s`` overrides the client's timeout for this call (a wall-time budget shortens it); it is each
    attempt's total deadline (``agent.llm.deadline``), which a dripping response cannot extend.
    """
    retrying = Retrying(
        stop=stop_after_attempt(config.llm_attempts),
        wait=wait_exponential(multiplier=config.llm_backoff_initial_s, max=config.llm_backoff_max_s),
        retry=retry_if_exception(is_transient),
        reraise=False,
    )
    kwargs: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
    try:
        for attempt in retrying:
            with attempt, total_deadline(timeout_s if timeout_s is not None else config.llm_timeout_s):
                reply = model.invoke(list(messages), **kwargs)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise PlannerCallError(
            f"the planner model failed {config.llm_attempts} times with transient errors (last: {last}); "
            "check OPENAI_BASE_URL / network / rate limits, or use --planner offline"
        ) from last
    except PlannerError:
        raise
    except Exception as exc:
        if is_timeout(exc):
            waited = timeout_s if timeout_s is not None else config.llm_timeout_s
            raise PlannerTimeoutError(
                f"the planner model timed out after {waited:g} s on a prompt of about "
                f"{prompt_tokens(messages, config.model, model):,} tokens; not retried with the same prompt: raise llm_timeout_s, "
                "use a faster endpoint, or shrink the prompt (planner_mode plan-once, tool_output_tokens, max_entities)"
            ) from exc
        raise PlannerCallError(f"planner model call failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(reply, AIMessage):
        raise PlannerCallError(f"planner model returned {type(reply).__name__}, expected an AIMessage")
    return reply

