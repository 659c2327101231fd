"""Checking a model turn's tool calls against the tools' declared schemas before any runs.

Why check them ourselves: a model that names an unknown tool or passes arguments the schema rejects
should get a precise error it can repair from, not crash the run; and after ``max_repairs`` such
rounds the agent stops asking and falls back to search.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError


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

