"""A planner round's tool calls on their way in (sizes clamped) and their results on the way out
(model text within the token budget)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage

from agent.config import AgentConfig
from graphs.text_safety import clean_text
from tools.results import CHARS_PER_TOKEN, TYPED_RESULTS, budget_measure, parse_result

#: Tool-call arguments that size a result; clamped to ``per_call_k`` (K).
_SIZE_ARGS = {"semantic_search": "k", "search_nodes": "limit", "cypher": "max_rows"}


def clamped(calls: Sequence[Mapping[str, Any]], cfg: AgentConfig, step: int) -> list[dict[str, Any]]:
    """The calls to run, ids given, sizes clamped: K results per call; search_nodes gets K per expanded key
    (it aggregates many keys in one call)."""
    pending: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        name = str(call["name"])
        args = dict(call.get("args") or {})
        size_arg = _SIZE_ARGS.get(name)
        if size_arg is not None:
            per = (len(args.get("keys") or []) or 1) if name == "search_nodes" else 1
            args[size_arg] = min(int(args.get(size_arg) or cfg.per_call_k), cfg.per_call_k * per)
        pending.append({"name": name, "id": call.get("id") or f"call_{step}_{i}", "args": args})
    return pending


def budgeted(message: ToolMessage, name: str, budget_tokens: int) -> ToolMessage:
    """The tool message with a typed artifact and model text within the budget, whatever the tool returned
    (a tool that answers with a JSON dict or an over-long text gets its text re-rendered from the typed
    result). A typed artifact whose text fits is passed through: our tools render it with this budget."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, TYPED_RESULTS) and budget_measure(str(message.content)) <= budget_tokens:
        return message
    result = parse_result(name, artifact if artifact is not None else message.content)
    if result is None:
        text = str(message.content)
        if budget_measure(text) > budget_tokens:
            limit = budget_tokens * CHARS_PER_TOKEN
            while limit > 1 and budget_measure(text[: limit - 1] + "\u2026") > budget_tokens:
                limit = limit * 3 // 4  # dense text (JSON, keys) has fewer characters per token
            message = message.model_copy(update={"content": text[: limit - 1] + "\u2026"})
        return message
    text = result.model_text(budget_tokens)
    if text == message.content and artifact is result:
        return message
    return message.model_copy(update={"content": clean_text(text), "artifact": result})

