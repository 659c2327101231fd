"""The SQLite trace file: opening (WAL, incremental vacuum), writing runs, retention and reading trees.

Why one connection under a lock: callbacks arrive from LangGraph's worker threads, and concurrent
`skb` processes are serialised by SQLite's own file locking.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.results import StageUsage
from agent.tracing.runs import TraceRun, TraceSummary
from agent.tracing.schema import _COLUMNS, _DDL, _iso, _pack, _preview, _row_to_run
from agent.tracing.shared_inputs import resolve
from graphs.errors import ConfigError, TraceNotFoundError

DEFAULT_TRACE_FILE = "traces.sqlite"
TRACE_DB_ENV = "SKB_TRACE_DB"
"""Environment variable naming the trace database (overrides `<index_dir>/traces.sqlite`)."""
TRACING_ENV = "SKB_TRACING"
"""Set to 0/false/off to turn local tracing off."""


#: Retention of the trace database (checked when a writer opens it and every PRUNE_EVERY rows written):
#: whole traces older than $SKB_TRACE_MAX_DAYS days go, then the oldest traces until the live data
#: fits $SKB_TRACE_MAX_MB. 0 turns a limit off.
MAX_MB_ENV = "SKB_TRACE_MAX_MB"
MAX_DAYS_ENV = "SKB_TRACE_MAX_DAYS"
DEFAULT_MAX_MB = 512.0
DEFAULT_MAX_DAYS = 30.0


#: Size the WAL file is truncated to after each checkpoint.
WAL_LIMIT_BYTES = 16 * 1024 * 1024
#: A retention check truncates the WAL once it holds more than this share of the size limit.
WAL_SHARE = 0.25


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
                if deleted or (max_bytes and self._wal_bytes() > max_bytes * WAL_SHARE):
                    # the deletes' WAL pages, or the rows written since the last checkpoint, given back: the WAL
                    # otherwise grows to SQLite's automatic checkpoint (about 4 MB) whatever the size limit
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.rollback()
                raise ConfigError(f"cannot prune trace database {self.path}: {exc}; {_db_fix(exc)}") from exc
        return deleted

    def _wal_bytes(self) -> int:
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            return wal.stat().st_size
        except OSError:
            return 0

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
        """Every run of a trace, parents first, each with its inputs whole (a step stores a state value it
        shares with an earlier step of the trace as a reference: `agent.tracing.shared_inputs`)."""
        runs = [
            _row_to_run(r)
            for r in self._rows("SELECT * FROM runs WHERE trace_id = ? ORDER BY dotted_order", (trace_id,))
        ]
        resolve(runs)
        return runs

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
