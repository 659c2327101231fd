"""The planner's model calls: building the chat model, retrying transient API errors,
checking tool calls before they run, asking for a JSON plan, and counting LLM cost.

Why check tool calls ourselves: a model that names an unknown tool or passes arguments the
schema rejects should get a precise error it can repair from, not crash the run; and after
``max_repairs`` such rounds the agent stops asking and falls back to search.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from agent.config import AgentConfig
from agent.offline_planner import OfflinePlanner
from graphs.errors import ConfigError, PlannerError
from graphs.model import GraphSchema
from graphs.text_safety import quoted
from prompts import render_prompt

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

_TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504}


class PlannerCallError(PlannerError):
    """The model call itself failed (unreachable, timed out, rate-limited, garbage reply) after the
    bounded retries -- as opposed to a reply that arrived but made no sense. The agent reacts by
    degrading to the offline planner (``AgentConfig.degrade_to_offline``)."""


def make_chat_model(config: AgentConfig, bundle: IndexBundle) -> BaseChatModel:
    """The chat model behind the planner: ``ChatOpenAI`` or the offline (rule-based) planner."""
    if config.planner == "offline":
        return OfflinePlanner(bundle)
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
    }
    if config.base_url:
        kwargs["base_url"] = config.base_url
    return ChatOpenAI(**kwargs)


def is_transient(exc: BaseException) -> bool:
    """Connection problems, timeouts, 429 and 5xx are worth retrying; 4xx request errors are not."""
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on openai
        openai = None  # type: ignore[assignment]
    if openai is not None:
        if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | openai.RateLimitError):
            return True
        if isinstance(exc, openai.InternalServerError):
            return True
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code in _TRANSIENT_STATUS
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status in _TRANSIENT_STATUS


def invoke_with_retry(
    model: Runnable[LanguageModelInput, BaseMessage], messages: Sequence[BaseMessage], config: AgentConfig
) -> AIMessage:
    """One model call; transient errors retried with capped exponential backoff, then PlannerError."""
    retrying = Retrying(
        stop=stop_after_attempt(config.llm_attempts),
        wait=wait_exponential(multiplier=config.llm_backoff_initial_s, max=config.llm_backoff_max_s),
        retry=retry_if_exception(is_transient),
        reraise=False,
    )
    try:
        for attempt in retrying:
            with attempt:
                reply = model.invoke(list(messages))
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise PlannerCallError(
            f"the planner model failed {config.llm_attempts} times with transient errors (last: {last}); "
            "check OPENAI_BASE_URL / network / rate limits, or use --planner offline"
        ) from last
    except PlannerError:
        raise
    except Exception as exc:
        if is_transient(exc):  # pragma: no cover - handled by tenacity above
            raise PlannerCallError(f"planner model call failed: {exc}") from exc
        raise PlannerCallError(f"planner model call failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(reply, AIMessage):
        raise PlannerCallError(f"planner model returned {type(reply).__name__}, expected an AIMessage")
    return reply


@dataclass
class Usage:
    """LLM calls and tokens of one stage."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, message: AIMessage) -> None:
        self.llm_calls += 1
        meta: Mapping[str, Any] = message.usage_metadata or {}
        self.prompt_tokens += int(meta.get("input_tokens", 0) or 0)
        self.completion_tokens += int(meta.get("output_tokens", 0) or 0)

    def as_dict(self) -> dict[str, int]:
        return {
            "llm_calls": self.llm_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass
class CheckedCalls:
    """A model turn split into calls that may run and error messages to feed back."""

    valid: list[ToolCall] = field(default_factory=list)
    errors: list[ToolMessage] = field(default_factory=list)


def _error_message(call_id: str, name: str, message: str) -> ToolMessage:
    payload = {"error": {"type": "invalid_tool_call", "message": message, "hint": "fix the call and try again"}}
    return ToolMessage(
        content=json.dumps(payload), tool_call_id=call_id or "invalid", name=name or "unknown", status="error"
    )


_visible_lock = threading.Lock()
_visible: dict[int, tuple[BaseTool, list[str]]] = {}


def visible_args(tool: BaseTool) -> list[str]:
    """The argument names the model sees for ``tool`` (injected ones hidden), computed once per tool
    object: generating the JSON schema costs milliseconds, and a run checks every call against it."""
    with _visible_lock:
        hit = _visible.get(id(tool))
        if hit is not None and hit[0] is tool:
            return hit[1]
    names = list(tool.tool_call_schema.model_json_schema().get("properties", {}))  # type: ignore[union-attr]
    with _visible_lock:
        if len(_visible) > 256:
            _visible.clear()
        _visible[id(tool)] = (tool, names)
    return names


def check_tool_calls(message: AIMessage, tools: Mapping[str, BaseTool]) -> CheckedCalls:
    """Validate every tool call of a model turn against the tools' declared argument schemas."""
    out = CheckedCalls()
    for bad in message.invalid_tool_calls:
        name = bad.get("name") or "unknown"
        detail = bad.get("error") or "arguments are not valid JSON"
        out.errors.append(
            _error_message(bad.get("id") or "", name, f"malformed call to {name!r}: {detail}; args={bad.get('args')!r}")
        )
    for call in message.tool_calls:
        name, call_id = call["name"], call.get("id") or ""
        tool = tools.get(name)
        if tool is None:
            out.errors.append(
                _error_message(call_id, name, f"unknown tool {name!r}; available tools: {', '.join(sorted(tools))}")
            )
            continue
        visible = set(visible_args(tool))
        args = dict(call.get("args") or {})
        extra = sorted(set(args) - visible)
        if extra:
            out.errors.append(
                _error_message(call_id, name, f"unknown argument(s) {extra} for {name!r}; allowed: {sorted(visible)}")
            )
            continue
        schema = tool.args_schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            try:
                schema.model_validate(args)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}" for e in exc.errors()
                )
                out.errors.append(_error_message(call_id, name, f"invalid arguments for {name!r}: {problems}"))
                continue
        out.valid.append(call)
    return out


# -- plan stage ----------------------------------------------------------------------------
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_plan(text: str, schema: GraphSchema, max_hops: int) -> tuple[str | None, list[list[dict[str, str]]]]:
    """Parse and validate the model's JSON plan; raises PlannerError naming what is wrong."""
    match = _JSON_OBJECT.search(text or "")
    if match is None:
        raise PlannerError(f"plan is not a JSON object: {text[:200]!r}")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise PlannerError(f"plan is not valid JSON ({exc}): {text[:200]!r}") from exc
    if not isinstance(data, dict):
        raise PlannerError("plan must be a JSON object")
    labels = set(schema.label_names())
    rels = set(schema.relation_names())
    target = data.get("target_type")
    if target is not None and target not in labels:
        raise PlannerError(f"plan names unknown target_type {target!r}; valid labels: {sorted(labels)}")
    paths: list[list[dict[str, str]]] = []
    for raw in data.get("relation_paths") or []:
        if not isinstance(raw, list) or not raw or len(raw) > max_hops:
            continue
        path: list[dict[str, str]] = []
        for step in raw:
            if not isinstance(step, dict):
                break
            rel, direction, to_label = step.get("rel"), step.get("direction", "out"), step.get("to_label")
            if rel not in rels or direction not in ("out", "in") or to_label not in labels:
                break
            path.append({"rel": str(rel), "direction": str(direction), "to_label": str(to_label)})
        else:
            paths.append(path)
    return target, paths


def llm_plan(
    model: BaseChatModel,
    question: str,
    schema: GraphSchema,
    linked: Sequence[Mapping[str, Any]],
    config: AgentConfig,
    usage: Usage,
) -> tuple[str | None, list[list[dict[str, str]]]]:
    """Ask the model for the answer type and relation paths (one call, no tools)."""
    system = render_prompt("plan_request.md", schema=schema.render(), max_hops=config.max_hops)
    # node names are data: JSON-quoted so text inside them reads as a value, not as instructions
    entities = "\n".join(f"- {e.get('key')} ({e.get('label')}): {quoted(e.get('name'))}" for e in linked) or "(none)"
    human = f"Question: {question}\nLinked entities:\n{entities}"
    reply = invoke_with_retry(model, [SystemMessage(system), HumanMessage(human)], config)
    usage.add(reply)
    return parse_plan(str(reply.text), schema, config.max_hops)
