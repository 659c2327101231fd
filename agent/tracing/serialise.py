"""Safe serialisation of run payloads: messages, pydantic models, arrays and cycles become bounded JSON.

Why its own room: it runs on the agent's thread for every traced run, so it must be cheap and must never
raise; the store and the viewer only ever see its output.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import BaseModel

MAX_STRING_CHARS = 8_000
MAX_LIST_ITEMS = 200
MAX_DEPTH = 24
MAX_PAYLOAD_CHARS = 400_000


def _truncate(text: str, limit: int = MAX_STRING_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [truncated {len(text) - limit} chars]"


def _message_dict(msg: Any, *, with_artifact: bool = True) -> dict[str, Any]:
    """A LangChain message as the compact dict the viewer shows (no empty fields); ``with_artifact=False`` leaves out
    a tool result's artifact, which the tools' caller gets and a model never reads."""
    out: dict[str, Any] = {"type": getattr(msg, "type", type(msg).__name__)}
    for field in ("name", "content", "tool_calls", "invalid_tool_calls", "tool_call_id", "status", "usage_metadata"):
        value = getattr(msg, field, None)
        if value not in (None, "", [], {}):
            out[field] = value
    if not with_artifact:
        return out
    artifact = getattr(msg, "artifact", None)
    if artifact is not None:
        out["artifact"] = artifact
    return out


def _lc_serialised_message(value: Mapping[str, Any]) -> dict[str, Any] | None:
    """`dumpd(message)` output ({"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}})."""
    ident = value.get("id")
    kwargs = value.get("kwargs")
    if value.get("lc") != 1 or not isinstance(ident, list) or not ident or not isinstance(kwargs, Mapping):
        return None
    cls = str(ident[-1])
    if not cls.endswith("Message") and not cls.endswith("MessageChunk"):
        return None
    kind = kwargs.get("type") or cls.replace("MessageChunk", "").replace("Message", "").lower()
    out: dict[str, Any] = {"type": kind}
    for field in ("name", "content", "tool_calls", "invalid_tool_calls", "tool_call_id", "status", "usage_metadata"):
        item = kwargs.get(field)
        if item not in (None, "", [], {}):
            out[field] = item
    return out


def to_jsonable(
    value: Any, *, max_string: int = MAX_STRING_CHARS, _depth: int = 0, _seen: set[int] | None = None
) -> Any:
    """A JSON-safe copy of ``value``: messages, pydantic models, dataclasses, numpy, paths, UUIDs and
    datetimes become plain data; long strings and lists are cut with a marker; anything else becomes
    a short repr. Never raises -- a trace must not break the run it records."""
    seen = _seen if _seen is not None else set()
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _truncate(value, max_string)
    if _depth >= MAX_DEPTH:
        return f"<{type(value).__name__}: max depth>"
    if isinstance(value, UUID | Path):
        return str(value)
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    ident = id(value)
    if ident in seen:
        return f"<cycle: {type(value).__name__}>"
    seen.add(ident)
    try:
        return _to_jsonable_container(value, max_string, _depth, seen)
    except Exception as exc:  # noqa: BLE001 -- serialisation of arbitrary objects must never fail the run
        return _truncate(f"<unserialisable {type(value).__name__}: {exc}>", 300)
    finally:
        seen.discard(ident)


def _to_jsonable_container(value: Any, max_string: int, depth: int, seen: set[int]) -> Any:
    def rec(item: Any) -> Any:
        return to_jsonable(item, max_string=max_string, _depth=depth + 1, _seen=seen)

    if isinstance(value, Mapping):
        lc_msg = _lc_serialised_message(value)
        if lc_msg is not None:
            return rec(lc_msg)
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= MAX_LIST_ITEMS:
                out["..."] = f"[{len(value) - MAX_LIST_ITEMS} more keys]"
                break
            out[str(key)] = rec(item)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        converted = [rec(item) for item in items[:MAX_LIST_ITEMS]]
        if len(items) > MAX_LIST_ITEMS:
            converted.append(f"... [{len(items) - MAX_LIST_ITEMS} more items]")
        return converted
    if hasattr(value, "type") and hasattr(value, "content") and hasattr(value, "additional_kwargs"):
        return rec(_message_dict(value))
    if isinstance(value, BaseModel):
        return rec(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return rec(dataclasses.asdict(value))
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays and scalars
        return rec(value.tolist())
    return _truncate(repr(value), 300)


class _EncodedMessages:
    """Each chat message's JSON, encoded once and spliced into every payload that holds it.

    Why: a LangGraph node's inputs are the whole state, so one question's scratchpad (tool results with their
    artifacts) is encoded again for every node it passes; converting those messages again at each node was about
    a third of what tracing cost a question (measured on HPO). A message is taken as unchanged while it and its content, tool calls and artifact are the
    same objects (LangGraph's reducers add or replace messages, they do not edit them); an entry holds all four,
    so no id among them is reused while it is cached. Bounded: the oldest entries go first."""

    def __init__(self, size: int, encode: Callable[[Any], Any] | None) -> None:
        self.size = size
        self.encode = encode
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, tuple[tuple[Any, ...], Any]] = OrderedDict()

    def get(self, msg: Any) -> Any:
        if self.encode is None:  # the stdlib encoder has no way to splice encoded JSON in
            return _message_dict(msg)
        parts = (msg, getattr(msg, "content", None), getattr(msg, "tool_calls", None), getattr(msg, "artifact", None))
        with self._lock:
            held = self._entries.get(id(msg))
        if held is not None and all(a is b for a, b in zip(held[0], parts, strict=True)):
            return held[1]
        encoded = self.encode(_message_dict(msg))  # raises what the encoder refuses: the payload takes the careful path
        with self._lock:
            self._entries[id(msg)] = (parts, encoded)
            self._entries.move_to_end(id(msg))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return encoded


def _fast_default(obj: Any) -> Any:
    """One level of conversion for the C encoder (it recurses into what this returns)."""
    if hasattr(obj, "type") and hasattr(obj, "content") and hasattr(obj, "additional_kwargs"):
        return _MESSAGES.get(obj)
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, UUID | Path | set | frozenset | tuple | bytes | bytearray | _dt.datetime | _dt.date):
        return to_jsonable(obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return obj.tolist()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return _truncate(repr(obj), 300)


def _json_encoders() -> tuple[Callable[[Any, Callable[[Any], Any]], str], Callable[[Any], Any] | None]:
    """orjson's encoder when installed (it is optional, third-party; a few times faster than the stdlib's on run
    payloads, which are encoded on the agent's thread for every run), else the stdlib's. Both raise TypeError or
    ValueError on what they cannot encode (cycles, non-text keys, huge integers), which sends the payload to the
    careful path. orjson writes no spaces after separators and NaN as null: the same data.

    The second encoder turns one message into encoded JSON that the first splices in as it is (orjson's
    ``Fragment``); None with the stdlib's."""
    try:
        import orjson
    except ImportError:  # orjson is optional (third-party): the stdlib writes the same data
        return (lambda value, default: json.dumps(value, ensure_ascii=False, default=default)), None
    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

    def dumps(value: Any, default: Callable[[Any], Any]) -> str:
        return orjson.dumps(value, default=default, option=options).decode("utf-8")

    def fragment(value: Any) -> Any:
        return orjson.Fragment(orjson.dumps(value, default=_fast_default, option=options))

    return dumps, fragment


#: Messages whose JSON is kept. An offline HPO question holds about 11 messages and a replica answers 8 questions at
#: once (88 live); a finished question's entries are never read again, yet hold its tool results (512 entries kept
#: 8 MB of a process after 250 questions). 160 keeps every live message of 8 offline questions, or of 8 LLM-planned
#: ones of up to 20 messages each; past that an evicted message is encoded again, not lost.
ENCODED_MESSAGES = 160
_dumps, _fragment = _json_encoders()
_MESSAGES = _EncodedMessages(ENCODED_MESSAGES, _fragment)


def _dump_payload(value: Any, *, compact: bool = False) -> str | None:
    """JSON text of a run payload, capped at MAX_PAYLOAD_CHARS (a preview replaces anything larger).

    The fast path lets the C encoder walk plain dicts/lists/strings and converts only foreign
    objects (messages, models, arrays); it runs on the agent's thread for every run, so it must be
    cheap. ``compact=True`` (LLM runs) or a failing/oversized fast path uses `to_jsonable` throughout,
    which also shortens serialised messages and cuts long strings and lists."""
    if value is None:
        return None
    text: str | None = None
    if not compact:
        try:
            text = _dumps(value, _fast_default)
        except (TypeError, ValueError, RecursionError):
            text = None
    if text is None or len(text) > MAX_PAYLOAD_CHARS:
        plain = to_jsonable(value)
        try:
            text = _dumps(plain, str)
        except (TypeError, ValueError, RecursionError):  # lone surrogates: orjson refuses them, the stdlib keeps them
            text = json.dumps(plain, ensure_ascii=False, default=str)
    if len(text) > MAX_PAYLOAD_CHARS:
        text = json.dumps({"_truncated": True, "chars": len(text), "preview": text[: MAX_PAYLOAD_CHARS // 4]})
    return text
