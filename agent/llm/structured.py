"""Structured output from a chat model: a forced tool call validated by pydantic and by the caller,
tolerant parsing of near-JSON, and one repair round that quotes the validation error.

Why here and not ``with_structured_output``: LangChain's structured output raises or returns None
on the first malformed reply and hides the raw text. A small model (the issue's reproduction: a
1.5B model behind llama.cpp) often returns *almost* JSON -- one bracket too many, a trailing comma,
a code fence -- or names a relation the graph does not have. We want to (1) accept the obvious
near-misses without another call, (2) tell the model exactly what was wrong once, and (3) report
what happened (first try valid? repaired? which errors?) so runs can be measured. Every stage that
asks the model for data (the plan, plan-once, constraint extraction, reranking) goes through
``structured_call``.

The mechanism is a tool whose arguments are the schema (``bind_tools(..., tool_choice=name)``):
OpenAI, vLLM, llama.cpp and Ollama servers all support named tool choice, and grammar-constrained
servers then only emit well-formed arguments. ``mode="text"`` asks for JSON in the reply text
instead, for endpoints without tool support.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, ValidationError

from graphs.errors import NearJSONError, PlannerError
from graphs.skb.model import GraphSchema

T = TypeVar("T", bound=BaseModel)
OutputMode = Literal["tool", "text"]
#: Longest raw reply quoted back to the model in a repair message (characters): the repair prompt
#: has a token budget like every model-facing text.
REPAIR_QUOTE_CHARS = 600
#: Most validation errors quoted back (the first ones are the ones to fix).
REPAIR_MAX_ERRORS = 8


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _balance(text: str) -> tuple[str, list[str]]:
    """One pass over ``text`` outside string literals: drop trailing commas and unmatched closing
    brackets, map Python literals to JSON, close what is left open. Returns the text and the fixes."""
    out: list[str] = []
    stack: list[str] = []
    fixes: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            out.append(ch)
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            out.append(ch)
        elif ch in "}]":
            # a trailing comma before the closer: drop it
            j = len(out) - 1
            while j >= 0 and out[j].isspace():
                j -= 1
            if j >= 0 and out[j] == ",":
                del out[j]
                fixes.append("removed a trailing comma")
            if stack and stack[-1] == ch:
                stack.pop()
                out.append(ch)
                if not stack:
                    if text[i + 1 :].strip():
                        fixes.append("ignored text after the JSON value")
                    break
            else:
                fixes.append(f"dropped an unmatched {ch!r}")
        else:
            word = re.match(r"True|False|None", text[i:])
            if word and not (out and (out[-1].isalnum() or out[-1] == "_")):
                out.append(_PY_LITERALS[word.group(0)])
                fixes.append(f"read Python literal {word.group(0)}")
                i += len(word.group(0))
                continue
            out.append(ch)
        i += 1
    if in_string:
        out.append('"')
        fixes.append("closed an open string")
    if stack:
        fixes.append(f"closed {len(stack)} open bracket(s)")
        out.extend(reversed(stack))
    return "".join(out), fixes


def parse_near_json(text: str) -> tuple[Any, list[str]]:
    """The JSON value in ``text`` and the fixes it needed (empty when it was plain JSON).

    Accepts: code fences, prose before/after the value, trailing commas, a missing or extra
    closing bracket, Python's True/False/None. Anything else raises NearJSONError naming the
    JSON error, so a repair round can quote it.
    """
    raw = (text or "").strip()
    fixes: list[str] = []
    fence = _FENCE.search(raw)
    if fence:
        raw = fence.group(1).strip()
        fixes.append("removed a code fence")
    starts = [p for p in (raw.find("{"), raw.find("[")) if p >= 0]
    if not starts:
        raise NearJSONError(f"no JSON object in the reply: {raw[:120]!r}")
    start = min(starts)
    if start:
        fixes.append("ignored text before the JSON value")
    body = raw[start:]
    try:
        return json.loads(body), fixes
    except json.JSONDecodeError as exc:
        first_error = exc
    try:
        value, end = json.JSONDecoder().raw_decode(body)
        return value, [*fixes, "ignored text after the JSON value"] if body[end:].strip() else fixes
    except json.JSONDecodeError:
        pass
    repaired, more = _balance(body)
    try:
        return json.loads(repaired), [*fixes, *more]
    except json.JSONDecodeError as exc:
        raise NearJSONError(
            f"not valid JSON ({first_error.msg} at line {first_error.lineno} column {first_error.colno}; "
            f"after automatic fixes: {exc.msg})"
        ) from exc


@dataclass
class StructuredOutcome(Generic[T]):
    """What a structured call produced and how: the measurable part of every structured stage."""

    value: T | None = None
    attempts: int = 0
    valid_first_try: bool = False
    errors: list[str] = field(default_factory=list)
    """The validation errors of each failed attempt, in order (what the repair quoted)."""
    fixes: list[str] = field(default_factory=list)
    """Near-JSON fixes applied to the accepted reply."""
    replies: list[AIMessage] = field(default_factory=list)

    @property
    def repaired(self) -> bool:
        return self.value is not None and not self.valid_first_try

    def report(self) -> dict[str, Any]:
        return {
            "valid": self.value is not None,
            "attempts": self.attempts,
            "valid_first_try": self.valid_first_try,
            "repaired": self.repaired,
            "errors": list(self.errors),
            "fixes": list(dict.fromkeys(self.fixes)),
        }


def _pydantic_errors(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()]


def read_structured(
    reply: AIMessage, schema: type[T], tool_name: str, validate: Callable[[T], list[str]] | None = None
) -> tuple[T | None, list[str], list[str]]:
    """(value, errors, fixes) from one reply: the named tool call's arguments, else a malformed call's
    raw argument text, else JSON in the reply text; checked by ``schema`` and then by ``validate``."""
    data: Any = None
    fixes: list[str] = []
    calls = [c for c in reply.tool_calls if c.get("name") == tool_name]  # a call to another tool is no answer
    if calls:
        data = calls[0].get("args")
    else:
        bad = [c for c in reply.invalid_tool_calls if c.get("name") in (tool_name, None)] or list(
            reply.invalid_tool_calls
        )
        source = str(bad[0].get("args") or "") if bad else str(reply.text)
        try:
            data, fixes = parse_near_json(source)
        except NearJSONError as exc:
            return None, [str(exc)], []
    if isinstance(data, dict) and set(data) == {"properties"} and isinstance(data["properties"], dict):
        data = data["properties"]  # small models sometimes echo the schema's wrapper around their values
        fixes.append("unwrapped 'properties'")
    try:
        value = schema.model_validate(data)
    except ValidationError as exc:
        return None, _pydantic_errors(exc), fixes
    problems = validate(value) if validate is not None else []
    if problems:
        return None, problems, fixes
    return value, [], fixes


def repair_messages(
    reply: AIMessage, errors: Sequence[str], tool_name: str, mode: OutputMode
) -> list[BaseMessage]:
    """The turn that tells the model what was wrong: its own reply, then the errors, quoted."""
    listed = "\n".join(f"- {e}" for e in list(errors)[:REPAIR_MAX_ERRORS])
    text = (
        f"That {tool_name} call was rejected:\n{listed}\n"
        f"Fix exactly these problems and call {tool_name} again with the complete corrected arguments."
        if mode == "tool"
        else f"That answer was rejected:\n{listed}\nReply again with only the corrected JSON object."
    )
    calls = [c for c in reply.tool_calls if c.get("id")]
    if mode == "tool" and calls:
        # answer every call of the rejected turn (the API requires one tool message per call id)
        return [reply, *(ToolMessage(content=text, tool_call_id=str(c["id"]), name=c["name"]) for c in calls)]
    raw = str(reply.text) or json.dumps([c.get("args") for c in reply.invalid_tool_calls], default=str)
    quoted_reply = AIMessage(content=raw[:REPAIR_QUOTE_CHARS])
    return [quoted_reply, HumanMessage(text)]


def bind_structured(
    model: BaseChatModel,
    schema: type[BaseModel],
    tool_name: str,
    description: str,
    mode: OutputMode,
    parameters: dict[str, Any] | None = None,
) -> Any:
    """The model, bound to answer through ``tool_name`` (mode 'tool') or unchanged (mode 'text').
    ``parameters`` replaces the schema's JSON schema (e.g. narrowed with enums of valid names)."""
    if mode == "text":
        return model
    return model.bind_tools([tool_spec(schema, tool_name, description, parameters)], tool_choice=tool_name)


def tool_spec(
    schema: type[BaseModel], tool_name: str, description: str, parameters: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The OpenAI tool definition whose arguments are ``schema`` (it is part of the prompt: count it)."""
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": description,
            "parameters": parameters if parameters is not None else compact_schema(schema),
        },
    }


def compact_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, self-contained and small: ``$ref``s to ``$defs`` inlined (llama.cpp's
    grammar converter cannot resolve them inside a tool schema: HTTP 500 "Error resolving ref") and
    titles dropped (they cost prompt tokens and say nothing new). Recursive models are not supported."""
    full = schema.model_json_schema()
    defs: dict[str, Any] = full.pop("$defs", {})

    def strip(node: Any, depth: int = 0) -> Any:
        if depth > 32:
            raise ValueError(f"schema of {schema.__name__} is recursive; structured output needs a finite schema")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = strip(defs[ref.rsplit("/", 1)[-1]], depth + 1)
                extra = {k: strip(v, depth + 1) for k, v in node.items() if k != "$ref" and k != "title"}
                return {**target, **extra}
            return {k: strip(v, depth + 1) for k, v in node.items() if k != "title" or not isinstance(v, str)}
        if isinstance(node, list):
            return [strip(v, depth + 1) for v in node]
        return node

    return dict(strip(full))


def structured_call(
    invoke: Callable[[Sequence[BaseMessage]], AIMessage],
    messages: Sequence[BaseMessage],
    schema: type[T],
    *,
    tool_name: str,
    mode: OutputMode = "tool",
    validate: Callable[[T], list[str]] | None = None,
    max_repairs: int = 1,
    repair_context: Callable[[Sequence[BaseMessage]], list[BaseMessage]] | None = None,
) -> StructuredOutcome[T]:
    """Ask through ``invoke`` (a bound model call with the caller's retries and budgets), validate,
    and repair up to ``max_repairs`` times. Never raises for a bad reply -- the outcome says so;
    call failures (PlannerError from ``invoke``) propagate.

    ``repair_context`` may shorten the conversation for the repair call (e.g. a compact schema
    instead of the full one) so a repair fits the same token budget as the first call.
    """
    outcome: StructuredOutcome[T] = StructuredOutcome()
    history = list(messages)
    for attempt in range(max_repairs + 1):
        if attempt and repair_context is not None:
            history = repair_context(history)
        reply = invoke(history)
        outcome.attempts += 1
        outcome.replies.append(reply)
        value, errors, fixes = read_structured(reply, schema, tool_name, validate)
        if value is not None:
            outcome.value = value
            outcome.valid_first_try = attempt == 0
            outcome.fixes.extend(fixes)
            return outcome
        outcome.errors.append("; ".join(errors[:REPAIR_MAX_ERRORS]))
        history = [*history, *repair_messages(reply, errors, tool_name, mode)]
    return outcome


def require(outcome: StructuredOutcome[T], what: str) -> T:
    """The outcome's value, or PlannerError naming what stayed invalid after the repairs."""
    if outcome.value is None:
        raise PlannerError(f"{what} invalid after {outcome.attempts} attempt(s): {' | '.join(outcome.errors)}")
    return outcome.value


def compact_schema_text(schema: GraphSchema) -> str:
    """Labels and relationship patterns only: what a repair (or an over-budget prompt) needs, in a
    fraction of the tokens."""
    lines = ["Node labels: " + ", ".join(schema.label_names()), "Relationships:"]
    lines += [f"- (:{r.src_label})-[:{r.rel}]->(:{r.dst_label})" for r in schema.relations]
    return "\n".join(lines)
