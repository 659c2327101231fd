"""Local, LangSmith-shaped tracing: every chain/LLM/tool/retriever run of an agent call, kept in SQLite.

Why local: a retrieval agent is debugged by reading what each step saw and returned, and that must
work offline and without an account. Why the LangSmith run schema (id, trace_id, parent_run_id,
dotted_order, run_type, inputs, outputs, extra, events, token counts): the same mental model and
the same field names as the hosted tool, so traces can be exported or compared later. When
LANGSMITH_TRACING / LANGSMITH_API_KEY are set, LangChain's own LangSmith tracer still runs: this
module only *adds* a callback handler and disables nothing.

Public API: `LocalTracer` (the callback handler), `TraceStore` (the SQLite file), `TraceRun` and
`TraceSummary` (what readers get back), `tracer_for(index_dir)` and `callbacks_for(...)` (wiring for
`skb ask` / `skb eval`), `to_jsonable` (safe serialisation of messages and pydantic models).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import sqlite3
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from pydantic import BaseModel, Field

from agent.results import StageUsage
from graphs.errors import ConfigError, SKBError, TraceNotFoundError

__all__ = [
    "DEFAULT_TRACE_FILE",
    "LocalTracer",
    "TraceNotFoundError",
    "TraceRun",
    "TraceStore",
    "TraceSummary",
    "callbacks_for",
    "default_trace_db",
    "to_jsonable",
    "tracer_for",
    "tracing_enabled",
]

DEFAULT_TRACE_FILE = "traces.sqlite"
TRACE_DB_ENV = "SKB_TRACE_DB"
"""Environment variable naming the trace database (overrides `<index_dir>/traces.sqlite`)."""
TRACING_ENV = "SKB_TRACING"
"""Set to 0/false/off to turn local tracing off."""

MAX_STRING_CHARS = 8_000
MAX_LIST_ITEMS = 200
MAX_DEPTH = 24
MAX_PAYLOAD_CHARS = 400_000
COMPRESS_OVER = 2_048
_SCHEMA_VERSION = 1

#: Retention of the trace database (checked when a writer opens it and every PRUNE_EVERY rows written):
#: whole traces older than $SKB_TRACE_MAX_DAYS days go, then the oldest traces until the live data
#: fits $SKB_TRACE_MAX_MB. 0 turns a limit off.
MAX_MB_ENV = "SKB_TRACE_MAX_MB"
MAX_DAYS_ENV = "SKB_TRACE_MAX_DAYS"
DEFAULT_MAX_MB = 512.0
DEFAULT_MAX_DAYS = 30.0
PRUNE_EVERY = 2_000
#: Bounds of the writer's queue: rows and (approximate) payload bytes waiting for SQLite.
QUEUE_MAX_ROWS = 2_000
QUEUE_MAX_BYTES = 32 * 1024 * 1024
#: How long a traced call waits for room in a full queue before its row is dropped (and counted).
QUEUE_WAIT_S = 0.5
#: Size the WAL file is truncated to after each checkpoint.
WAL_LIMIT_BYTES = 16 * 1024 * 1024


# -- safe serialisation ------------------------------------------------------------------


def _truncate(text: str, limit: int = MAX_STRING_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [truncated {len(text) - limit} chars]"


def _message_dict(msg: Any) -> dict[str, Any]:
    """A LangChain message as the compact dict the viewer shows (no empty fields)."""
    out: dict[str, Any] = {"type": getattr(msg, "type", type(msg).__name__)}
    for field in ("name", "content", "tool_calls", "invalid_tool_calls", "tool_call_id", "status", "usage_metadata"):
        value = getattr(msg, field, None)
        if value not in (None, "", [], {}):
            out[field] = value
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


def _fast_default(obj: Any) -> Any:
    """One level of conversion for the C encoder (it recurses into what this returns)."""
    if hasattr(obj, "type") and hasattr(obj, "content") and hasattr(obj, "additional_kwargs"):
        return _message_dict(obj)
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, UUID | Path | set | frozenset | tuple | bytes | bytearray | _dt.datetime | _dt.date):
        return to_jsonable(obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):
        return obj.tolist()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return _truncate(repr(obj), 300)


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
            text = json.dumps(value, ensure_ascii=False, default=_fast_default)
        except (TypeError, ValueError, RecursionError):
            text = None
    if text is None or len(text) > MAX_PAYLOAD_CHARS:
        text = json.dumps(to_jsonable(value), ensure_ascii=False, default=str)
    if len(text) > MAX_PAYLOAD_CHARS:
        text = json.dumps({"_truncated": True, "chars": len(text), "preview": text[: MAX_PAYLOAD_CHARS // 4]})
    return text


# -- what readers get back -----------------------------------------------------------------


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


# -- the store -------------------------------------------------------------------------------

_COLUMNS = (
    "id",
    "trace_id",
    "parent_run_id",
    "dotted_order",
    "name",
    "run_type",
    "status",
    "inputs",
    "outputs",
    "error",
    "start_time",
    "end_time",
    "extra",
    "tags",
    "events",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "stage",
    "llm_call",
)
_JSON_COLUMNS = {"inputs", "outputs", "extra", "tags", "events"}

_DDL = f"""
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    parent_run_id TEXT,
    dotted_order TEXT NOT NULL,
    name TEXT NOT NULL,
    run_type TEXT NOT NULL,
    status TEXT NOT NULL,
    inputs TEXT,
    outputs TEXT,
    error TEXT,
    start_time TEXT NOT NULL,
    end_time TEXT,
    extra TEXT,
    tags TEXT,
    events TEXT,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    stage TEXT,
    llm_call INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_trace ON runs(trace_id, dotted_order);
CREATE INDEX IF NOT EXISTS runs_roots ON runs(start_time) WHERE parent_run_id IS NULL;
PRAGMA user_version = {_SCHEMA_VERSION};
"""


def _db_fix(exc: BaseException) -> str:
    """What to do about a trace database SQLite refused, by the kind of failure."""
    text = str(exc).lower()
    off = f"or turn tracing off ({TRACING_ENV}=0, or `skb ask --no-trace`)"
    if "full" in text or "disk i/o" in text:
        return f"free disk space there, point {TRACE_DB_ENV}=PATH at another disk, {off}"
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (f"it is not a trace database or it is damaged: move it aside (the next traced run starts a new "
                f"one), point {TRACE_DB_ENV}=PATH at another file, {off}")
    return f"pass a readable and writable path ({TRACE_DB_ENV}=PATH, or --db for `skb trace`), {off}"


def _env_number(name: str, default: float) -> float:
    """A non-negative number from the environment; a bad value is a ConfigError naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!r} is not a number >= 0; unset it (default {default:g}) or write e.g. {default:g}")
    return value


def retention_from_env() -> tuple[float | None, float | None]:
    """(max bytes, max age in days) of the trace database: $SKB_TRACE_MAX_MB and $SKB_TRACE_MAX_DAYS
    (defaults 512 MB and 30 days; 0 turns a limit off)."""
    mb = _env_number(MAX_MB_ENV, DEFAULT_MAX_MB)
    days = _env_number(MAX_DAYS_ENV, DEFAULT_MAX_DAYS)
    return (mb * 1024 * 1024 if mb else None), (days or None)


class _RowQueue:
    """The writer's queue, bounded in rows and payload bytes.

    Why not ``queue.Queue()``: under concurrent questions the callbacks produced rows faster than one
    SQLite writer stored them, and the unbounded queue grew a server to gigabytes. A full queue makes
    the traced call wait up to ``wait_s`` (back-pressure); if it is still full the row is dropped and
    counted, and until the writer takes its next batch, further rows that find it full are dropped at
    once (a stuck writer must not slow every call by ``wait_s`` per row)."""

    def __init__(self, max_rows: int, max_bytes: int, wait_s: float) -> None:
        self.max_rows = max(1, max_rows)
        self.max_bytes = max(1, max_bytes)
        self.wait_s = wait_s
        self._cond = threading.Condition()
        self._rows: deque[tuple[dict[str, Any] | None, int]] = deque()
        self._bytes = 0
        self._busy = 0  # rows the writer has taken and not yet stored
        self._shedding = False
        self.dropped = 0
        self.peak_rows = 0
        self.peak_bytes = 0

    def _full(self, size: int) -> bool:
        return bool(self._rows) and (len(self._rows) >= self.max_rows or self._bytes + size > self.max_bytes)

    def put(self, row: dict[str, Any], size: int) -> bool:
        """Queue ``row``; False when it was dropped."""
        with self._cond:
            if self._shedding and self._full(size):
                self.dropped += 1
                return False
            deadline = time.monotonic() + self.wait_s
            while self._full(size):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._shedding = True
                    self.dropped += 1
                    return False
                self._cond.wait(left)
            self._rows.append((row, size))
            self._bytes += size
            self.peak_rows = max(self.peak_rows, len(self._rows))
            self.peak_bytes = max(self.peak_bytes, self._bytes)
            self._cond.notify_all()
            return True

    def stop(self) -> None:
        with self._cond:
            self._rows.append((None, 0))
            self._cond.notify_all()

    def take(self) -> list[dict[str, Any] | None]:
        """Everything queued (blocking while empty); call `done` once it is stored."""
        with self._cond:
            while not self._rows:
                self._cond.wait()
            batch = [row for row, _ in self._rows]
            self._busy = len(batch)
            self._rows.clear()
            self._bytes = 0
            if self._shedding:
                self._shedding = False
            self._cond.notify_all()
            return batch

    def done(self) -> None:
        with self._cond:
            self._busy = 0
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every queued row is stored; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._rows or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True


def _row_size(row: Mapping[str, Any]) -> int:
    return 256 + sum(len(v) for v in row.values() if isinstance(v, str))


class TraceStore:
    """The SQLite trace file. One connection guarded by a lock: callbacks arrive from LangGraph's
    worker threads, and concurrent `skb` processes are serialised by SQLite's own file locking."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        if read_only:
            if not self.path.exists():
                raise TraceNotFoundError(
                    f"no trace database at {self.path}; run `skb ask ... --index-dir DIR` first "
                    f"(traces go to DIR/{DEFAULT_TRACE_FILE}) or pass --db PATH"
                )
            try:
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            except sqlite3.Error as exc:
                raise ConfigError(f"cannot read trace database {self.path}: {exc}; {_db_fix(exc)}") from exc
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=10.0)
                self._conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file: pruning frees disk
                self._conn.execute("PRAGMA journal_mode=WAL")
                # after a checkpoint the WAL file is cut back to this size: a prune that deletes 100 MB of
                # traces would otherwise leave a WAL that size beside the database for good
                self._conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.executescript(_DDL)
            except (OSError, sqlite3.Error) as exc:
                raise ConfigError(
                    f"cannot open trace database {self.path}: {exc}; {_db_fix(exc)}"
                ) from exc
        self._conn.row_factory = sqlite3.Row

    # writing
    def upsert(self, row: Mapping[str, Any]) -> None:
        self.upsert_many([row])

    def upsert_many(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert or replace runs by id, in one transaction (a run is written at start and again at end).
        JSON payloads over COMPRESS_OVER chars are stored zlib-compressed (LangGraph node inputs carry
        the whole state, so an agent run would otherwise cost ~0.3 MB)."""
        sql = (
            f"INSERT INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
            f"ON CONFLICT(id) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in _COLUMNS if c != 'id')}"
        )
        with self._lock:
            try:
                self._conn.executemany(sql, [[_pack(col, row.get(col)) for col in _COLUMNS] for row in rows])
                self._conn.commit()
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.rollback()
                raise ConfigError(f"cannot write trace database {self.path}: {exc}; {_db_fix(exc)}") from exc

    def size_bytes(self) -> int:
        """Bytes of live data (pages in use); the file may be larger by the free pages SQLite reuses."""
        with self._lock:
            pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
            free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = self._conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def prune(self, *, max_bytes: float | None, max_age_days: float | None, now: _dt.datetime | None = None) -> int:
        """Delete whole traces older than ``max_age_days``, then the oldest traces until the live data
        fits ``max_bytes`` (to 80 % of it, so pruning is not needed again at the next row); returns the
        number of runs deleted. None or 0 turns a limit off.

        Why: a server answering questions for weeks wrote 2 GB (200k runs) after ~10k questions."""
        deleted = 0
        by_trace = "DELETE FROM runs WHERE trace_id IN ({})"
        with self._lock:
            try:
                if max_age_days:
                    cutoff = _iso((now or _dt.datetime.now(_dt.UTC)) - _dt.timedelta(days=max_age_days))
                    deleted += self._conn.execute(by_trace.format(
                        "SELECT trace_id FROM runs WHERE parent_run_id IS NULL AND start_time < ?"), (cutoff,)).rowcount
                for _ in range(8):  # each pass deletes the estimated excess; a few passes converge
                    used = self.size_bytes() if max_bytes else 0
                    if not max_bytes or used <= max_bytes:
                        break
                    roots = self._conn.execute("SELECT COUNT(*) FROM runs WHERE parent_run_id IS NULL").fetchone()[0]
                    if not roots:
                        break
                    excess = 1.0 - 0.8 * max_bytes / used
                    n = max(1, math.ceil(roots * excess))
                    deleted += self._conn.execute(by_trace.format(
                        "SELECT trace_id FROM runs WHERE parent_run_id IS NULL ORDER BY start_time LIMIT ?"), (n,)).rowcount
                    self._conn.commit()
                    self._conn.execute("PRAGMA incremental_vacuum").fetchall()  # one page per result row: step them all
                self._conn.commit()
                if deleted:
                    self._conn.execute("PRAGMA incremental_vacuum").fetchall()  # one page per result row: step them all
                    self._conn.commit()
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the deletes' WAL pages, given back
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.rollback()
                raise ConfigError(f"cannot prune trace database {self.path}: {exc}; {_db_fix(exc)}") from exc
        return deleted

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # reading
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, params).fetchall())
            except sqlite3.Error as exc:  # a foreign, damaged or unreadable file: say which, and what to do
                raise ConfigError(f"cannot read trace database {self.path}: {exc}; {_db_fix(exc)}") from exc

    def resolve_id(self, run_id: str) -> str:
        """The full id of the run whose id starts or ends with ``run_id``. Run ids are UUIDv7, so runs
        of one trace share their leading (time) digits: a prefix that fits several runs but exactly
        one root run means that root (the ids `skb trace list` prints)."""
        run_id = run_id.strip().lower().replace("%", "").replace("_", "")
        if not run_id:
            raise TraceNotFoundError("empty run id; list runs with `skb trace list`")
        rows = self._rows(
            "SELECT id, parent_run_id FROM runs WHERE id LIKE ? OR id LIKE ? LIMIT 1000",
            (run_id + "%", "%" + run_id),
        )
        exact = [r for r in rows if r["id"] == run_id]
        if exact:
            return run_id
        if len(rows) == 1:
            return str(rows[0]["id"])
        roots = [r for r in rows if r["parent_run_id"] is None]
        if len(roots) == 1:
            return str(roots[0]["id"])
        if not rows:
            raise TraceNotFoundError(f"no run {run_id!r} in {self.path}; list runs with `skb trace list`")
        raise TraceNotFoundError(
            f"run id {run_id!r} matches {len(rows)} runs in {self.path}; give the full id from `skb trace list`"
        )

    def list_traces(self, limit: int = 20) -> list[TraceSummary]:
        """The most recent root runs, newest first, with per-trace totals."""
        rows = self._rows(
            """
            SELECT r.*, (SELECT COUNT(*) FROM runs c WHERE c.trace_id = r.trace_id) AS n_runs,
                   (SELECT COUNT(*) FROM runs c WHERE c.trace_id = r.trace_id AND c.llm_call = 1) AS n_llm,
                   (SELECT COUNT(*) FROM runs c WHERE c.trace_id = r.trace_id AND c.run_type = 'tool') AS n_tool,
                   (SELECT COALESCE(SUM(prompt_tokens), 0) FROM runs c WHERE c.trace_id = r.trace_id) AS p_tok,
                   (SELECT COALESCE(SUM(completion_tokens), 0) FROM runs c WHERE c.trace_id = r.trace_id) AS c_tok,
                   (SELECT COALESCE(SUM(total_tokens), 0) FROM runs c WHERE c.trace_id = r.trace_id) AS t_tok
            FROM runs r WHERE r.parent_run_id IS NULL ORDER BY r.start_time DESC LIMIT ?
            """,
            (max(1, int(limit)),),
        )
        out = []
        for row in rows:
            run = _row_to_run(row)
            out.append(
                TraceSummary(
                    id=run.id,
                    name=run.name,
                    status=run.status,
                    start_time=run.start_time,
                    duration_ms=run.duration_ms,
                    runs=int(row["n_runs"]),
                    llm_calls=int(row["n_llm"]),
                    tool_calls=int(row["n_tool"]),
                    prompt_tokens=int(row["p_tok"]),
                    completion_tokens=int(row["c_tok"]),
                    total_tokens=int(row["t_tok"]),
                    preview=_preview(run.inputs),
                    error=run.error,
                )
            )
        return out

    def runs_of_trace(self, trace_id: str) -> list[TraceRun]:
        return [
            _row_to_run(r)
            for r in self._rows("SELECT * FROM runs WHERE trace_id = ? ORDER BY dotted_order", (trace_id,))
        ]

    def get_tree(self, run_id: str) -> TraceRun:
        """The run ``run_id`` (full id or unique prefix) with all its descendants nested in ``child_runs``."""
        full = self.resolve_id(run_id)
        head = self._rows("SELECT trace_id FROM runs WHERE id = ?", (full,))
        runs = self.runs_of_trace(str(head[0]["trace_id"]))
        by_id = {r.id: r for r in runs}
        for run in runs:  # dotted_order sorts parents before children and siblings by start time
            if run.parent_run_id and run.parent_run_id in by_id and run.id != full:
                by_id[run.parent_run_id].child_runs.append(run)
        return by_id[full]

    def usage_by_stage(self, trace_id: str) -> dict[str, StageUsage]:
        """LLM calls and tokens of one trace, per stage (LangGraph node or explicit ``stage``)."""
        rows = self._rows(
            """SELECT COALESCE(stage, '?') AS stage, COUNT(*) AS n, SUM(prompt_tokens) AS p, SUM(completion_tokens) AS c
               FROM runs WHERE trace_id = ? AND llm_call = 1 GROUP BY 1""",
            (trace_id,),
        )
        return {
            str(r["stage"]): StageUsage(
                llm_calls=int(r["n"]), prompt_tokens=int(r["p"] or 0), completion_tokens=int(r["c"] or 0)
            )
            for r in rows
        }


def _pack(col: str, value: Any) -> Any:
    if col in _JSON_COLUMNS and isinstance(value, str) and len(value) > COMPRESS_OVER:
        return zlib.compress(value.encode("utf-8"), 6)
    return value


def _unpack(value: Any) -> Any:
    if isinstance(value, bytes):
        value = zlib.decompress(value).decode("utf-8")
    return json.loads(value) if value else None


def _row_to_run(row: sqlite3.Row) -> TraceRun:
    data: dict[str, Any] = {}
    for col in _COLUMNS:
        value = row[col]
        if col in _JSON_COLUMNS:
            value = _unpack(value)
        data[col] = value
    data["extra"] = data.get("extra") or {}
    data["tags"] = data.get("tags") or []
    data["events"] = data.get("events") or []
    return TraceRun.model_validate(data)


def _preview(inputs: Any, limit: int = 80) -> str:
    """The question (or first human message, or a retriever's query) of a root run's inputs, for one-line listings."""
    text = ""
    if isinstance(inputs, dict):
        if isinstance(inputs.get("question"), str):
            text = inputs["question"]
        elif isinstance(inputs.get("query"), str):  # a retriever run (agent.serving.retriever)
            text = inputs["query"]
        elif isinstance(inputs.get("messages"), list):
            for msg in inputs["messages"]:
                if (
                    isinstance(msg, dict)
                    and (msg.get("type") or msg.get("role")) in ("human", "user")
                    and isinstance(msg.get("content"), str)
                ):
                    text = msg["content"]
                elif isinstance(msg, list | tuple) and len(msg) == 2 and msg[0] in ("human", "user"):
                    text = str(msg[1])
        elif isinstance(inputs.get("input"), str):
            text = inputs["input"]
    if not text and inputs is not None:
        text = json.dumps(inputs, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the callback handler ---------------------------------------------------------------------


def _iso(value: _dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    return value.astimezone(_dt.UTC).isoformat()


def _usage_from_result(response: LLMResult) -> tuple[int, int, int]:
    """(prompt, completion, total) tokens from message usage_metadata, else the provider's llm_output."""
    prompt = completion = total = 0
    found = False
    for generations in response.generations:
        for gen in generations:
            usage = getattr(getattr(gen, "message", None), "usage_metadata", None)
            if usage:
                found = True
                prompt += int(usage.get("input_tokens", 0) or 0)
                completion += int(usage.get("output_tokens", 0) or 0)
                total += int(usage.get("total_tokens", 0) or 0)
    if not found and isinstance(response.llm_output, dict):
        usage = response.llm_output.get("token_usage") or response.llm_output.get("usage") or {}
        if isinstance(usage, Mapping):
            prompt = int(usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0)
            completion = int(usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0)
            total = int(usage.get("total_tokens", 0) or 0)
    if total == 0:
        total = prompt + completion
    return prompt, completion, total


def stage_of(metadata: Mapping[str, Any] | None, tags: Sequence[str] | None) -> str | None:
    """The pipeline stage a run belongs to: metadata 'stage', a 'stage:<name>' tag, or the LangGraph node."""
    metadata = metadata or {}
    if metadata.get("stage"):
        return str(metadata["stage"])
    for tag in tags or ():
        if tag.startswith("stage:"):
            return tag.split(":", 1)[1]
    node = metadata.get("langgraph_node")
    return str(node) if node else None


NOT_LLM_MODEL_TYPES = frozenset({"offline-planner"})
"""`_llm_type`s of chat models that are rule-based stand-ins: traced as runs, not counted as LLM calls."""


def is_llm_call(extra: Mapping[str, Any] | None) -> bool:
    """Whether a chat-model/LLM run is a real model call (the offline planner only speaks the interface).
    A run can also opt out with metadata ``skb_llm_call=False``."""
    extra = extra or {}
    params = extra.get("invocation_params") or {}
    metadata = extra.get("metadata") or {}
    if metadata.get("skb_llm_call") is False:
        return False
    return str(params.get("_type", "")) not in NOT_LLM_MODEL_TYPES


class LocalTracer(BaseTracer):
    """Records each run into a `TraceStore` as it starts and ends (so a crashed run still leaves its
    finished steps behind), and counts LLM calls and tokens per stage in memory.

    Pass it in ``config={"callbacks": [tracer]}`` (or use `callbacks_for`). It is safe to share across
    threads and questions; ``last_trace_id`` names the most recent root run it finished.
    """

    run_inline: bool = True  # parents must be recorded before their children, even under async

    def __init__(self, store: TraceStore | Path | str, *, background: bool = True, **kwargs: Any) -> None:
        """``background=True`` (default) writes from one daemon thread, so an agent running on an
        event loop (LangGraph Server, ``ainvoke``) never blocks on SQLite; call `flush()` before
        reading what was just traced (it also runs at interpreter exit)."""
        super().__init__(_schema_format="original+chat", **kwargs)
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self._usage: dict[str, tuple[int, int, int]] = {}
        self._stage_usage: dict[str, StageUsage] = {}
        self._counter_lock = threading.Lock()
        self.last_trace_id: str | None = None
        #: The most recent write failures (the last MAX_ERRORS: a server may fail for hours).
        self.errors: list[str] = []
        self.max_bytes, self.max_age_days = retention_from_env()
        self._since_prune = 0
        self._queue: _RowQueue | None = None
        self._writer: threading.Thread | None = None
        self._prune()
        if background:
            self._queue = _RowQueue(QUEUE_MAX_ROWS, QUEUE_MAX_BYTES, QUEUE_WAIT_S)
            self._writer = threading.Thread(target=self._drain, name="skb-trace-writer", daemon=True)
            self._writer.start()
            atexit.register(self.close)

    MAX_ERRORS = 50

    def _error(self, message: str) -> None:
        self.errors.append(message)
        if len(self.errors) > self.MAX_ERRORS:
            del self.errors[: len(self.errors) - self.MAX_ERRORS]

    @property
    def dropped(self) -> int:
        """Rows dropped because the writer's queue stayed full (0 without a background writer)."""
        return self._queue.dropped if self._queue is not None else 0

    def _store_rows(self, rows: list[dict[str, Any]]) -> None:
        try:
            if rows:
                self.store.upsert_many(rows)
                self._since_prune += len(rows)
                if self._since_prune >= PRUNE_EVERY:
                    self._prune()
        except Exception as exc:  # noqa: BLE001 -- keep the writer alive; report via .errors
            self._error(str(exc) if isinstance(exc, SKBError) else f"{type(exc).__name__}: {exc}")

    def _prune(self) -> None:
        self._since_prune = 0
        try:
            self.store.prune(max_bytes=self.max_bytes, max_age_days=self.max_age_days)
        except SKBError as exc:
            self._error(str(exc))

    def _drain(self) -> None:
        assert self._queue is not None
        while True:
            batch = self._queue.take()  # what has piled up, written in one transaction
            try:
                self._store_rows([r for r in batch if r is not None])
            finally:
                self._queue.done()
            if any(r is None for r in batch):  # close(): stop before interpreter teardown, not inside SQLite
                return

    def flush(self) -> None:
        """Block until every run recorded so far is in the database."""
        if self._queue is not None and self._writer is not None and self._writer.is_alive():
            self._queue.join()

    def close(self) -> None:
        """Flush and stop the writer thread (runs at exit: a daemon thread still inside SQLite
        while the interpreter finalises can crash the process)."""
        writer = self._writer
        if self._queue is None or writer is None or not writer.is_alive():
            return
        self.flush()
        self._queue.stop()
        writer.join(timeout=10)

    # -- hooks from BaseTracer ---------------------------------------------------------------
    def _persist_run(self, run: Run) -> None:
        # Every run is written by _on_run_update as it ends; the root needs nothing extra.
        self.last_trace_id = str(run.trace_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> Run:
        self._usage[str(run_id)] = _usage_from_result(response)
        return super().on_llm_end(response, run_id=run_id, **kwargs)

    def _on_run_create(self, run: Run) -> None:
        self._write(run, status="running")

    def _on_run_update(self, run: Run) -> None:
        usage = self._usage.pop(str(run.id), None)
        if usage is not None and is_llm_call(run.extra):
            self._count_stage(run, usage)
        self._write(run, status="error" if run.error else "success", usage=usage)

    # -- internals ---------------------------------------------------------------------------
    def _count_stage(self, run: Run, usage: tuple[int, int, int]) -> None:
        stage = stage_of(run.extra.get("metadata"), run.tags) or "?"
        with self._counter_lock:
            acc = self._stage_usage.setdefault(stage, StageUsage())
            acc.llm_calls += 1
            acc.prompt_tokens += usage[0]
            acc.completion_tokens += usage[1]

    def _write(self, run: Run, *, status: str, usage: tuple[int, int, int] | None = None) -> None:
        try:
            metadata = run.extra.get("metadata") if isinstance(run.extra, dict) else None
            run_type = "llm" if run.run_type == "chat_model" else run.run_type
            extra = {k: v for k, v in (run.extra or {}).items() if not k.startswith("__")}
            if run.run_type == "chat_model":
                extra["invocation_kind"] = "chat_model"
            prompt, completion, total = usage or (0, 0, 0)
            row = {
                "id": str(run.id),
                "trace_id": str(run.trace_id),
                "parent_run_id": str(run.parent_run_id) if run.parent_run_id else None,
                "dotted_order": run.dotted_order or "",
                "name": run.name or run_type,
                "run_type": run_type,
                "status": status,
                "inputs": _dump_payload(run.inputs, compact=run_type == "llm"),
                "outputs": _dump_payload(run.outputs, compact=run_type == "llm") if status != "running" else None,
                "error": _truncate(run.error, 20_000) if run.error else None,
                "start_time": _iso(run.start_time),
                "end_time": _iso(run.end_time) if status != "running" else None,
                "extra": _dump_payload(extra),
                "tags": json.dumps(list(run.tags or [])),
                "events": _dump_payload(run.events or []),
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total,
                "stage": stage_of(metadata, run.tags),
                "llm_call": int(run_type == "llm" and status != "running" and is_llm_call(run.extra)),
            }
            if self._queue is not None:
                if not self._queue.put(row, _row_size(row)) and self._queue.dropped in (1, 10, 100, 1_000, 10_000):
                    self._error(f"trace writer behind: {self._queue.dropped} run rows dropped so far "
                                       f"(queue bound {QUEUE_MAX_ROWS} rows / {QUEUE_MAX_BYTES >> 20} MB)")
            else:
                self._store_rows([row])
        except Exception as exc:  # noqa: BLE001 -- tracing must never fail the agent call it observes
            self._error(f"{type(exc).__name__}: {exc}")

    # -- readers -----------------------------------------------------------------------------
    def usage_by_stage(self) -> dict[str, StageUsage]:
        """LLM calls and tokens per stage over every run this tracer has seen."""
        with self._counter_lock:
            return {k: v.model_copy() for k, v in self._stage_usage.items()}

    def reset_usage(self) -> None:
        with self._counter_lock:
            self._stage_usage.clear()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> LocalTracer:
        return self  # shared state (store, counters) must not be copied by config merging

    def __copy__(self) -> LocalTracer:
        return self


# -- wiring helpers ---------------------------------------------------------------------------


def tracing_enabled() -> bool:
    return os.environ.get(TRACING_ENV, "1").strip().lower() not in {"0", "false", "off", "no"}


def default_trace_db(index_dir: Path | str | None) -> Path:
    """`$SKB_TRACE_DB` if set, else `<index_dir>/traces.sqlite`."""
    env = os.environ.get(TRACE_DB_ENV)
    if env:
        return Path(env).expanduser()
    if index_dir is None:
        raise ConfigError(f"no trace database: pass --index-dir DIR or --db PATH (or set {TRACE_DB_ENV})")
    return Path(index_dir) / DEFAULT_TRACE_FILE


_TRACERS: dict[Path, LocalTracer] = {}
_TRACERS_LOCK = threading.Lock()


def tracer_for(index_dir: Path | str | None, db: Path | str | None = None) -> LocalTracer:
    """The process-wide tracer writing to ``db`` (default: `default_trace_db(index_dir)`)."""
    path = Path(db).expanduser() if db is not None else default_trace_db(index_dir)
    key = path.resolve()
    with _TRACERS_LOCK:
        tracer = _TRACERS.get(key)
        if tracer is None:
            tracer = _TRACERS[key] = LocalTracer(TraceStore(path))
        return tracer


def callbacks_for(
    index_dir: Path | str | None,
    *,
    db: Path | str | None = None,
    enabled: bool | None = None,
    extra: Sequence[BaseCallbackHandler] = (),
) -> list[BaseCallbackHandler]:
    """Callbacks for one agent/eval call: the local tracer (unless disabled by ``enabled=False`` or
    `SKB_TRACING=0`) plus ``extra``. LangSmith's env-configured tracer is added by LangChain itself."""
    on = tracing_enabled() if enabled is None else enabled
    handlers: list[BaseCallbackHandler] = list(extra)
    if on:
        handlers.insert(0, tracer_for(index_dir, db))
    return handlers
