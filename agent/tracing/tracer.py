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

The jobs live in their own modules and are re-exported here: `serialise` (payloads to bounded JSON),
`runs` (what readers get back), `schema` (the table and its rows), `writer` (the bounded queue),
`store` (the SQLite file and its retention); this module is the callback handler and its wiring.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run

from agent.results import StageUsage
from agent.tracing.runs import TraceRun, TraceSummary
from agent.tracing.schema import _COLUMNS, _JSON_COLUMNS, _iso  # noqa: F401 -- the columns: read by evals
from agent.tracing.serialise import (  # noqa: F401 -- MAX_PAYLOAD_CHARS and to_jsonable: re-exported
    MAX_PAYLOAD_CHARS,
    _dump_payload,
    _message_dict,
    _truncate,
    to_jsonable,
)
from agent.tracing.shared_inputs import TraceInputs
from agent.tracing.store import (
    DEFAULT_TRACE_FILE,
    MAX_DAYS_ENV,  # noqa: F401 -- the retention settings' names, read by tests
    MAX_MB_ENV,  # noqa: F401
    TRACE_DB_ENV,
    TRACING_ENV,
    TraceStore,
    retention_from_env,
)
from agent.tracing.writer import _row_size, _RowQueue
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

#: Rows written between two retention checks of the trace database.
PRUNE_EVERY = 2_000
#: Bounds of the writer's queue: rows and (approximate) payload bytes waiting for SQLite.
QUEUE_MAX_ROWS = 2_000
QUEUE_MAX_BYTES = 32 * 1024 * 1024
#: How long a traced call waits for room in a full queue before its row is dropped (and counted).
QUEUE_WAIT_S = 0.5
#: Runs started and not yet ended whose encoded inputs a tracer keeps for their end rows.
MAX_OPEN_RUNS = 10_000


# -- the callback handler ---------------------------------------------------------------------


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
        #: Run id -> (its inputs object, their JSON) from the run's start, reused by its end row.
        self._inputs_text: dict[str, tuple[Any, str | None]] = {}
        #: Per open trace, the state values its steps stored (a later step stores an unchanged one as a reference).
        self._trace_inputs = TraceInputs()
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
                self._store_rows(_latest_rows(batch))
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

    def _create_chat_model_run(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> Run:
        """The chat model's run, holding what the model read: each message's type, content and tool calls.

        Why not LangChain's: it encodes every message with ``dumpd``, which writes out a repr of each object in
        a tool result's artifact, on the agent's thread, for every planner round; the model reads no artifact."""
        run = super()._create_chat_model_run(
            serialized, [], run_id, tags=tags, parent_run_id=parent_run_id, metadata=metadata, name=name, **kwargs
        )
        run.inputs = {"messages": [[_message_dict(m, with_artifact=False) for m in batch] for batch in messages]}
        return run

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> Run:
        self._usage[str(run_id)] = _usage_from_result(response)
        return super().on_llm_end(response, run_id=run_id, **kwargs)

    def _on_run_create(self, run: Run) -> None:
        if len(self.order_map) > MAX_OPEN_RUNS:  # runs that never ended (a cancelled task) must not pile up
            self.order_map = {rid: order for rid, order in self.order_map.items() if str(rid) in self.run_map}
        self._write(run, status="running")

    def _on_run_update(self, run: Run) -> None:
        # LangChain's tracer keeps every run's (trace id, dotted order) for its children to find and never lets go:
        # about 1 kB a run, without bound in a server. A run's children have started by the time it ends.
        self.order_map.pop(run.id, None)
        if run.parent_run_id is None:
            self._trace_inputs.forget(str(run.trace_id))
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

    def _inputs_json(self, run: Run, status: str) -> str | None:
        """The run's inputs as JSON, encoded once per run: the start row's text is kept for its end row.

        Why: a LangGraph node's inputs are the whole graph state, and encoding them is most of what tracing
        costs a question; they are what the step saw when it started, so the end row repeats the start's
        text unless the run was given other inputs meanwhile (LangChain replaces ``run.inputs`` when inputs
        arrive with the end)."""
        key = str(run.id)
        compact = run.run_type in ("llm", "chat_model")
        if status == "running":
            text = None
            if run.parent_run_id is not None and run.run_type == "chain":  # a step: its inputs are the state
                text = self._trace_inputs.encode(str(run.trace_id), key, run.inputs)
            if text is None:
                text = _dump_payload(run.inputs, compact=compact)
            if len(self._inputs_text) >= MAX_OPEN_RUNS:  # runs that never ended (a cancelled task) must not pile up
                self._inputs_text.clear()
            self._inputs_text[key] = (run.inputs, text)
            return text
        held = self._inputs_text.pop(key, None)
        if held is not None and held[0] is run.inputs:
            return held[1]
        return _dump_payload(run.inputs, compact=compact)

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
                "inputs": self._inputs_json(run, status),
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


def _latest_rows(batch: Sequence[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """One row per run of a batch: its latest (a run that started and ended before the writer took the batch is
    written once, as ended: the upsert would replace the start row anyway, after compressing and storing it).
    A run keeps the place of its first row, so parents are still written before their children."""
    latest: dict[str, dict[str, Any]] = {}
    for row in batch:
        if row is not None:
            latest[row["id"]] = row
    return list(latest.values())


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
