"""Model-written text that goes back into the next prompt, cut to a token budget.

Why: in loop mode the model's reply joins the history every later call resends, and a plan repair
resends the rejected reply; only the number of calls was bounded, so one 5 MB reply made every later
request 5 MB larger. What the model wrote is cut (counted with the real tokenizer, ``graphs.tokens``)
to the budget a tool result gets in the same prompt; the reply itself is read whole (its tool calls
run as written) -- only the copy the model sees again is cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from graphs.tokens import MAX_FACTOR, count_tokens

#: The mark that says text was cut.
ELLIPSIS = "\u2026"
#: No token of any tokenizer we count with spans more characters than this: a text cut to
#: ``budget * MAX_TOKEN_CHARS`` characters still holds ``budget`` tokens' worth, so the exact search
#: never tokenizes a multi-megabyte reply.
MAX_TOKEN_CHARS = 32


def cut_text(text: str, budget_tokens: int, model: str | None = None) -> str:
    """``text`` when it fits ``budget_tokens``, else its longest prefix that fits with an ellipsis."""
    if len(text) * 4 * MAX_FACTOR <= budget_tokens:  # a token is at least one UTF-8 byte: fits uncounted
        return text
    head = text[: budget_tokens * MAX_TOKEN_CHARS + 1]
    if len(head) == len(text) and count_tokens(text, model) <= budget_tokens:
        return text
    lo, hi = 0, len(head)
    while lo < hi:  # the longest prefix whose text + ellipsis fits
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid] + ELLIPSIS, model) <= budget_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + ELLIPSIS


def _cut_value(value: Any, budget_tokens: int, model: str | None) -> Any:
    if isinstance(value, str):
        return cut_text(value, budget_tokens, model)
    if isinstance(value, list):
        return [_cut_value(v, budget_tokens, model) for v in value]
    if isinstance(value, dict):
        return {k: _cut_value(v, budget_tokens, model) for k, v in value.items()}
    return value


def fed_back(message: BaseMessage, budget_tokens: int, model: str | None = None) -> BaseMessage:
    """``message`` with its text (and, for a model turn, each string argument of its tool calls) cut to
    ``budget_tokens``; the same object when nothing needed cutting."""
    update: dict[str, Any] = {}
    if isinstance(message.content, str):
        content = cut_text(message.content, budget_tokens, model)
        if content != message.content:
            update["content"] = content
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = [{**c, "args": _cut_value(c["args"], budget_tokens, model)} for c in message.tool_calls]
        if calls != message.tool_calls:
            update["tool_calls"] = calls
    if isinstance(message, AIMessage) and message.invalid_tool_calls:
        invalid = [{**c, "args": _cut_value(c.get("args"), budget_tokens, model)} for c in message.invalid_tool_calls]
        if invalid != message.invalid_tool_calls:
            update["invalid_tool_calls"] = invalid
    if update and isinstance(message, AIMessage) and message.additional_kwargs.get("tool_calls"):
        # the raw provider copy of the calls would be sent instead of the cut ones
        update["additional_kwargs"] = {k: v for k, v in message.additional_kwargs.items() if k != "tool_calls"}
    return message.model_copy(update=update) if update else message


def fed_back_all(messages: Sequence[BaseMessage], budget_tokens: int, model: str | None = None) -> list[BaseMessage]:
    """``fed_back`` of each message."""
    return [fed_back(m, budget_tokens, model) for m in messages]
